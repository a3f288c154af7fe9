package proxy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/deepseek"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// The thinking-mode repair through the real router, with go-openai as the
// agent: DeepSeek's thinking mode wants every assistant tool-call message
// back with its reasoning_content (or answers 400), and rejects a forced
// tool_choice. go-openai streams reasoning_content to the agent, but an
// agent that builds the next assistant message from the content and the
// tool calls it accumulated sends none.

const (
	thModel     = "deepseek-v4-flash"
	thReasoning = "The user wants the files. I should list the directory."
	thCallID    = "call_00_th_list"
	thAnswer    = "There are two files."
)

// thDeepSeek is an upstream that answers as DeepSeek's thinking mode does:
// 400 for an assistant tool-call message without reasoning_content, 400
// for a forced tool_choice; otherwise, when the last message is a tool
// result, a text answer, else reasoning and a call of list_dir. It streams
// or not, as asked.
func thDeepSeek(r proxytest.Received) sim.Reply {
	req, err := chat.ParseRequest(r.Body)
	if err != nil {
		return sim.Error(http.StatusBadRequest, err.Error(), "invalid_request_error", "invalid_request_error")
	}
	if !deepseek.ThinkingDisabled(req) {
		for i, m := range req.Messages {
			if m.Role == chat.RoleAssistant && len(m.ToolCalls) > 0 && m.ReasoningContent == nil {
				return sim.Error(http.StatusBadRequest,
					fmt.Sprintf("Missing `reasoning_content` field in the assistant message at message index %d.", i),
					"invalid_request_error", "invalid_request_error")
			}
		}
		if raw, ok := req.Field("tool_choice"); ok && string(raw) != `"auto"` && string(raw) != `"none"` {
			return sim.Error(http.StatusBadRequest, "deepseek-reasoner does not support this tool_choice", "invalid_request_error", "invalid_request_error")
		}
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role == chat.RoleTool {
		if !req.Stream {
			return sim.Completion(req.Model, map[string]any{"content": thAnswer, "reasoning_content": "Answer now."}, "stop", nil)
		}
		return sim.NewStream(req.Model).Role().Reasoning("Answer now.").Content(thAnswer).Finish("stop").Done().Reply()
	}
	if !req.Stream {
		call := map[string]any{"id": thCallID, "type": "function", "function": map[string]any{"name": "list_dir", "arguments": "{}"}}
		return sim.Completion(req.Model, map[string]any{"content": "", "reasoning_content": thReasoning, "tool_calls": []any{call}}, "tool_calls", nil)
	}
	return sim.NewStream(req.Model).Role().Reasoning("The user wants the files. ", "I should list the directory.").
		ToolCall(0, thCallID, "list_dir", "{", "}").Finish("tool_calls").Done().Reply()
}

// thBodies is the client's transport: it keeps every request body the
// client sent, to show what go-openai put on the wire.
type thBodies struct {
	base http.RoundTripper

	mu     sync.Mutex
	bodies [][]byte
}

func (tb *thBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body.Close()
		tb.mu.Lock()
		tb.bodies = append(tb.bodies, b)
		tb.mu.Unlock()
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	return tb.base.RoundTrip(req)
}

func (tb *thBodies) last(t *testing.T) []byte {
	t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if len(tb.bodies) == 0 {
		t.Fatal("the client sent nothing")
	}
	return tb.bodies[len(tb.bodies)-1]
}

// thGateway serves a gateway with a thinking memory, the guard on
// /two-stage, one provider of the given name at a thDeepSeek double.
func thGateway(t *testing.T, providerName string) (*proxytest.Upstream, *httptest.Server) {
	t.Helper()
	up, usrv := proxytest.NewServer(t, thDeepSeek)
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: providerName, BaseURL: usrv.URL + "/v1"}}}
	return up, serveGateway(t, cfg, proxy.Options{
		Thinking: proxy.LocalReasoning(deepseek.NewReasoningMemory(1<<20, time.Hour)),
		TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil),
	})
}

