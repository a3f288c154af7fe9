package proxy_test

// End-to-end tests of sessions: the simulated coding agent (sim.SessionModel,
// 20 tool calls in one turn) driven by the go-openai client through the real
// router and the guard, a session capped by tool calls, by tokens and by US
// dollars, ending each time with an answer.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/pricing"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/session"
	"github.com/phasegate/phasegate/sim"
)

const (
	sessModel = sim.SessionModel
	adminKey  = "sk-admin-sessions-0b1c"
)

// sessTools are the tools of sim.SessionScript.
func sessTools() []openai.Tool {
	var tools []openai.Tool
	for _, name := range []string{"list_files", "search", "read_file", "run_tests", "edit_file", "git"} {
		tools = append(tools, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: name,
			Parameters: json.RawMessage(`{"type":"object"}`)}})
	}
	return tools
}

// sessStack is a gateway in front of the simulated models, with the guard
// on the agent profile and its metrics on a registry of its own.
type sessStack struct {
	gw  *httptest.Server
	up  *proxytest.Upstream
	reg *prometheus.Registry
}

// newSessStack serves the gateway of cfg (its provider set here) and opts
// (its metrics and guard set here).
func newSessStack(t *testing.T, cfg proxy.Config, opts proxy.Options) *sessStack {
	t.Helper()
	up, usrv := proxytest.NewServer(t, proxytest.Simulated())
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, []string{"openai"}, sessModel, sim.LoopingModel)
	cfg.Providers = []proxy.Provider{{Name: "openai", BaseURL: usrv.URL + "/v1", APIKey: "sk-upstream-sessions"}}
	cfg.GuardProfile = protocol.ProfileAgent
	if cfg.AdminAPIKey == "" {
		cfg.AdminAPIKey = adminKey
	}
	opts.Metrics, opts.Gatherer, opts.DefaultProtocol = m, reg, proxy.ProtocolTwoStage
	opts.TwoStage = protocol.NewTwoStage(protocol.TwoStageConfig{Profile: protocol.ProfileAgent, Metrics: m}, nil)
	return &sessStack{gw: serveGateway(t, cfg, opts), up: up, reg: reg}
}

// budget is a session budget of the global rules, kept an hour.
func budget(b session.Budget) proxy.Sessions {
	b.IdleTTL = max(b.IdleTTL, 3600e9)
	return proxy.Sessions{Rules: session.Rules{Global: b}, FailOpen: true}
}

// sessAgent is a coding agent on one session: go-openai, with the session
// (and a client key, when given) in every request's headers.
type sessAgent struct {
	client *openai.Client
	stream bool
}

func (s *sessStack) agent(key, sessionID string, stream bool, more http.Header) *sessAgent {
	h := http.Header{session.Header: {sessionID}}
	for k, v := range more {
		h[k] = v
	}
	c, _ := tsClient(s.gw, "/v1", h)
	if key != "" {
		cfg := openai.DefaultConfig(key)
		cfg.BaseURL = s.gw.URL + "/v1"
		cfg.HTTPClient = &http.Client{Transport: &tsTap{base: s.gw.Client().Transport, header: h}}
		c = openai.NewClientWithConfig(cfg)
	}
	return &sessAgent{client: c, stream: stream}
}

// sessReply is one response as the client read it.
type sessReply struct {
	content string
	calls   []openai.ToolCall
	header  http.Header
	usage   openai.Usage
}

func (a *sessAgent) send(ctx context.Context, msgs []openai.ChatCompletionMessage) (sessReply, error) {
	req := openai.ChatCompletionRequest{Model: sessModel, Messages: msgs, Tools: sessTools()}
	if !a.stream {
		resp, err := a.client.CreateChatCompletion(ctx, req)
		if err != nil {
			return sessReply{}, err
		}
		m := resp.Choices[0].Message
		return sessReply{content: m.Content, calls: m.ToolCalls, header: resp.Header(), usage: resp.Usage}, nil
	}
	req.Stream, req.StreamOptions = true, &openai.StreamOptions{IncludeUsage: true}
	st, err := a.client.CreateChatCompletionStream(ctx, req)
	if err != nil {
		return sessReply{}, err
	}
	defer st.Close()
	r, err := collect(st)
	out := sessReply{content: r.Content, calls: r.ToolCalls, header: st.Header()}
	if r.Usage != nil {
		out.usage = *r.Usage
	}
	return out, err
}

