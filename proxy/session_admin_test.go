package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/phasegate/phasegate/pricing"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/session"
	"github.com/phasegate/phasegate/sim"
)

// adminDo sends an admin request of a session, with the admin key when
// admin is set.
func (s *sessStack) adminDo(t *testing.T, ctx context.Context, method, path string, admin bool) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, s.gw.URL+path, nil)
	if admin {
		req.Header.Set("Authorization", "Bearer "+adminKey)
	}
	resp, err := s.gw.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return resp.StatusCode, v
}

// TestSessionAdmin: GET shows a session, POST .../stop makes its next
// request the forced final answer, DELETE resets it; without the admin key
// the routes are unknown.
func TestSessionAdmin(t *testing.T) {
	s := newSessStack(t, proxy.Config{Sessions: budget(session.Budget{ToolCalls: 100})}, proxy.Options{})
	ctx := testContext(t)
	a := s.agent("", "adm-1", true, nil)
	r, err := a.send(ctx, userMessage("Fix it."))
	if err != nil || len(r.calls) != 1 {
		t.Fatalf("first request: %v %+v", err, r)
	}
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		if status, _ := s.adminDo(t, ctx, method, "/admin/sessions/adm-1", false); status != http.StatusNotFound {
			t.Errorf("%s without the admin key: %d, want 404", method, status)
		}
	}
	if status, v := s.adminDo(t, ctx, http.MethodGet, "/admin/sessions/adm-1", true); status != http.StatusOK ||
		v["tool_calls"] != float64(1) || v["requests"] != float64(1) || v["capped"] != nil || v["object"] != "phasegate.session" {
		t.Errorf("GET: %d %v", status, v)
	}
	if status, v := s.adminDo(t, ctx, http.MethodGet, "/admin/sessions/nobody", true); status != http.StatusNotFound || v["error"] == nil {
		t.Errorf("GET of an unknown session: %d %v, want a 404 error", status, v)
	}
	if status, v := s.adminDo(t, ctx, http.MethodPost, "/admin/sessions/adm-1/stop", true); status != http.StatusOK || v["capped"] != string(session.CapStopped) {
		t.Fatalf("stop: %d %v", status, v)
	}
	stopped := a.turn(t, ctx, "Go on.")
	checkForcedFinal(t, stopped, session.CapStopped, 0)
	if !strings.Contains(stopped[0].content, "stopped by an operator") {
		t.Errorf("the forced final after a stop: %q", stopped[0].content)
	}
	if status, v := s.adminDo(t, ctx, http.MethodDelete, "/admin/sessions/adm-1", true); status != http.StatusOK || v["deleted"] != true {
		t.Fatalf("DELETE: %d %v", status, v)
	}
	if r, err := a.send(ctx, userMessage("Start again.")); err != nil || len(r.calls) != 1 || r.header.Get(proxy.SessionBudgetHeader) != "" {
		t.Errorf("after the reset: %v %+v, want a tool call", err, r)
	}
	if status, _ := s.adminDo(t, ctx, http.MethodDelete, "/admin/sessions/never", true); status != http.StatusNotFound {
		t.Errorf("DELETE of an unknown session: %d, want 404", status)
	}
	// A stop of a session not held yet starts it stopped.
	if status, _ := s.adminDo(t, ctx, http.MethodPost, "/admin/sessions/adm-2/stop", true); status != http.StatusOK {
		t.Errorf("stop of an unknown session: %d", status)
	}
	checkForcedFinal(t, s.agent("", "adm-2", false, nil).turn(t, ctx, "Fix it."), session.CapStopped, 0)
	if status, _ := s.adminDo(t, ctx, http.MethodGet, "/admin/sessions/a%20b", true); status != http.StatusBadRequest {
		t.Errorf("GET of an id the gateway cannot hold: %d, want 400", status)
	}
}

// TestSessionAdminProjectScope: without client keys, a session is its
// project's, and the admin routes name it in ?project=.
func TestSessionAdminProjectScope(t *testing.T) {
	s := newSessStack(t, proxy.Config{Sessions: budget(session.Budget{ToolCalls: 9})}, proxy.Options{})
	ctx := testContext(t)
	if _, err := s.agent("", "p-1", false, http.Header{"X-Project-Id": {"team-a"}}).send(ctx, userMessage("Fix it.")); err != nil {
		t.Fatal(err)
	}
	if status, _ := s.adminDo(t, ctx, http.MethodGet, "/admin/sessions/p-1", true); status != http.StatusNotFound {
		t.Errorf("GET without the project: %d, want 404 (another scope)", status)
	}
	if status, v := s.adminDo(t, ctx, http.MethodGet, "/admin/sessions/p-1?project=team-a", true); status != http.StatusOK || v["requests"] != float64(1) {
		t.Errorf("GET with the project: %d %v", status, v)
	}
}

