package proxy

import (
	"net/http"
	"testing"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/protocol"
)

// TestDecide: the one function that chooses a chat request's protocol,
// for every reason it gives.
func TestDecide(t *testing.T) {
	t.Parallel()
	tools := []chat.Tool{{Type: "function", Function: chat.FunctionDef{Name: "read_file"}}}
	const observed = "project-observed"
	newHandler := func(t *testing.T, deflt string) *Handler {
		t.Helper()
		cfg := Config{Providers: []Provider{{Name: "openai", BaseURL: "http://127.0.0.1:1/v1"}},
			GuardProjectModes: map[string]protocol.Mode{observed: protocol.ModeObserve},
			Envelopes:         []EnvelopeRule{{Pattern: "enveloped-*", Mode: protocol.EnvelopeRequired}}}
		h, err := New(cfg, Options{TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), DefaultProtocol: deflt})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	tests := []struct {
		name    string
		deflt   string // the configured default of /v1
		route   string
		header  http.Header
		req     chat.Request
		project string
		want    string
		reason  reason
		judged  bool
		observe bool
	}{
		{name: "standard route", deflt: ProtocolTwoStage, route: ProtocolStandard, req: chat.Request{Model: "m", Tools: tools},
			want: ProtocolStandard, reason: reasonRoute},
		{name: "two-stage route", deflt: ProtocolStandard, route: ProtocolTwoStage, req: chat.Request{Model: "m"},
			want: ProtocolTwoStage, reason: reasonRoute, judged: true},
		{name: "/v1, standard by default", deflt: ProtocolStandard, route: protocolDefault, req: chat.Request{Model: "m", Tools: tools},
			want: ProtocolStandard, reason: reasonDefault},
		{name: "/v1 with tools", deflt: ProtocolTwoStage, route: protocolDefault, req: chat.Request{Model: "m", Tools: tools},
			want: ProtocolTwoStage, reason: reasonJudged, judged: true},
		{name: "/v1 with an envelope header", deflt: ProtocolTwoStage, route: protocolDefault, req: chat.Request{Model: "m"},
			header: http.Header{EnvelopeHeader: {"required"}}, want: ProtocolTwoStage, reason: reasonJudged, judged: true},
		{name: "/v1 with an envelope rule", deflt: ProtocolTwoStage, route: protocolDefault, req: chat.Request{Model: "enveloped-1"},
			want: ProtocolTwoStage, reason: reasonJudged, judged: true},
		{name: "/v1 with an envelope header the guard cannot read", deflt: ProtocolTwoStage, route: protocolDefault, req: chat.Request{Model: "m"},
			header: http.Header{EnvelopeHeader: {"sometimes"}}, want: ProtocolTwoStage, reason: reasonJudged, judged: true},
		{name: "/v1, nothing to judge", deflt: ProtocolTwoStage, route: protocolDefault, req: chat.Request{Model: "m"},
			want: ProtocolStandard, reason: reasonNothingToJudge},
		{name: "n > 1 on /v1", deflt: ProtocolTwoStage, route: protocolDefault, req: chat.Request{Model: "m", Tools: tools, N: 2},
			want: ProtocolStandard, reason: reasonChoices, judged: true},
		{name: "n > 1 on the two-stage route", deflt: ProtocolTwoStage, route: ProtocolTwoStage, req: chat.Request{Model: "m", N: 3},
			want: ProtocolStandard, reason: reasonChoices, judged: true},
		{name: "observe mode", deflt: ProtocolTwoStage, route: protocolDefault, req: chat.Request{Model: "m", Tools: tools}, project: observed,
			want: ProtocolStandard, reason: reasonObserve, judged: true, observe: true},
		{name: "observe mode, n > 1", deflt: ProtocolTwoStage, route: ProtocolTwoStage, req: chat.Request{Model: "m", N: 2}, project: observed,
			want: ProtocolStandard, reason: reasonChoices, judged: true, observe: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHandler(t, tt.deflt)
			d := h.decide(tt.route, tt.header, &tt.req, tt.project)
			if d.strategy.Name() != tt.want || d.reason != tt.reason || d.judged != tt.judged || d.observe != tt.observe {
				t.Errorf("decide = %s (%s, judged %v, observe %v), want %s (%s, judged %v, observe %v)",
					d.strategy.Name(), d.reason, d.judged, d.observe, tt.want, tt.reason, tt.judged, tt.observe)
			}
		})
	}
	t.Run("fallback", func(t *testing.T) {
		t.Parallel()
		h := newHandler(t, ProtocolTwoStage)
		d := h.decide(protocolDefault, nil, &chat.Request{Model: "m", Tools: tools}, "").fallback(h.standard)
		if d.strategy.Name() != ProtocolStandard || d.reason != reasonFallback || !d.judged {
			t.Errorf("fallback = %s (%s, judged %v), want %s (%s, judged)", d.strategy.Name(), d.reason, d.judged, ProtocolStandard, reasonFallback)
		}
		hdr := http.Header{}
		d.setHeaders(hdr)
		if hdr.Get("X-Phasegate-Protocol") != ProtocolStandard || hdr.Get("X-Phasegate-Fallback") != ProtocolTwoStage {
			t.Errorf("fallback headers = %v", hdr)
		}
	})
}
