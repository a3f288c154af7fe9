package proxy_test

// The rules notice (GUARD_RULES_NOTICE, X-Phasegate-Rules-Notice): sent
// only when on, only to the upstream, counted and traced; and how many
// re-asks it saves with the simulated looping models.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
	"github.com/phasegate/phasegate/tools"
)

// rnTraces collects the guard's trace events.
type rnTraces struct {
	mu  sync.Mutex
	evs []metrics.Trace
}

func (c *rnTraces) Trace(_ context.Context, ev metrics.Trace) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evs = append(c.evs, ev)
}

func (c *rnTraces) count(kind metrics.TraceKind) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ev := range c.evs {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// rnGateway serves the guard under profile, with the rules notice
// configured on or off, in front of the simulated models.
func rnGateway(t *testing.T, on bool, profile protocol.Profile) (*proxytest.Upstream, *rnTraces, *prometheus.Registry, *httptest.Server) {
	t.Helper()
	up, usrv := proxytest.NewServer(t, proxytest.Simulated())
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, []string{"openai"})
	tr := &rnTraces{}
	cfg := config(usrv)
	cfg.GuardProfile = profile
	gw := serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, Metrics: m, Gatherer: reg,
		TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{Metrics: m, RulesNotice: on}, tr)})
	return up, tr, reg, gw
}

const rnWeather = `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`
const rnCode = `{"type":"function","function":{"name":"execute_code","parameters":{"type":"object","properties":{"code":{"type":"string"}},"required":["code"]}}}`

