package proxy_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
)

// cutUpstream streams two chunks of an answer, then cuts the connection.
func cutUpstream(t *testing.T) string {
	srv := newTestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{`{"role":"assistant","content":""}`, `{"content":"half an "}`, `{"content":"answer"}`} {
			_, _ = w.Write([]byte(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"` + tsModel + `","choices":[{"index":0,"delta":` + c + `,"finish_reason":null}]}` + "\n\n"))
		}
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // cut mid-stream
	}))
	return srv.URL + "/v1"
}

// TestStreamFailureEndsOnce: a stream that fails after its first byte
// ends as every stream ends, on every route: one in-band error, then
// [DONE], nothing after; where the guard writes, the error carries the
// phase metadata of the chunks before it.
func TestStreamFailureEndsOnce(t *testing.T) {
	for _, route := range []string{"/standard/v1/chat/completions", "/two-stage/v1/chat/completions", "/v1/chat/completions"} {
		t.Run(route, func(t *testing.T) {
			cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: cutUpstream(t)}}}
			gw := serveGateway(t, cfg, proxy.Options{TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
			resp, got := tsPost(t, gw, route, tsBody(true, ""), nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, want 200 (the stream had started): %s", resp.StatusCode, got)
			}
			data := tsData(t, got)
			if len(data) < 3 || data[len(data)-1] != "[DONE]" {
				t.Fatalf("stream ends with %q; want an in-band error, then [DONE]", data)
			}
			var ev struct {
				Error *struct {
					Code string `json:"code"`
				} `json:"error"`
				Phase *struct {
					Phase string `json:"phase"`
				} `json:"phasegate"`
			}
			if err := json.Unmarshal([]byte(data[len(data)-2]), &ev); err != nil || ev.Error == nil || ev.Error.Code != "upstream_truncated" {
				t.Fatalf("event before [DONE] = %s; want the upstream_truncated error", data[len(data)-2])
			}
			if strings.Count(string(got), "[DONE]") != 1 || strings.Count(string(got), `"error"`) != 1 {
				t.Errorf("stream has %d [DONE] and %d errors; want one each:\n%s", strings.Count(string(got), "[DONE]"), strings.Count(string(got), `"error"`), got)
			}
			guarded := resp.Header.Get("X-Phasegate-Protocol") == proxy.ProtocolTwoStage
			if guarded && (ev.Phase == nil || ev.Phase.Phase == "") {
				t.Errorf("the guard's error event carries no phase metadata: %s", data[len(data)-2])
			}
		})
	}
}