// turn runs one user turn to its answer: send, run the tool call (its
// result unique, so every repeat is progress), send again. It returns the
// replies, the last the answer.
func (a *sessAgent) turn(t *testing.T, ctx context.Context, task string) []sessReply {
	t.Helper()
	msgs := []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: task}}
	var replies []sessReply
	for range 30 {
		r, err := a.send(ctx, msgs)
		if err != nil {
			t.Fatalf("request %d: %v", len(replies)+1, err)
		}
		replies = append(replies, r)
		if len(r.calls) == 0 {
			return replies
		}
		msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: r.calls})
		for _, c := range r.calls {
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: c.ID,
				Content: fmt.Sprintf("result %d of %s", len(replies), c.Function.Name)})
		}
	}
	t.Fatal("no answer after 30 requests")
	return nil
}

// calls counts the tool calls of replies.
func calls(replies []sessReply) int {
	n := 0
	for _, r := range replies {
		n += len(r.calls)
	}
	return n
}

// checkForcedFinal checks that the last reply of a turn is the session's
// forced final answer for cap after ran tool calls: the answer of a model
// offered no tools, after the notice, with the header naming the budget.
func checkForcedFinal(t *testing.T, replies []sessReply, cap session.Cap, ran int) {
	t.Helper()
	last := replies[len(replies)-1]
	if got := last.header.Get(proxy.SessionBudgetHeader); got != string(cap) {
		t.Errorf("%s = %q, want %q", proxy.SessionBudgetHeader, got, cap)
	}
	wantAnswer := fmt.Sprintf("Final answer (simulated): stopped after %d of 20 steps", ran)
	if !strings.Contains(last.content, "**System Notice**: session budget spent") || !strings.Contains(last.content, wantAnswer) {
		t.Errorf("the last answer = %q, want the session notice and %q", last.content, wantAnswer)
	}
	for _, r := range replies[:len(replies)-1] {
		if h := r.header.Get(proxy.SessionBudgetHeader); h != "" {
			t.Errorf("a response before the cap carries %s: %q", proxy.SessionBudgetHeader, h)
		}
	}
}

// checkOneToolLessCall checks that the upstream got exactly one call since
// mark, without tools.
func (s *sessStack) checkOneToolLessCall(t *testing.T, mark int) {
	t.Helper()
	got := s.up.Received()[mark:]
	if len(got) != 1 {
		t.Fatalf("upstream calls = %d, want 1", len(got))
	}
	req, err := chat.ParseRequest(got[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := req.Field("tools"); ok {
		t.Errorf("the forced final call has tools")
	}
}

func TestSessionCappedByToolCalls(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			s := newSessStack(t, proxy.Config{Sessions: budget(session.Budget{ToolCalls: 3})}, proxy.Options{})
			ctx := testContext(t)
			a := s.agent("", "run-1", stream, nil)
			replies := a.turn(t, ctx, "Fix the rounding bug.")
			if got := calls(replies); got != 3 {
				t.Fatalf("tool calls run = %d, want 3", got)
			}
			checkForcedFinal(t, replies, session.CapToolCalls, 3)
			// Every later request of the session is the same forced final:
			// one upstream call, no tools.
			mark := len(s.up.Received())
			again := a.turn(t, ctx, "Go on.")
			if len(again) != 1 {
				t.Fatalf("a later turn took %d requests, want 1", len(again))
			}
			checkForcedFinal(t, again, session.CapToolCalls, 0)
			s.checkOneToolLessCall(t, mark)
			// Another session of the same client is its own.
			other := s.agent("", "run-2", stream, nil).turn(t, ctx, "Fix the rounding bug.")
			if calls(other) != 3 || len(other[0].calls) != 1 {
				t.Errorf("another session: %d calls (first reply %d), want its own 3", calls(other), len(other[0].calls))
			}
		})
	}
}

// adminView reads a session through GET /admin/sessions/{id}.
func (s *sessStack) adminView(t *testing.T, ctx context.Context, id string, hdr http.Header) (map[string]any, int) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.gw.URL+"/admin/sessions/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := s.gw.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return v, resp.StatusCode
}

// usageSum sums what the client was told each response used.
func usageSum(replies ...[]sessReply) (prompt, completion int) {
	for _, rs := range replies {
		for _, r := range rs {
			prompt += r.usage.PromptTokens
			completion += r.usage.CompletionTokens
		}
	}
	return prompt, completion
}