// rnAgent runs an agent turn with raw requests until the model answers
// (at most 10 requests): it executes every call it gets, and returns the
// client requests it made and the contents it was shown.
func rnAgent(t *testing.T, gw *httptest.Server, model, tool string, header http.Header) (requests int, shown string) {
	t.Helper()
	ctx := testContext(t)
	msgs := []any{map[string]any{"role": "system", "content": "You are a helpful agent."}, map[string]any{"role": "user", "content": "Go."}}
	for requests < 10 {
		requests++
		body, _ := json.Marshal(map[string]any{"model": model, "messages": msgs, "tools": []json.RawMessage{json.RawMessage(tool)}})
		resp := post(t, ctx, gw, "/v1/chat/completions", string(body), header)
		raw := readAll(t, resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", requests, resp.StatusCode, raw)
		}
		var c struct {
			Choices []struct {
				Message struct {
					Content   string            `json:"content"`
					ToolCalls []json.RawMessage `json:"tool_calls"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(raw, &c); err != nil || len(c.Choices) != 1 {
			t.Fatalf("request %d: %v %s", requests, err, raw)
		}
		msg := c.Choices[0].Message
		shown += msg.Content
		if len(msg.ToolCalls) == 0 {
			return requests, shown
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": msg.Content, "tool_calls": msg.ToolCalls})
		for _, tc := range msg.ToolCalls {
			var call struct {
				ID       string `json:"id"`
				Function struct {
					Arguments string `json:"arguments"`
				} `json:"function"`
			}
			_ = json.Unmarshal(tc, &call)
			result := "done\n"
			if strings.Contains(call.Function.Arguments, "csv") {
				result = "4817.25\n"
			}
			msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": call.ID, "content": result})
		}
	}
	t.Fatalf("%s never answered in %d requests", model, requests)
	return requests, shown
}

// rulesIn returns how many of a received request's messages are the
// rules notice, and whether the first one comes right after the leading
// system messages.
func rulesIn(t *testing.T, r proxytest.Received) (n int, placed bool) {
	t.Helper()
	var req struct {
		Messages []struct{ Role, Content string } `json:"messages"`
	}
	if err := r.Decode(&req); err != nil {
		t.Fatal(err)
	}
	lead := 0
	for lead < len(req.Messages) && req.Messages[lead].Role == "system" && !strings.HasPrefix(req.Messages[lead].Content, tools.RulesNoticeLead) {
		lead++
	}
	for _, m := range req.Messages {
		if strings.HasPrefix(m.Content, tools.RulesNoticeLead) {
			n++
		}
	}
	placed = lead < len(req.Messages) && lead == 1 && strings.HasPrefix(req.Messages[lead].Content, tools.RulesNoticeLead)
	return n, placed
}

// TestRulesNoticeOnlyWhenOn: off, no upstream call carries the notice;
// on by the header or the setting, every upstream call of the turn
// carries it once, after the client's system message; the client is
// never shown it; each guarded request counts and traces it once.
func TestRulesNoticeOnlyWhenOn(t *testing.T) {
	t.Parallel()
	on := http.Header{proxy.RulesNoticeHeader: {"true"}}
	for _, tc := range []struct {
		name       string
		configured bool
		header     http.Header
		want       bool
	}{
		{"off", false, nil, false},
		{"header false leaves it off", false, http.Header{proxy.RulesNoticeHeader: {"false"}}, false},
		{"on by the header", false, on, true},
		{"on by the setting", true, nil, true},
		{"header false cannot turn the setting off", true, http.Header{proxy.RulesNoticeHeader: {"false"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up, tr, reg, gw := rnGateway(t, tc.configured, protocol.ProfileAgent)
			requests, shown := rnAgent(t, gw, sim.VerifyModel, rnCode, tc.header)
			if strings.Contains(shown, tools.RulesNoticeLead) {
				t.Errorf("the client was shown the rules notice: %q", shown)
			}
			received := up.Received()
			for i, r := range received {
				n, placed := rulesIn(t, r)
				if tc.want && (n != 1 || !placed) || !tc.want && n != 0 {
					t.Errorf("upstream call %d carries %d rules notices (after the client's system message: %v), want on=%v", i+1, n, placed, tc.want)
				}
			}
			wantCount := 0
			if tc.want {
				wantCount = requests
			}
			if got := tr.count(metrics.TraceRulesNotice); got != wantCount {
				t.Errorf("%d rules_notice trace events over %d requests, want %d", got, requests, wantCount)
			}
			if got := rnCounter(t, reg, "phasegate_rules_notices_total"); got != float64(wantCount) {
				t.Errorf("phasegate_rules_notices_total = %v, want %d", got, wantCount)
			}
		})
	}
}

// TestRulesNoticeBadHeader: a header that is neither true nor false is a
// 400 naming it, and nothing reaches the upstream.
func TestRulesNoticeBadHeader(t *testing.T) {
	t.Parallel()
	up, _, _, gw := rnGateway(t, false, "")
	resp := post(t, testContext(t), gw, "/v1/chat/completions",
		`{"model":"`+sim.VerifyModel+`","messages":[{"role":"user","content":"Go."}],"tools":[`+rnCode+`]}`, http.Header{proxy.RulesNoticeHeader: {"yes"}})
	body := readAll(t, resp.Body)
	var e struct {
		Error struct{ Message, Type string } `json:"error"`
	}
	if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, proxy.RulesNoticeHeader) {
		t.Errorf("got %d %s, want a 400 invalid_request_error naming the header", resp.StatusCode, body)
	}
	if n := len(up.Received()); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
}

// TestRulesNoticeSavesReasks runs each simulated looping model to its
// answer without and with the rules notice and counts the re-asks: the
// upstream calls the guard made beyond one per client request. These are
// the simulated models' figures, not DeepSeek's.
func TestRulesNoticeSavesReasks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		model, tool string
		profile     protocol.Profile
	}{{sim.LoopingModel, rnWeather, protocol.ProfileStrict}, {sim.VerifyModel, rnCode, protocol.ProfileAgent}} {
		reasks := map[bool]int{}
		for _, on := range []bool{false, true} {
			up, _, _, gw := rnGateway(t, on, tc.profile)
			requests, _ := rnAgent(t, gw, tc.model, tc.tool, nil)
			reasks[on] = len(up.Received()) - requests
		}
		t.Logf("%s (%s profile): %d re-asks without the rules notice, %d with it", tc.model, tc.profile, reasks[false], reasks[true])
		if reasks[true] >= reasks[false] {
			t.Errorf("%s: the rules notice saved no re-ask (%d without, %d with)", tc.model, reasks[false], reasks[true])
		}
	}
}

// rnCounter reads an unlabelled counter of reg.
func rnCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}