func thClient(gw *httptest.Server, route string) (*openai.Client, *thBodies) {
	tap := &thBodies{base: gw.Client().Transport}
	c := openai.DefaultConfig("sk-client")
	c.BaseURL = gw.URL + route
	c.HTTPClient = &http.Client{Transport: tap}
	return openai.NewClientWithConfig(c), tap
}

var thTools = []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
	Name: "list_dir", Description: "List the directory.", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}}}

// thTurn is what the agent made of one response.
type thTurn struct {
	content, reasoning string
	calls              []openai.ToolCall
	header             http.Header
}

// thAsk sends msgs through client and accumulates the answer, streaming
// or not.
func thAsk(t *testing.T, client *openai.Client, stream bool, msgs []openai.ChatCompletionMessage, toolChoice any) (thTurn, error) {
	t.Helper()
	ctx := testContext(t)
	req := openai.ChatCompletionRequest{Model: thModel, Messages: msgs, Tools: thTools, ToolChoice: toolChoice}
	if !stream {
		resp, err := client.CreateChatCompletion(ctx, req)
		if err != nil {
			return thTurn{}, err
		}
		m := resp.Choices[0].Message
		return thTurn{content: m.Content, reasoning: m.ReasoningContent, calls: m.ToolCalls, header: resp.Header()}, nil
	}
	req.Stream = true
	s, err := client.CreateChatCompletionStream(ctx, req)
	if err != nil {
		return thTurn{}, err
	}
	defer s.Close()
	r, err := collect(s)
	if err != nil {
		return thTurn{}, err
	}
	return thTurn{content: r.Content, reasoning: r.Reasoning, calls: r.ToolCalls, header: s.Header()}, nil
}

// thSentReasoning returns the reasoning_content of the assistant tool-call
// messages of a request body, nil where the field is absent.
func thSentReasoning(t *testing.T, body []byte) []*string {
	t.Helper()
	req, err := chat.ParseRequest(body)
	if err != nil {
		t.Fatalf("request does not parse: %v\n%s", err, body)
	}
	var out []*string
	for _, m := range req.Messages {
		if m.Role == chat.RoleAssistant && len(m.ToolCalls) > 0 {
			out = append(out, m.ReasoningContent)
		}
	}
	return out
}

func thDeref(p *string) string {
	if p == nil {
		return "<absent>"
	}
	return *p
}

// TestThinkingReasoningRestored: turn 1 streams reasoning and a tool
// call; the agent sends turn 2 with the call and its result but without
// the reasoning; the upstream gets the reasoning back, and the client is
// told. Through the pass-through and the guard, streaming and not.
func TestThinkingReasoningRestored(t *testing.T) {
	for _, route := range []string{"/standard/v1", "/two-stage/v1"} {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%v", strings.TrimPrefix(route, "/"), stream), func(t *testing.T) {
				up, gw := thGateway(t, "deepseek")
				client, tap := thClient(gw, route)
				msgs := []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "List the files."}}
				first, err := thAsk(t, client, stream, msgs, nil)
				if err != nil {
					t.Fatalf("turn 1: %v", err)
				}
				if first.reasoning != thReasoning || len(first.calls) != 1 || first.calls[0].ID != thCallID {
					t.Fatalf("turn 1: reasoning %q, calls %+v; want the reasoning and call %s", first.reasoning, first.calls, thCallID)
				}
				// The agent's next request: the call and its result, the
				// reasoning left out, as most agents build it.
				msgs = append(msgs,
					openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: first.content, ToolCalls: first.calls},
					openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: thCallID, Content: "a.go\nb.go"})
				second, err := thAsk(t, client, stream, msgs, nil)
				if err != nil {
					t.Fatalf("turn 2: %v", err)
				}
				if got := thSentReasoning(t, tap.last(t)); len(got) != 1 || got[0] != nil {
					t.Fatalf("the client sent reasoning_content %v; this test needs an agent that drops it", got)
				}
				if second.content != thAnswer {
					t.Errorf("turn 2 content: got %q, want %q", second.content, thAnswer)
				}
				rec := up.Received()
				if len(rec) != 2 {
					t.Fatalf("upstream requests: got %d, want 2", len(rec))
				}
				if got := thSentReasoning(t, rec[1].Body); len(got) != 1 || thDeref(got[0]) != thReasoning {
					t.Errorf("upstream got reasoning_content %q, want %q", thDeref(got[0]), thReasoning)
				}
				if got := second.header.Get("X-Phasegate-Reasoning-Restored"); got != "1" {
					t.Errorf("X-Phasegate-Reasoning-Restored: got %q, want 1", got)
				}
				if got := second.header.Get("X-Phasegate-Reasoning-Emptied"); got != "0" {
					t.Errorf("X-Phasegate-Reasoning-Emptied: got %q, want 0", got)
				}
				if got := first.header.Get("X-Phasegate-Reasoning-Restored"); got != "" {
					t.Errorf("turn 1 X-Phasegate-Reasoning-Restored: got %q, want none (nothing to repair)", got)
				}
				thCheckMetric(t, gw, `phasegate_thinking_repairs_total{kind="reasoning_restored"} 1`)
			})
		}
	}
}

