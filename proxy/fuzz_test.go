package proxy_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/sim"
)

// FuzzChatRequest sends any body through the real router and both
// protocols to the simulated model, in process: the gateway never panics
// and never fails on its own (no 5xx), and every answer is a stream, a
// chat completion, or an error in OpenAI's shape.
func FuzzChatRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"phasegate-sim","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"phasegate-sim","stream":true,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object"}}}]}`,
		`{"model":"phasegate-sim-looping","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"go"}],"tools":[{"type":"function","function":{"name":"a"}}]}`,
		`{"model":"x","messages":"hi"}`,
		`{"model":"x","messages":[{"role":"tool","tool_call_id":"c","content":[{"type":"text","text":"r"}]}]}`,
		`[]`, `null`, ``, `{"model":1}`, `{"messages":[{}]}`,
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	h, err := proxy.New(proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: sim.BaseURL, Simulated: true}}},
		proxy.Options{Transport: &sim.Transport{}, DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string, standard bool) {
		path := "/v1/chat/completions"
		if standard {
			path = "/standard/v1/chat/completions"
		}
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		got := rec.Body.Bytes()
		switch {
		case rec.Code >= 500:
			t.Fatalf("status %d for %q: %s", rec.Code, body, got)
		case rec.Code >= 400:
			var e struct {
				Error *struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal(got, &e) != nil || e.Error == nil || e.Error.Message == "" {
				t.Fatalf("status %d without an OpenAI-style error for %q: %s", rec.Code, body, got)
			}
		case strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream"):
			if !bytes.Contains(got, []byte("data: [DONE]")) {
				t.Fatalf("a stream without [DONE] for %q: %s", body, got)
			}
		default:
			var c struct {
				Choices []json.RawMessage `json:"choices"`
			}
			if json.Unmarshal(got, &c) != nil || c.Choices == nil {
				t.Fatalf("status %d, neither a stream nor a completion, for %q: %s", rec.Code, body, got)
			}
		}
	})
}
