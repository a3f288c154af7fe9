package proxy_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// TestProtocolHeaderOnce: whichever way a chat request's protocol was
// decided, the answer carries X-Phasegate-Protocol exactly once, naming
// the protocol that served it, and the headers that say why it is not the
// one asked for (warning, fallback, observe mode) only when they apply,
// once each. The answers are read off the wire by a raw client, so a
// header written twice shows as two lines.
func TestProtocolHeaderOnce(t *testing.T) {
	t.Parallel()
	text := sim.NewStream(tsModel).Role().Content("hi").Finish("stop").Done().Reply()
	completion := sim.Completion(tsModel, map[string]any{"content": "hi"}, "stop", nil)
	answer := func(r proxytest.Received) sim.Reply {
		if bytes.Contains(r.Body, []byte(`"stream":true`)) {
			return text
		}
		return completion
	}
	// The call comes with its opening in one write, so the guard fails
	// before the headers go out (see TestTwoStageE2EFallback).
	call := sim.NewStream(tsModel).Role().ToolCall(0, "call_1", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Burst().Done().Reply()
	toolLess := `{"model":"` + tsModel + `","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name    string
		path    string
		body    string
		respond proxytest.Responder
		// tracer breaks the guard; observe sets the guard's mode.
		tracer  protocol.Tracer
		observe bool
		want    string
		// why is the one header that tells why, with its value; "" for none.
		why, whyValue string
	}{
		{name: "guarded route", path: "/two-stage/v1/chat/completions", body: tsBody(false, ""), respond: answer, want: proxy.ProtocolTwoStage},
		{name: "guarded on /v1", path: "/v1/chat/completions", body: tsBody(true, ""), respond: answer, want: proxy.ProtocolTwoStage},
		{name: "standard route", path: "/standard/v1/chat/completions", body: tsBody(false, ""), respond: answer, want: proxy.ProtocolStandard},
		{name: "tool-less on /v1", path: "/v1/chat/completions", body: toolLess, respond: answer, want: proxy.ProtocolStandard},
		{name: "n > 1", path: "/v1/chat/completions", body: tsBody(false, `"n":2`), respond: answer, want: proxy.ProtocolStandard,
			why: "X-Phasegate-Warning", whyValue: "n > 1 is served by the standard protocol: the guard judges a single choice"},
		{name: "guard fallback", path: "/v1/chat/completions", body: tsBody(true, ""), respond: proxytest.Script(call, text),
			tracer: panicTracer{on: metrics.TraceToolCall}, want: proxy.ProtocolStandard, why: "X-Phasegate-Fallback", whyValue: proxy.ProtocolTwoStage},
		{name: "observe mode", path: "/v1/chat/completions", body: tsBody(false, ""), respond: answer, observe: true,
			want: proxy.ProtocolStandard, why: proxy.ModeHeader, whyValue: string(protocol.ModeObserve)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, usrv := proxytest.NewServer(t, tt.respond)
			cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}}
			if tt.observe {
				cfg.GuardMode = protocol.ModeObserve
			}
			gw := serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage,
				TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, tt.tracer)})
			resp, body := exchangeWith(t, strings.TrimPrefix(gw.URL, "http://"), rawHTTP(http.MethodPost, tt.path, "application/json", tt.body, ""))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200: %s", resp.StatusCode, body)
			}
			if got := resp.Header.Values("X-Phasegate-Protocol"); len(got) != 1 || got[0] != tt.want {
				t.Errorf("X-Phasegate-Protocol lines = %q, want one, %q", got, tt.want)
			}
			for _, k := range []string{"X-Phasegate-Warning", "X-Phasegate-Fallback", proxy.ModeHeader} {
				got := resp.Header.Values(k)
				switch {
				case k == tt.why && (len(got) != 1 || got[0] != tt.whyValue):
					t.Errorf("%s lines = %q, want one, %q", k, got, tt.whyValue)
				case k != tt.why && len(got) != 0:
					t.Errorf("%s lines = %q, want none", k, got)
				}
			}
		})
	}
}