// thCheckMetric checks that GET /metrics shows the sample line.
func thCheckMetric(t *testing.T, gw *httptest.Server, line string) {
	t.Helper()
	req, err := http.NewRequestWithContext(testContext(t), http.MethodGet, gw.URL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := gw.Client().Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if body := readAll(t, resp.Body); !strings.Contains(string(body), "\n"+line+"\n") {
		t.Errorf("/metrics lacks %q", line)
	}
}

// thHistory is a request body whose assistant message made call id
// without reasoning_content, answered by a tool message; extra holds more
// top-level fields.
func thHistory(stream bool, id, extra string) string {
	return `{"model":"` + thModel + `","stream":` + fmt.Sprint(stream) + `,"messages":[` +
		`{"role":"user","content":"List the files."},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"` + id + `","type":"function","function":{"name":"list_dir","arguments":"{}"}}],"x_client":{"keep":true}},` +
		`{"role":"tool","tool_call_id":"` + id + `","content":"a.go"}],` +
		`"tools":[{"type":"function","function":{"name":"list_dir","parameters":{"type":"object","properties":{}}}}]` + extra + `}`
}

// TestThinkingRepairs covers the other repairs and what is left alone,
// each request sent as raw JSON so the exact wire form is checked.
func TestThinkingRepairs(t *testing.T) {
	tests := []struct {
		name     string
		provider string
		route    string
		body     string
		// wantReasoning is the reasoning_content the upstream gets on the
		// assistant message, nil for absent.
		wantReasoning *string
		wantChoice    string // the tool_choice the upstream gets, "" absent
		wantStatus    int
		wantHeaders   map[string]string // "" means absent
	}{
		{
			name: "a call never seen gets an empty reasoning", provider: "deepseek", route: "/v1/chat/completions",
			body: thHistory(true, "call_never_seen", ""), wantReasoning: ptrTo(""), wantStatus: http.StatusOK,
			wantHeaders: map[string]string{"X-Phasegate-Reasoning-Restored": "0", "X-Phasegate-Reasoning-Emptied": "1", "X-Phasegate-Warning": ""},
		},
		{
			name: "tool_choice required becomes auto", provider: "deepseek", route: "/two-stage/v1/chat/completions",
			body: thHistory(false, "call_never_seen", `,"tool_choice":"required"`), wantReasoning: ptrTo(""), wantChoice: `"auto"`, wantStatus: http.StatusOK,
			wantHeaders: map[string]string{"X-Phasegate-Warning": "tool_choice downgraded to auto: DeepSeek's thinking mode rejects a forced tool_choice"},
		},
		{
			name: "a named tool_choice becomes auto", provider: "deepseek", route: "/standard/v1/chat/completions",
			body:          thHistory(true, "call_never_seen", `,"tool_choice":{"type":"function","function":{"name":"list_dir"}}`),
			wantReasoning: ptrTo(""), wantChoice: `"auto"`, wantStatus: http.StatusOK,
			wantHeaders: map[string]string{"X-Phasegate-Warning": "tool_choice downgraded to auto: DeepSeek's thinking mode rejects a forced tool_choice"},
		},
		{
			name: "tool_choice auto is left alone", provider: "deepseek", route: "/standard/v1/chat/completions",
			body:          `{"model":"` + thModel + `","messages":[{"role":"user","content":"hi"}],"tool_choice":"auto"}`,
			wantChoice:    `"auto"`,
			wantStatus:    http.StatusOK,
			wantReasoning: nil,
			wantHeaders:   map[string]string{"X-Phasegate-Warning": "", "X-Phasegate-Reasoning-Restored": ""},
		},
		{
			name: "a provider not named deepseek is left alone", provider: "openai", route: "/standard/v1/chat/completions",
			body:        thHistory(true, "call_never_seen", `,"tool_choice":"required"`),
			wantChoice:  `"required"`,
			wantStatus:  http.StatusBadRequest, // the double is strict whatever its name: nothing repaired
			wantHeaders: map[string]string{"X-Phasegate-Reasoning-Restored": "", "X-Phasegate-Reasoning-Emptied": "", "X-Phasegate-Warning": ""},
		},
		{
			name: "thinking disabled is left alone", provider: "deepseek", route: "/v1/chat/completions",
			body:        thHistory(true, "call_never_seen", `,"thinking":{"type":"disabled"},"tool_choice":"required"`),
			wantChoice:  `"required"`,
			wantStatus:  http.StatusOK,
			wantHeaders: map[string]string{"X-Phasegate-Reasoning-Restored": "", "X-Phasegate-Reasoning-Emptied": "", "X-Phasegate-Warning": ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, gw := thGateway(t, tt.provider)
			resp := post(t, testContext(t), gw, tt.route, tt.body, nil)
			body := readAll(t, resp.Body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status: got %d, want %d: %s", resp.StatusCode, tt.wantStatus, body)
			}
			for k, want := range tt.wantHeaders {
				if got := resp.Header.Get(k); got != want {
					t.Errorf("%s: got %q, want %q", k, got, want)
				}
			}
			rec := up.Received()
			if len(rec) != 1 {
				t.Fatalf("upstream requests: got %d, want 1", len(rec))
			}
			req, err := chat.ParseRequest(rec[0].Body)
			if err != nil {
				t.Fatal(err)
			}
			var sent []*string
			for _, m := range req.Messages {
				if m.Role == chat.RoleAssistant {
					sent = append(sent, m.ReasoningContent)
					if !bytes.Contains(m.Raw, []byte(`"x_client":{"keep":true}`)) {
						t.Errorf("the assistant message lost a field it came with: %s", m.Raw)
					}
				}
			}
			if tt.wantReasoning != nil && (len(sent) != 1 || thDeref(sent[0]) != *tt.wantReasoning) ||
				tt.wantReasoning == nil && len(sent) == 1 && sent[0] != nil {
				t.Errorf("upstream reasoning_content: got %v, want %q", sent, thDeref(tt.wantReasoning))
			}
			raw, _ := req.Field("tool_choice")
			if string(raw) != tt.wantChoice {
				t.Errorf("upstream tool_choice: got %s, want %s", raw, tt.wantChoice)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestThinkingNotRememberedWhenLeftAlone: a response the gateway did not
// serve in thinking mode teaches the memory nothing, so a later request
// naming its call gets an empty reasoning, not a stale one.
func TestThinkingNotRememberedWhenLeftAlone(t *testing.T) {
	up, gw := thGateway(t, "deepseek")
	disabled := `{"model":"` + thModel + `","stream":true,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"List the files."}],` +
		`"tools":[{"type":"function","function":{"name":"list_dir","parameters":{"type":"object","properties":{}}}}]}`
	resp := post(t, testContext(t), gw, "/standard/v1/chat/completions", disabled, nil)
	if b := readAll(t, resp.Body); resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(thCallID)) {
		t.Fatalf("turn 1: status %d, body %s; want the call", resp.StatusCode, b)
	}
	resp = post(t, testContext(t), gw, "/standard/v1/chat/completions", thHistory(true, thCallID, ""), nil)
	readAll(t, resp.Body)
	if got := resp.Header.Get("X-Phasegate-Reasoning-Emptied"); got != "1" {
		t.Errorf("X-Phasegate-Reasoning-Emptied: got %q, want 1 (nothing remembered)", got)
	}
	if got := thSentReasoning(t, up.Received()[1].Body); len(got) != 1 || thDeref(got[0]) != "" {
		t.Errorf("upstream reasoning_content: got %q, want empty", thDeref(got[0]))
	}
}

// BenchmarkRepair measures deepseek.RepairThinking on a 100-message agent history
// (system, user, 49 tool-call/tool-result pairs): every reasoning
// remembered, none remembered, and a client that kept them all (nothing
// to do). Each iteration repairs a fresh clone; "clone" is that cost alone.
func BenchmarkRepair(b *testing.B) {
	mem := deepseek.NewReasoningMemory(64<<20, time.Hour)
	build := func(withReasoning bool) *chat.Request {
		var msgs []string
		msgs = append(msgs, `{"role":"system","content":"You are a coding agent."}`, `{"role":"user","content":"Fix the failing test."}`)
		for i := range 49 {
			id := fmt.Sprintf("call_bench_%02d", i)
			reasoning := ""
			if withReasoning {
				reasoning = `"reasoning_content":"Step ` + fmt.Sprint(i) + `: I should read the next file and check it.",`
			}
			msgs = append(msgs,
				`{"role":"assistant","content":"",`+reasoning+`"tool_calls":[{"id":"`+id+`","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"f`+fmt.Sprint(i)+`.go\"}"}}]}`,
				`{"role":"tool","tool_call_id":"`+id+`","content":"package main\n\nfunc f`+fmt.Sprint(i)+`() {}\n"}`)
			mem.Remember([]string{id}, fmt.Sprintf("Step %d: I should read the next file and check it.", i))
		}
		req, err := chat.ParseRequest([]byte(`{"model":"` + thModel + `","messages":[` + strings.Join(msgs, ",") + `],"tool_choice":"auto"}`))
		if err != nil {
			b.Fatal(err)
		}
		if len(req.Messages) != 100 {
			b.Fatalf("history has %d messages, want 100", len(req.Messages))
		}
		return req
	}
	dropped, kept := build(false), build(true)
	b.Run("clone", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = dropped.Clone()
		}
	})
	for _, bc := range []struct {
		name                  string
		req                   *chat.Request
		mem                   *deepseek.ReasoningMemory
		wantRestored, wantEmp int
	}{
		{"restored-49", dropped, mem, 49, 0},
		{"emptied-49", dropped, deepseek.NewReasoningMemory(1<<20, time.Hour), 0, 49},
		{"intact", kept, mem, 0, 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rep, err := deepseek.RepairThinking(bc.req.Clone(), bc.mem)
				if err != nil {
					b.Fatal(err)
				}
				if rep.Restored != bc.wantRestored || rep.Emptied != bc.wantEmp {
					b.Fatalf("repairs %+v, want %d restored, %d emptied", rep, bc.wantRestored, bc.wantEmp)
				}
			}
		})
	}
}