// TestSessionCappedByTokens: the session's tokens are what the client was
// told each response used, and the response that would cross the budget
// is the forced final answer.
func TestSessionCappedByTokens(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			s := newSessStack(t, proxy.Config{Sessions: budget(session.Budget{Tokens: 1500})}, proxy.Options{})
			ctx := testContext(t)
			replies := s.agent("", "tok-1", stream, nil).turn(t, ctx, "Fix the rounding bug.")
			ran := calls(replies)
			if ran == 0 || ran >= 20 {
				t.Fatalf("tool calls run = %d, want the budget to stop the session before its end", ran)
			}
			checkForcedFinal(t, replies, session.CapTokens, ran)
			v, status := s.adminView(t, ctx, "tok-1", nil)
			prompt, completion := usageSum(replies)
			if status != http.StatusOK || v["tokens"] != float64(prompt+completion) || v["prompt_tokens"] != float64(prompt) || v["capped"] != string(session.CapTokens) {
				t.Errorf("the session = %v (%d), want %d tokens (%d prompt, as the client was told) and capped", v, status, prompt+completion, prompt)
			}
			if v["tool_calls"] != float64(ran) || v["requests"] != float64(len(replies)) {
				t.Errorf("the session counted %v calls in %v requests, want %d in %d", v["tool_calls"], v["requests"], ran, len(replies))
			}
		})
	}
}

// TestSessionCappedByUSD: the session's cost is the client's reported
// usage priced by the table.
func TestSessionCappedByUSD(t *testing.T) {
	price := pricing.Price{InputCacheMiss: 100, InputCacheHit: 10, Output: 400}
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			cfg := proxy.Config{Sessions: budget(session.Budget{USD: 0.2}), Prices: []pricing.Rule{{Pattern: sessModel, Price: price}}}
			s := newSessStack(t, cfg, proxy.Options{})
			ctx := testContext(t)
			replies := s.agent("", "usd-1", stream, nil).turn(t, ctx, "Fix the rounding bug.")
			ran := calls(replies)
			if ran == 0 || ran >= 20 {
				t.Fatalf("tool calls run = %d, want the budget to stop the session before its end", ran)
			}
			checkForcedFinal(t, replies, session.CapUSD, ran)
			prompt, completion := usageSum(replies)
			want := price.Cost(pricing.Usage{Prompt: prompt, Completion: completion})
			v, _ := s.adminView(t, ctx, "usd-1", nil)
			if got, _ := v["usd"].(float64); math.Abs(got-want) > 1e-9 || v["capped"] != string(session.CapUSD) {
				t.Errorf("the session cost %v (capped %v), want %v from the usage the client was told", v["usd"], v["capped"], want)
			}
			// The forced final call itself crossed the budget, not a call
			// before it.
			if before := want - price.Cost(pricing.Usage{Prompt: replies[len(replies)-1].usage.PromptTokens, Completion: replies[len(replies)-1].usage.CompletionTokens}); before > 0.2 {
				t.Errorf("the session had spent %v before its final answer, over its budget of 0.2", before)
			}
		})
	}
}

// TestSessionScopedByKey: a session is its client key's; the same id under
// another key is another session, and the admin routes name the key.
func TestSessionScopedByKey(t *testing.T) {
	keys := []proxy.ClientKey{{Key: "sk-team-a-7f2c"}, {Key: "sk-team-b-91d0"}}
	s := newSessStack(t, proxy.Config{ClientKeys: keys, Sessions: budget(session.Budget{ToolCalls: 2})}, proxy.Options{})
	ctx := testContext(t)
	a := s.agent("sk-team-a-7f2c", "shared-id", false, nil).turn(t, ctx, "Fix it.")
	checkForcedFinal(t, a, session.CapToolCalls, 2)
	b := s.agent("sk-team-b-91d0", "shared-id", false, nil).turn(t, ctx, "Fix it.")
	if calls(b) != 2 || len(b[0].calls) != 1 {
		t.Errorf("the same id under another key: %d calls, first reply %d; want a session of its own", calls(b), len(b[0].calls))
	}
	for key, want := range map[string]any{"sk-team-a-7f2c": string(session.CapToolCalls), "sk-team-b-91d0": string(session.CapToolCalls)} {
		v, status := s.adminView(t, ctx, "shared-id", http.Header{proxy.SessionKeyHeader: {key}})
		if status != http.StatusOK || v["capped"] != want || v["requests"] != float64(3) {
			t.Errorf("admin view with key %s…: %d %v", key[:9], status, v)
		}
	}
	if _, status := s.adminView(t, ctx, "shared-id", nil); status != http.StatusBadRequest {
		t.Errorf("admin view naming no key: %d, want 400", status)
	}
	if _, status := s.adminView(t, ctx, "shared-id", http.Header{proxy.SessionKeyHeader: {"sk-unknown"}}); status != http.StatusBadRequest {
		t.Errorf("admin view naming a key the gateway does not have: %d, want 400", status)
	}
}

