package proxy_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/responses"
)

// Codex CLI's requests as Codex sends them: the fixture is the first
// request Codex 0.169.0 sent (responses/testdata, see its codex_test.go),
// for the model phasegate-sim-looping.

// cxGateway serves the guard in front of up, one provider "deepseek",
// with cfg's other fields, and its metrics on reg.
func cxGateway(t *testing.T, usrv *httptest.Server, cfg proxy.Config) (*prometheus.Registry, *httptest.Server) {
	t.Helper()
	cfg.Providers = []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, []string{"deepseek"})
	return reg, serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, Metrics: m, Gatherer: reg,
		TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{Metrics: m}, nil)})
}

// cxDropped is phasegate_dropped_fields_total of door and field.
func cxDropped(t *testing.T, reg *prometheus.Registry, door, field string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "phasegate_dropped_fields_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["door"] == door && labels["field"] == field {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no phasegate_dropped_fields_total{door=%q,field=%q}", door, field)
	return 0
}

// cxTurn posts req to path as Codex does (a stream) and returns the
// response's header and the items of its output_item.done events.
func cxTurn(t *testing.T, gw *httptest.Server, path string, req map[string]any) (http.Header, []map[string]any) {
	t.Helper()
	body, _ := json.Marshal(req)
	status, header, b := rsRaw(t, gw, http.MethodPost, path, "", string(body))
	if status != http.StatusOK {
		t.Fatalf("%s: %d %s", path, status, b)
	}
	evs := rsEvents(t, b)
	if name, _ := rsFinal(t, evs); name != "response.completed" {
		t.Fatalf("%s: stream ended with %s", path, name)
	}
	var items []map[string]any
	for _, e := range evs {
		if e.Name == "response.output_item.done" {
			items = append(items, e.Data["item"].(map[string]any))
		}
	}
	return header, items
}

// cxAgent plays Codex on the fixture's conversation: it sends its whole
// history each turn (store: false), the items it got back included as it
// got them (Codex 0.169.0 sends a reasoning item back with its content
// and encrypted_content), runs every call it gets, and stops when a
// response calls nothing or after maxTurns. It returns the calls it ran (namespace/name and arguments),
// the answer, and the first response's header.
func cxAgent(t *testing.T, gw *httptest.Server, path string, maxTurns int) (ran []string, answer string, header http.Header) {
	t.Helper()
	var req map[string]any
	if err := json.Unmarshal(cxFixture(t), &req); err != nil {
		t.Fatal(err)
	}
	input := req["input"].([]any)
	for turn := range maxTurns {
		req["input"] = input
		h, items := cxTurn(t, gw, path, req)
		if turn == 0 {
			header = h
		}
		called := false
		for _, it := range items {
			switch it["type"] {
			case "message":
				answer = it["content"].([]any)[0].(map[string]any)["text"].(string)
			case "function_call":
				called = true
				ns, _ := it["namespace"].(string)
				ran = append(ran, ns+"/"+it["name"].(string)+it["arguments"].(string))
				input = append(input, it)
				it = map[string]any{"type": "function_call_output", "call_id": it["call_id"], "output": "Process exited with code 0"}
			}
			input = append(input, it)
		}
		if !called {
			return ran, answer, header
		}
	}
	return ran, "", header
}

