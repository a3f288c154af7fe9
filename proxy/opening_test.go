package proxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
)

// openingRoutes are the routes whose streams send the opening chunk at
// once: the pass-through and the guard (tools declared).
var openingRoutes = []string{"/standard/v1/chat/completions", "/two-stage/v1/chat/completions"}

// pacedChunk is one chunk of answer id, with delta and finish_reason.
func pacedChunk(id, delta, finish string) string {
	return fmt.Sprintf(`{"id":%q,"object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`,
		id, tsModel, delta, finish)
}

// sendEvents writes SSE events and flushes them.
func sendEvents(w http.ResponseWriter, data ...string) {
	for _, d := range data {
		fmt.Fprintf(w, "data: %s\n\n", d)
	}
	_ = http.NewResponseController(w).Flush()
}

// openingGateway is a guarded gateway in front of handler.
func openingGateway(t *testing.T, handler http.HandlerFunc) *httptest.Server {
	t.Helper()
	usrv := httptest.NewServer(handler)
	t.Cleanup(usrv.Close)
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}}
	return serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
}

// TestOpeningChunkAtOnce: the opening chunk (the role, nothing said)
// reaches the client while the upstream still waits to send its next
// chunk, on the pass-through and on the guard.
func TestOpeningChunkAtOnce(t *testing.T) {
	t.Parallel()
	for _, route := range openingRoutes {
		t.Run(route, func(t *testing.T) {
			t.Parallel()
			more := make(chan struct{}) // closed once the client has the opening
			gw := openingGateway(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				sendEvents(w, pacedChunk("c1", `{"role":"assistant","content":""}`, "null"))
				select {
				case <-more:
				case <-r.Context().Done():
					return
				}
				sendEvents(w, pacedChunk("c1", `{"content":"hello"}`, "null"), pacedChunk("c1", `{}`, `"stop"`), "[DONE]")
			})
			resp := post(t, testContext(t), gw, route, tsBody(true, ""), nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200: %s", resp.StatusCode, readAll(t, resp.Body))
			}
			sr := newSSEReader(resp.Body)
			first, ok, err := sr.next()
			if !ok || err != nil || !strings.Contains(first.Data, `"role":"assistant"`) {
				t.Fatalf("first item %+v (ok %v, err %v), want the opening chunk before the upstream's next", first, ok, err)
			}
			close(more)
			rest := dataOf(readSSE(t, resp.Body))
			if len(rest) != 3 || !strings.Contains(rest[0], "hello") || rest[2] != "[DONE]" {
				t.Errorf("events after the opening = %q, want the text, the finish and [DONE]", rest)
			}
		})
	}
}

// TestOpeningRetriedOnce: an answer that ends transiently right after its
// opening chunk, which the client already has, is asked again unseen: the
// client gets one opening chunk and one id, the second answer's text and
// finish.
func TestOpeningRetriedOnce(t *testing.T) {
	t.Parallel()
	for _, route := range openingRoutes {
		t.Run(route, func(t *testing.T) {
			t.Parallel()
			seen := make(chan struct{}) // closed once the client has the opening
			var calls atomic.Int32
			gw := openingGateway(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				if calls.Add(1) > 1 {
					sendEvents(w, pacedChunk("second", `{"role":"assistant","content":""}`, "null"),
						pacedChunk("second", `{"content":"hello"}`, "null"), pacedChunk("second", `{}`, `"stop"`), "[DONE]")
					return
				}
				sendEvents(w, pacedChunk("first", `{"role":"assistant","content":""}`, "null"))
				select {
				case <-seen:
				case <-r.Context().Done():
					return
				}
				sendEvents(w, pacedChunk("first", `{}`, `"insufficient_system_resource"`), "[DONE]")
			})
			resp := post(t, testContext(t), gw, route, tsBody(true, ""), nil)
			sr := newSSEReader(resp.Body)
			if first, ok, err := sr.next(); !ok || err != nil || !strings.Contains(first.Data, `"role":"assistant"`) {
				t.Fatalf("first item %+v (ok %v, err %v), want the opening chunk", first, ok, err)
			}
			close(seen)
			events := dataOf(readSSE(t, resp.Body))
			if len(events) != 3 || events[2] != "[DONE]" {
				t.Fatalf("events after the opening = %q, want the text, the finish and [DONE]", events)
			}
			for _, ev := range events[:2] {
				if strings.Contains(ev, `"role"`) {
					t.Errorf("a second opening chunk: %s", ev)
				}
				if id := chunkID(t, ev); id != "first" {
					t.Errorf("chunk id = %q, want the first answer's, %q: %s", id, "first", ev)
				}
			}
			if !strings.Contains(events[0], "hello") || !strings.Contains(events[1], `"finish_reason":"stop"`) {
				t.Errorf("events = %q, want the second answer's text and finish", events)
			}
			if n := calls.Load(); n != 2 {
				t.Errorf("upstream calls = %d, want 2", n)
			}
		})
	}
}

// asFirst is a chunk's data with the id and created time of first, as the
// gateway gives every chunk of a response those of its first chunk; [DONE]
// as it is.
func asFirst(t *testing.T, data, first string) string {
	t.Helper()
	if data == "[DONE]" {
		return data
	}
	var c, f struct {
		ID      string `json:"id"`
		Created int64  `json:"created"`
	}
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		t.Fatalf("chunk %s: %v", data, err)
	}
	if err := json.Unmarshal([]byte(first), &f); err != nil {
		t.Fatalf("chunk %s: %v", first, err)
	}
	data = strings.Replace(data, fmt.Sprintf(`"id":%q`, c.ID), fmt.Sprintf(`"id":%q`, f.ID), 1)
	return strings.Replace(data, fmt.Sprintf(`"created":%d`, c.Created), fmt.Sprintf(`"created":%d`, f.Created), 1)
}

// chunkID is the id of a chunk's data; "" for [DONE].
func chunkID(t *testing.T, data string) string {
	t.Helper()
	if data == "[DONE]" {
		return ""
	}
	var c struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		t.Fatalf("chunk %s: %v", data, err)
	}
	return c.ID
}