// TestSessionReject: with SESSION_ON_CAP=reject a spent session is a 429
// with Retry-After, in OpenAI's shape, as the client reads it.
func TestSessionReject(t *testing.T) {
	sess := budget(session.Budget{ToolCalls: 1})
	sess.Reject = true
	s := newSessStack(t, proxy.Config{Sessions: sess}, proxy.Options{})
	ctx := testContext(t)
	a := s.agent("", "rej-1", false, nil)
	msgs := []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "Fix it."}}
	r, err := a.send(ctx, msgs)
	if err != nil || len(r.calls) != 1 {
		t.Fatalf("first request: %v, %+v; want a tool call", err, r)
	}
	msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: r.calls},
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: r.calls[0].ID, Content: "cmd calc"})
	_, err = a.send(ctx, msgs)
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != http.StatusTooManyRequests || apiErr.Code != "session_budget_spent" {
		t.Fatalf("second request: %v, want a 429 session_budget_spent", err)
	}
	resp := post(t, ctx, s.gw, "/v1/chat/completions", `{"model":"`+sessModel+`","messages":[{"role":"user","content":"again"}]}`,
		http.Header{session.Header: {"rej-1"}})
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || resp.Header.Get(proxy.SessionBudgetHeader) != string(session.CapToolCalls) {
		t.Errorf("a raw request: %d, Retry-After %q, %s %q", resp.StatusCode, resp.Header.Get("Retry-After"),
			proxy.SessionBudgetHeader, resp.Header.Get(proxy.SessionBudgetHeader))
	}
}

// TestSessionHeaders: a request header lowers the session's budget; one
// that would raise it is a 400 naming the header.
func TestSessionHeaders(t *testing.T) {
	s := newSessStack(t, proxy.Config{Sessions: budget(session.Budget{ToolCalls: 5})}, proxy.Options{})
	ctx := testContext(t)
	low := s.agent("", "hdr-1", true, http.Header{session.HeaderMaxToolCalls: {"1"}}).turn(t, ctx, "Fix it.")
	checkForcedFinal(t, low, session.CapToolCalls, 1)
	_, err := s.agent("", "hdr-2", false, http.Header{session.HeaderMaxToolCalls: {"6"}}).send(ctx, userMessage("Fix it."))
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != http.StatusBadRequest || apiErr.Param == nil || *apiErr.Param != session.HeaderMaxToolCalls {
		t.Errorf("a raising header: %v, want a 400 naming %s", err, session.HeaderMaxToolCalls)
	}
	_, err = s.agent("", strings.Repeat("x", 300), false, nil).send(ctx, userMessage("Fix it."))
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != http.StatusBadRequest || apiErr.Param == nil || *apiErr.Param != session.Header {
		t.Errorf("a session id too long: %v, want a 400 naming %s", err, session.Header)
	}
}

// TestSessionNoneNamed: a request that names no session is served as
// before, however small the budgets.
func TestSessionNoneNamed(t *testing.T) {
	s := newSessStack(t, proxy.Config{Sessions: budget(session.Budget{ToolCalls: 1, Tokens: 1, USD: 1e-9})}, proxy.Options{})
	c, _ := tsClient(s.gw, "/v1", nil)
	replies := (&sessAgent{client: c}).turn(t, testContext(t), "Fix the rounding bug.")
	if calls(replies) != 20 || strings.Contains(replies[len(replies)-1].content, "System Notice") {
		t.Errorf("no session: %d calls, answer %q; want the whole script", calls(replies), replies[len(replies)-1].content)
	}
}
