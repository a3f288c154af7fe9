package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
)

// TestPacedStreamFlushedPerEvent: the gateway gathers the events it
// writes until it has to wait for the upstream, so a paced stream still
// reaches the client event by event. The upstream sends its second
// content event only once the client has received the first; were the
// first held back, the upstream would wait in vain.
func TestPacedStreamFlushedPerEvent(t *testing.T) {
	t.Parallel()
	const head = `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":`
	for _, route := range []string{"/standard/v1", "/v1"} {
		t.Run(strings.TrimPrefix(route, "/"), func(t *testing.T) {
			t.Parallel()
			got := make(chan struct{})
			waited := make(chan bool, 1) // whether the upstream's wait ran out
			usrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				send := func(data string) {
					_, _ = w.Write([]byte("data: " + data + "\n\n"))
					w.(http.Flusher).Flush()
				}
				send(head + `{"role":"assistant","content":""},"finish_reason":null}]}`)
				send(head + `{"content":"first"},"finish_reason":null}]}`)
				select {
				case <-got:
					waited <- false
				case <-time.After(5 * time.Second):
					waited <- true
				}
				send(head + `{"content":"second"},"finish_reason":null}]}`)
				send(head + `{},"finish_reason":"stop"}]}`)
				send("[DONE]")
			}))
			t.Cleanup(usrv.Close)
			gw := serveGateway(t, proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: usrv.URL + "/v1"}}},
				proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			body := `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}],` +
				`"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object"}}}]}`
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+route+"/chat/completions", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := gw.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			var seen []string
			for sc.Scan() {
				line := sc.Bytes()
				if bytes.Contains(line, []byte(`"content":"first"`)) {
					close(got)
				}
				if bytes.HasPrefix(line, []byte("data: ")) {
					seen = append(seen, string(line))
				}
			}
			if len(seen) == 0 || seen[len(seen)-1] != "data: [DONE]" {
				t.Fatalf("events %q, want a stream ending with [DONE]", seen)
			}
			if <-waited {
				t.Errorf("the client got the first content event only after the upstream sent the second: events were held back")
			}
		})
	}
}