// TestSessionResponsesDoor: the Responses API names a session by its body
// (prompt_cache_key, as Codex sends it, with SESSION_FROM); the spent
// session's next response is its forced final answer, streamed or not.
func TestSessionResponsesDoor(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			sess := budget(session.Budget{ToolCalls: 1})
			sess.From = []session.Source{session.SourcePromptCacheKey}
			s := newSessStack(t, proxy.Config{Sessions: sess}, proxy.Options{})
			req := map[string]any{"model": sessModel, "input": "Fix the rounding bug.", "prompt_cache_key": "codex-conv-7", "stream": stream,
				"tools": []map[string]any{{"type": "function", "name": "list_files", "parameters": map[string]any{"type": "object"}}}}
			first, hdr := rsSend(t, s, req)
			if len(first.calls()) != 1 || hdr.Get(proxy.SessionBudgetHeader) != "" {
				t.Fatalf("first response: %v calls, header %q; want one call", first.calls(), hdr.Get(proxy.SessionBudgetHeader))
			}
			req["previous_response_id"] = first.ID
			req["input"] = []map[string]any{{"type": "function_call_output", "call_id": first.Output[len(first.Output)-1].CallID, "output": "calc cmd"}}
			second, hdr := rsSend(t, s, req)
			if len(second.calls()) != 0 || hdr.Get(proxy.SessionBudgetHeader) != string(session.CapToolCalls) ||
				!strings.Contains(second.text(), "session budget spent (1 tool call)") || !strings.Contains(second.text(), "stopped after 1 of 20 steps") {
				t.Errorf("second response: calls %v, header %q, text %q; want the forced final answer", second.calls(), hdr.Get(proxy.SessionBudgetHeader), second.text())
			}
		})
	}
}

// rsSend creates a response (streamed or not) on the session stack.
func rsSend(t *testing.T, s *sessStack, req map[string]any) (*rsResponse, http.Header) {
	t.Helper()
	body, _ := json.Marshal(req)
	status, hdr, b := rsRaw(t, s.gw, http.MethodPost, "/v1/responses", "", string(body))
	if status != http.StatusOK {
		t.Fatalf("POST /v1/responses: %d %s", status, b)
	}
	if req["stream"] == true {
		_, r := rsFinal(t, rsEvents(t, b))
		return r, hdr
	}
	var r rsResponse
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return &r, hdr
}

// TestSessionMetrics: a capped session and a looping model move the loop
// economics: the cap, the forced final answers, the dollars charged, and
// the estimate of what the refusals saved.
func TestSessionMetrics(t *testing.T) {
	price := pricing.Price{InputCacheMiss: 1, InputCacheHit: 0.1, Output: 2}
	cfg := proxy.Config{Sessions: budget(session.Budget{ToolCalls: 2}),
		Prices: []pricing.Rule{{Pattern: sessModel, Price: price}, {Pattern: sim.LoopingModel, Price: price}}}
	s := newSessStack(t, cfg, proxy.Options{})
	ctx := testContext(t)
	a := s.agent("", "met-1", false, nil)
	a.turn(t, ctx, "Fix it.")
	a.turn(t, ctx, "Go on.")
	rsAgent(t, s.gw, "/v1/responses", sim.LoopingModel, 6)
	for _, c := range []struct {
		name, label, value string
		want               func(float64) bool
	}{
		{"phasegate_session_caps_total", "budget", "SESSION_MAX_TOOL_CALLS", func(v float64) bool { return v == 1 }},
		{"phasegate_budget_exhaustions_total", "budget", "SESSION_MAX_TOOL_CALLS", func(v float64) bool { return v == 2 }},
		{"phasegate_session_requests_total", "decision", "forced_final", func(v float64) bool { return v == 2 }},
		{"phasegate_session_requests_total", "decision", "open", func(v float64) bool { return v == 2 }},
		{"phasegate_sessions", "state", "capped", func(v float64) bool { return v == 1 }},
		{"phasegate_session_usd_total", "model", sessModel, func(v float64) bool { return v > 0 }},
		{"phasegate_guard_saved_tokens_total", "model", sim.LoopingModel, func(v float64) bool { return v > 0 }},
		{"phasegate_guard_saved_usd_total", "model", sim.LoopingModel, func(v float64) bool { return v > 0 }},
	} {
		if got := sampled(t, s.reg, c.name, c.label, c.value); !c.want(got) {
			t.Errorf("%s{%s=%q} = %v", c.name, c.label, c.value, got)
		}
	}
	if got := sampled(t, s.reg, "phasegate_guard_saved_tokens_total", "kind", "forward"); got != 0 {
		t.Errorf("saved tokens of forwarded calls: %v", got)
	}
}

// sampled sums the samples of the counters or gauges name whose label is
// value.
func sampled(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return sum
}
