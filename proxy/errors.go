package proxy

import (
	"encoding/json"
	"net/http"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/protocol"
)

// Failures of the upstream transport; protocol.Classify maps them to the
// client's error.
var (
	ErrFirstByteTimeout    = protocol.ErrFirstByteTimeout
	ErrIdleTimeout         = protocol.ErrIdleTimeout
	ErrRequestTimeout      = protocol.ErrRequestTimeout
	ErrUpstreamUnreachable = protocol.ErrUpstreamUnreachable
)

// statusClientClosed is the status logged for a client that went away.
const statusClientClosed = protocol.StatusClientClosed

func formatBytes(n int64) string { return protocol.FormatBytes(n) }

// writeError writes f before anything else was written: an upstream
// error is relayed as it came, any other in OpenAI's shape, and nothing
// for a client that left. The credentials an upstream quoted back (a key
// in an "invalid API key" message) are redacted on the way out, as every
// error body is (exitWriter).
func writeError(w http.ResponseWriter, f protocol.Failure) {
	if f.Relay != nil {
		copyHeader(w.Header(), f.Relay.Header)
		w.WriteHeader(f.Relay.Status)
		_, _ = w.Write(f.Relay.Body)
		return
	}
	if f.Error.Status == statusClientClosed {
		return
	}
	writeJSONError(w, f.Error)
}

// failureJSON is the status and JSON body of the answer writeError gives
// f (an upstream's error body that is not JSON gives the gateway's own),
// for a resume to answer the same; ok is false for a client that left.
// The body is not redacted yet.
func failureJSON(f protocol.Failure) (status int, body []byte, ok bool) {
	if f.Relay != nil {
		if json.Valid(f.Relay.Body) {
			return f.Relay.Status, f.Relay.Body, true
		}
		return f.Relay.Status, f.Error.Body(), true
	}
	if f.Error.Status == statusClientClosed {
		return 0, nil, false
	}
	return f.Error.Status, f.Error.Body(), true
}

func writeJSONError(w http.ResponseWriter, e *chat.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.Body())
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
}
