package proxy_test

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
)

// TestForwardHeadersRefuseCodings: FORWARD_HEADERS cannot name a framing
// or content-coding header, nor a prefix that holds one: with
// Accept-Encoding forwarded, the upstream's transport no longer decodes
// its answers, and a compressed body passed the redaction unread. The
// error names the value given.
func TestForwardHeadersRefuseCodings(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Accept-Encoding", "accept-encoding", "Accept-", "Content-Encoding", "Content-", "Range", "If-Range", "Te", "Expect"} {
		cfg := config(closedServer(t))
		cfg.ForwardHeaders = []string{"X-Route-", name}
		_, err := proxy.New(cfg, proxy.Options{})
		var fe *proxy.FieldError
		if !errors.As(err, &fe) || fe.Field != "ForwardHeaders" || !strings.Contains(fe.Problem, strconv.Quote(name)) {
			t.Errorf("FORWARD_HEADERS=X-Route-,%s: New = %v, want a ForwardHeaders error naming %q", name, err, name)
		}
	}
}

// codingKey is the gateway's key in the content-coding tests.
const (
	codingKey     = "sk-gateway-codingKEY0123456789abcdef"
	codingKeyTail = "codingKEY0123456789abcdef"
)

// compressed returns body in the content coding named.
func compressed(t *testing.T, coding, body string) []byte {
	t.Helper()
	var b bytes.Buffer
	var w io.WriteCloser
	switch coding {
	case "gzip":
		w = gzip.NewWriter(&b)
	case "deflate": // as RFC 9110 defines it: zlib
		w = zlib.NewWriter(&b)
	case "raw deflate": // as some servers send it
		w, _ = flate.NewWriter(&b, flate.DefaultCompression)
	default: // sent as it is, labelled with a coding nobody decodes
		b.WriteString(body)
		return b.Bytes()
	}
	if _, err := io.WriteString(w, body); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestUpstreamStreamDecoded: a stream the upstream compressed unasked is
// decoded as it arrives, its events relayed to their [DONE].
func TestUpstreamStreamDecoded(t *testing.T) {
	t.Parallel()
	sse := "data: " + `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"` + testModel +
		`","choices":[{"index":0,"delta":{"role":"assistant","content":"streamed fine"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"
	body := compressed(t, "deflate", sse)
	usrv := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Encoding", "deflate")
		_, _ = w.Write(body)
	}))
	cfg := config(usrv)
	cfg.Providers[0].APIKey = codingKey
	gw := newGateway(t, cfg)
	resp := post(t, testContext(t), gw, "/standard/v1/chat/completions", chatBody(true), nil)
	data := dataOf(readSSE(t, resp.Body))
	if resp.StatusCode != http.StatusOK || len(data) != 2 || !strings.Contains(data[0], "streamed fine") || data[1] != "[DONE]" {
		t.Errorf("status %d, events %q; want the chunk and [DONE]", resp.StatusCode, data)
	}
}

// TestUpstreamCodingsDecoded: an upstream that compresses its answer
// unasked (deflate, zlib or raw, which the transport does not undo as it
// does the gzip it asks for) has it decoded before the gateway redacts
// and relays it, on the chat route and on a pass-through route, for a
// success and for an error that quotes the key: the client reads JSON,
// with no Content-Encoding, and no byte of the key. A coding the gateway
// cannot decode (br) is a 502 that says so, never the body relayed. Before,
// the compressed bytes reached the client with their Content-Encoding
// dropped: unreadable, and the key inside once inflated.
func TestUpstreamCodingsDecoded(t *testing.T) {
	t.Parallel()
	chatOK := `{"id":"c1","object":"chat.completion","created":1,"model":"` + testModel +
		`","choices":[{"index":0,"message":{"role":"assistant","content":"fine"},"finish_reason":"stop"}]}`
	leak := `{"error":{"message":"Incorrect API key provided: ` + codingKey + `","type":"invalid_request_error","code":"invalid_api_key"}}`
	embedding := `{"object":"list","data":[{"embedding":[0.5],"note":"` + codingKey + `"}]}`
	tests := []struct {
		name, path, coding, answer string
		status, wantStatus         int
		want                       string // in the client's body
	}{
		{"chat success, deflate", "/standard/v1/chat/completions", "deflate", chatOK, 200, 200, `"content":"fine"`},
		{"chat error, deflate", "/standard/v1/chat/completions", "deflate", leak, 401, 401, "Incorrect API key provided: [redacted]"},
		{"chat error, raw deflate", "/standard/v1/chat/completions", "raw deflate", leak, 401, 401, "Incorrect API key provided: [redacted]"},
		{"guarded chat error, deflate", "/two-stage/v1/chat/completions", "deflate", leak, 401, 401, "Incorrect API key provided: [redacted]"},
		{"pass-through success, deflate", "/v1/embeddings", "deflate", embedding, 200, 200, `"note":"[redacted]"`},
		{"pass-through error, raw deflate", "/v1/embeddings", "raw deflate", leak, 400, 400, "Incorrect API key provided: [redacted]"},
		{"pass-through error, gzip and deflate", "/v1/embeddings", "gzip, deflate", leak, 400, 400, "Incorrect API key provided: [redacted]"},
		{"chat error, br", "/standard/v1/chat/completions", "br", leak, 401, 502, "upstream_content_encoding"},
		{"pass-through success, br", "/v1/embeddings", "br", embedding, 200, 502, "upstream_content_encoding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := []byte(tt.answer)
			codings := strings.Split(tt.coding, ", ")
			for _, c := range codings {
				body = compressed(t, c, string(body))
			}
			gw := codingUpstream(t, strings.ReplaceAll(tt.coding, "raw deflate", "deflate"), tt.status, body)
			req := `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`
			raw := wire(t, gw, "POST "+tt.path+" HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nContent-Type: application/json\r\n"+
				"Content-Length: "+strconv.Itoa(len(req))+"\r\n\r\n"+req)
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
			if err != nil {
				t.Fatalf("read answer: %v", err)
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("read body: %v", err)
			}
			if resp.StatusCode != tt.wantStatus || !json.Valid(got) || !strings.Contains(string(got), tt.want) {
				t.Errorf("status %d, body %.300q; want %d and JSON with %s", resp.StatusCode, got, tt.wantStatus, tt.want)
			}
			if ce := resp.Header.Get("Content-Encoding"); ce != "" {
				t.Errorf("Content-Encoding %q reached the client", ce)
			}
			for _, inflated := range [][]byte{raw, got, inflate(got)} {
				if bytes.Contains(inflated, []byte(codingKeyTail)) {
					t.Errorf("the key reached the client: %.300q", inflated)
				}
			}
		})
	}
}

// codingUpstream is a gateway in front of an upstream that answers every
// request with status and body, labelled Content-Encoding coding.
func codingUpstream(t *testing.T, coding string, status int, body []byte) *httptest.Server {
	t.Helper()
	usrv := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", coding)
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	cfg := config(usrv)
	cfg.Providers[0].APIKey = codingKey
	cfg.Retry = proxy.Retry(0, 0)
	return serveGateway(t, cfg, proxy.Options{TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
}

// inflate is b inflated as zlib, raw deflate or gzip, whichever reads;
// b itself when none does.
func inflate(b []byte) []byte {
	readers := []func(io.Reader) (io.Reader, error){
		func(r io.Reader) (io.Reader, error) { return zlib.NewReader(r) },
		func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) },
		func(r io.Reader) (io.Reader, error) { return flate.NewReader(r), nil },
	}
	for _, open := range readers {
		r, err := open(bytes.NewReader(b))
		if err != nil {
			continue
		}
		if out, err := io.ReadAll(r); err == nil && len(out) > 0 {
			return out
		}
	}
	return b
}

// TestPassThroughRedactsEncodedKey: a pass-through answer that writes the
// gateway's key back base64-encoded (inside a Basic credential, cut
// across two writes of a stream) or percent-encoded byte by byte reaches
// the client redacted, whole or streamed. Before, both passed.
func TestPassThroughRedactsEncodedKey(t *testing.T) {
	t.Parallel()
	b64 := base64.StdEncoding.EncodeToString([]byte("user:" + passKey))
	var pct strings.Builder
	for i := 0; i < len(passKey); i++ {
		fmt.Fprintf(&pct, "%%%02X", passKey[i])
	}
	tests := []struct {
		name, contentType string
		parts             []string
	}{
		{"JSON, base64", "application/json", []string{`{"auth":"Basic ` + b64 + `"}`}},
		{"JSON, percent-encoded", "application/json", []string{`{"url":"https://x/?k=` + pct.String() + `"}`}},
		{"stream, base64 cut by a flush", "text/event-stream", []string{"data: {\"auth\":\"Basic " + b64[:20], b64[20:] + "\"}\n\ndata: [DONE]\n\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			gw := leakyUpstream(t, func(w http.ResponseWriter, _ *http.Request, flush func()) {
				w.Header().Set("Content-Type", tt.contentType)
				for _, p := range tt.parts {
					_, _ = io.WriteString(w, p)
					flush()
				}
			})
			resp, got := embeddingsOnWire(t, gw)
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(got), "[redacted]") {
				t.Errorf("answer %d %q, want a 200 with the key redacted", resp.StatusCode, got)
			}
			for _, leak := range []string{b64[12:40], pct.String()[30:60]} {
				if strings.Contains(string(got), leak) {
					t.Errorf("answer %q holds %q of the encoded key", got, leak)
				}
			}
		})
	}
}