func cxFixture(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../responses/testdata/codex-0.169.0-first-turn.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Codex's request gets a 200 on the looping simulated model, its
// web_search, prompt_cache_key and client_metadata dropped and named;
// through the guard Codex runs one call and gets an answer, its
// reasoning back upstream from the items it resent, while the standard
// route passes the loop on.
func TestResponsesCodexLoopingModel(t *testing.T) {
	up, usrv := proxytest.NewServer(t, proxytest.Simulated())
	reg, gw := cxGateway(t, usrv, proxy.Config{})
	ran, answer, header := cxAgent(t, gw, "/v1/responses", 8)
	if len(ran) != 1 || answer == "" {
		t.Errorf("guarded: ran %d calls %v, answer %q; want 1 call and an answer", len(ran), ran, answer)
	}
	if got, want := header.Get("X-Phasegate-Dropped"), "tools[8].type=web_search, prompt_cache_key, client_metadata"; got != want {
		t.Errorf("X-Phasegate-Dropped = %q, want %q", got, want)
	}
	if got := cxDropped(t, reg, "responses", "tools.web_search"); got != 2 {
		t.Errorf("web_search dropped %v times, want 2 (one a request)", got)
	}
	rec := up.Received()
	first, last := cxUpstream(t, rec[0]), cxUpstream(t, rec[len(rec)-1])
	if !slices.Contains(first.tools, "multi_agent_v1__spawn_agent") || slices.Contains(first.tools, "web_search") || len(first.tools) != 12 {
		t.Errorf("tools offered upstream: %v", first.tools)
	}
	if len(last.reasoning) == 0 || last.reasoning[0] != "Call everything at once." {
		t.Errorf("reasoning sent back upstream: %q, want the first answer's", last.reasoning)
	}

	ran, answer, _ = cxAgent(t, gw, "/standard/v1/responses", 3)
	if len(ran) < 3 || answer != "" {
		t.Errorf("standard: ran %d calls, answer %q; want the loop passed on", len(ran), answer)
	}
}

// cxSent is what an upstream request said: the functions it offered and
// the reasoning_content of its assistant messages.
type cxSent struct {
	tools, reasoning []string
}

func cxUpstream(t *testing.T, r proxytest.Received) cxSent {
	t.Helper()
	req, err := chat.ParseRequest(r.Body)
	if err != nil {
		t.Fatalf("upstream request: %v\n%s", err, r.Body)
	}
	var s cxSent
	for _, tool := range req.Tools {
		s.tools = append(s.tools, tool.Function.Name)
	}
	for _, m := range req.Messages {
		if m.Role == chat.RoleAssistant {
			s.reasoning = append(s.reasoning, thDeref(m.ReasoningContent))
		}
	}
	return s
}

// With HOSTED_TOOLS=refuse a hosted tool is a 400 naming it, before any
// upstream call, as before it was dropped by default.
func TestResponsesHostedToolsRefused(t *testing.T) {
	up, usrv := proxytest.NewServer(t, proxytest.Simulated())
	_, gw := cxGateway(t, usrv, proxy.Config{HostedTools: proxy.HostedRefuse})
	for _, tc := range []struct{ body, param string }{
		{string(cxFixture(t)), "tools[8].type"},
		{`{"model":"m","input":"hi","tools":[` + rsWeather + `,{"type":"file_search","vector_store_ids":["vs"]}]}`, "tools[1].type"},
	} {
		status, header, b := rsRaw(t, gw, http.MethodPost, "/v1/responses", "", tc.body)
		if e := rsError(t, b); status != http.StatusBadRequest || e.Param != tc.param || e.Code != "unsupported_parameter" {
			t.Errorf("%.60s: %d %s", tc.body, status, b)
		}
		if got := header.Get("X-Phasegate-Dropped"); got != "" {
			t.Errorf("a refused request names drops: %q", got)
		}
	}
	if n := len(up.Received()); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
}

// The reasoning DeepSeek's thinking mode wants back reaches it from a
// client that keeps no state (store: false, include:
// reasoning.encrypted_content, its reasoning items sent back with
// encrypted_content alone, as the Responses API allows) through two gateways that share REASONING_KEY and nothing
// else, each reading what the other sealed, twice; a gateway with
// another key refuses the items with a 400 before any upstream call.
func TestResponsesEncryptedReasoningAcrossGateways(t *testing.T) {
	up, usrv := proxytest.NewServer(t, thDeepSeek)
	key := proxy.Secret(base64.StdEncoding.EncodeToString(responses.NewKey()))
	_, a := cxGateway(t, usrv, proxy.Config{ReasoningKey: key})
	_, b := cxGateway(t, usrv, proxy.Config{ReasoningKey: key})
	_, other := cxGateway(t, usrv, proxy.Config{})
	req := map[string]any{"model": thModel, "stream": true, "store": false, "include": []string{responses.IncludeEncryptedReasoning},
		"tools": []json.RawMessage{json.RawMessage(`{"type":"function","name":"list_dir","parameters":{"type":"object","properties":{}}}`)}}
	input := []any{map[string]any{"role": "user", "content": "List the files."}}
	send := func(gw *httptest.Server, want ...string) {
		t.Helper()
		req["input"] = input
		header, items := cxTurn(t, gw, "/v1/responses", req)
		if got := header.Get("X-Phasegate-Dropped"); got != "" {
			t.Errorf("X-Phasegate-Dropped = %q", got)
		}
		rec := up.Received()
		if got := cxUpstream(t, rec[len(rec)-1]).reasoning; !slices.Equal(got, want) {
			t.Errorf("reasoning_content sent upstream: %q, want %q", got, want)
		}
		for _, it := range items {
			if it["type"] == "reasoning" {
				if enc, _ := it["encrypted_content"].(string); enc == "" || strings.Contains(enc, "files") {
					t.Fatalf("reasoning item without its text sealed: %v", it)
				}
				it["content"] = nil
			}
			input = append(input, it)
			if it["type"] == "function_call" {
				input = append(input, map[string]any{"type": "function_call_output", "call_id": it["call_id"], "output": "a.go b.go"})
			}
		}
	}
	send(a)
	send(b, thReasoning)
	input = append(input, map[string]any{"role": "user", "content": "And again."})
	send(a, thReasoning, "Answer now.")

	before := len(up.Received())
	req["input"] = input
	body, _ := json.Marshal(req)
	status, _, raw := rsRaw(t, other, http.MethodPost, "/v1/responses", "", string(body))
	if e := rsError(t, raw); status != http.StatusBadRequest || e.Code != "invalid_encrypted_content" || e.Param != "input[1].encrypted_content" {
		t.Errorf("another key: %d %s", status, raw)
	}
	if n := len(up.Received()) - before; n != 0 {
		t.Errorf("another key: the upstream got %d requests", n)
	}
	send(b, thReasoning, "Answer now.", thReasoning)
}
