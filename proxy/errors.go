package proxy

import (
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

// writeError writes f before anything else was written, in OpenAI's
// shape (see openAIRefusal), as chat completions and the pass-through
// answer it.
func writeError(w http.ResponseWriter, f protocol.Failure) {
	if a, ok := openAIRefusal(f); ok {
		a.write(w)
	}
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
