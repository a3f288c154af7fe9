package proxy_test

// End-to-end tests of history truncation (fitting a request to the
// model's context window): the real router with a tokens.Counter, the
// go-openai client, and a scripted upstream that
// records what reached it. A 300k-token agent history must reach the
// upstream within the model's budget, cut in whole units, oldest first,
// and the client must get its answer on both protocols, streaming or not.
//
// Helpers here are prefixed "tk" to stay clear of the package's other test
// files.
//
// Benchmark of the gateway's added latency on that request:
//
//	go test ./proxy -run '^$' -bench Truncate300k -benchtime 20x

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
	"github.com/phasegate/phasegate/tokens"
)

const (
	// tkModel has the built-in 128,000-token window (16,384 reserved for
	// the completion, 2 % margin, o200k_base).
	tkModel = "gpt-4o"
	// tkSmall is configured by the tests with a small window.
	tkSmall = "tk-small"
	// tkHistoryTokens is the size of the agent history.
	tkHistoryTokens = 300_000
	// tkMaxCycles is the guard's MAX_PHASE_CYCLES.
	tkMaxCycles = 3
	// tkAnswer is what the upstream answers.
	tkAnswer = "Here is what I found in the repository."
	// tkColdWait bounds a request whose 300k-token history the gateway
	// has not counted yet: about 1.5 s of tiktoken on a laptop, ten times
	// that under -race on a loaded 2-CPU runner.
	tkColdWait = heavyWait
	// tkMarker is the start of the marker of a shortened tool result.
	tkMarker = "…[phasegate: "
)

// tkSmallLimits is the window of tkSmall: 12,000 tokens, 2,000 of them
// reserved for the completion, 2 % margin.
var tkSmallLimits = tokens.Limits{ContextWindow: 12_000, CompletionReserve: 2_000, SafetyMargin: 0.02, Encoding: tokens.EncodingO200K}

// tkCounter returns a counter with the built-in limits and tkSmall.
func tkCounter(tb testing.TB) *tokens.Counter {
	tb.Helper()
	cfg := tokens.DefaultConfig()
	cfg.Models[tkSmall] = tkSmallLimits
	c, err := tokens.New(cfg)
	if err != nil {
		tb.Fatalf("tokens.New: %v", err)
	}
	return c
}

// tkBudget is the most tiktoken tokens a prompt of model may have: the
// window less the reserve, less the margin, as tokens.Counter.Fit
// documents it, with the learned ratio at 1 (the upstream of these tests
// reports exactly the tiktoken count).
func tkBudget(c *tokens.Counter, model string) int {
	l := c.Limits(model)
	return int(float64(l.ContextWindow-min(l.CompletionReserve, l.ContextWindow/2)) / (1 + l.SafetyMargin))
}

// ---------------------------------------------------------------------------
// The agent history.

// tkWords is the vocabulary of the generated prose.
var tkWords = strings.Fields(`the a of to and in is it for on with as that this be by from at are or an
repository function handler request response stream token budget window history message tool call result
error status config gateway upstream client model provider cache count limit agent turn phase guard
ledger signature schema test build deploy latency memory buffer event chunk delta index argument value
returns reads writes opens closes checks parses encodes decodes sends waits retries drops keeps fits`)

// tkProse returns about n words of prose.
func tkProse(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(tkWords[r.IntN(len(tkWords))])
		if r.IntN(12) == 0 {
			b.WriteByte('.')
		}
	}
	return b.String()
}

// tkCode returns about n lines of Go-like code, as a read_file result.
func tkCode(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := range n {
		a, c := tkWords[r.IntN(len(tkWords))], tkWords[r.IntN(len(tkWords))]
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, "func (h *%sHandler) %s%d(ctx context.Context, n int) error {\n", a, strings.ToUpper(c[:1])+c[1:], i)
		case 1:
			fmt.Fprintf(&b, "\tif err := h.%s.%s(ctx, n+%d); err != nil { return fmt.Errorf(\"%s %s: %%w\", err) }\n", a, c, r.IntN(1000), a, c)
		case 2:
			fmt.Fprintf(&b, "\t// %s\n", tkProse(r, 12))
		default:
			fmt.Fprintf(&b, "\treturn nil // %d\n}\n", r.IntN(1<<20))
		}
	}
	return b.String()
}

// tkHistory is a generated agent history. Every message's text starts
// with "[mN] ", N its position, so the upstream's copy can be mapped back.
type tkHistory struct {
	msgs  []openai.ChatCompletionMessage
	tools []openai.Tool
}

func (h *tkHistory) tag(text string) string { return fmt.Sprintf("[m%d] %s", len(h.msgs), text) }

func (h *tkHistory) text(role, text string) {
	h.msgs = append(h.msgs, openai.ChatCompletionMessage{Role: role, Content: h.tag(text)})
}

// call appends an assistant message with one tool call per result, then
// the results.
func (h *tkHistory) call(r *rand.Rand, prefix string, results ...string) {
	m := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: h.tag(tkProse(r, 15))}
	for i := range results {
		id := fmt.Sprintf("call_%s_%d", prefix, i)
		m.ToolCalls = append(m.ToolCalls, openai.ToolCall{ID: id, Type: openai.ToolTypeFunction,
			Function: openai.FunctionCall{Name: "read_file", Arguments: `{"path":"src/` + id + `.go"}`}})
	}
	h.msgs = append(h.msgs, m)
	for i, res := range results {
		h.msgs = append(h.msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: m.ToolCalls[i].ID, Content: h.tag(res)})
	}
}

func tkTools() []openai.Tool {
	return []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "read_file",
		Description: "Read a file of the repository.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}}}
}

// tkAgentHistory builds an agent's history of turns turns: a system prompt
// and a developer message, then per turn a user message, a tool call with
// its result (every fourth one huge), two parallel calls with their
// results and an answer, a system reminder every tenth turn; then the
// current turn: the last user message and one executed call with a huge
// result.
func tkAgentHistory(turns int) tkHistory {
	r := rand.New(rand.NewPCG(1, 2))
	h := tkHistory{tools: tkTools()}
	h.text(openai.ChatMessageRoleSystem, "You are a coding agent. "+tkProse(r, 600))
	h.text(openai.ChatMessageRoleDeveloper, "Repository rules: "+tkProse(r, 200))
	for turn := range turns {
		h.text(openai.ChatMessageRoleUser, tkProse(r, 60))
		lines := 220
		if turn%4 == 1 {
			lines = 1200 // a huge result, shortened when it is kept
		}
		h.call(r, fmt.Sprintf("%d_a", turn), tkCode(r, lines))
		h.call(r, fmt.Sprintf("%d_b", turn), tkCode(r, 60), tkProse(r, 300))
		h.text(openai.ChatMessageRoleAssistant, tkProse(r, 150))
		if turn%10 == 9 {
			h.text(openai.ChatMessageRoleSystem, "Reminder: "+tkProse(r, 40))
		}
	}
	h.text(openai.ChatMessageRoleUser, "Now fix the failing test. "+tkProse(r, 40))
	h.call(r, "current", tkCode(r, 1500))
	return h
}

// tkBig is the 300k-token history, built once.
var tkBig = sync.OnceValue(func() tkHistory { return tkAgentHistory(26) })

// tkParse turns client messages into the gateway's form.
func tkParse(tb testing.TB, model string, msgs []openai.ChatCompletionMessage, tools []openai.Tool) *chat.Request {
	tb.Helper()
	b, err := json.Marshal(openai.ChatCompletionRequest{Model: model, Messages: msgs, Tools: tools})
	if err != nil {
		tb.Fatal(err)
	}
	req, err := chat.ParseRequest(b)
	if err != nil {
		tb.Fatal(err)
	}
	return req
}

// tkCount returns the tiktoken count of a request's messages and tools,
// framing included, whether or not it fits.
func tkCount(tb testing.TB, c *tokens.Counter, req *chat.Request) int {
	tb.Helper()
	f, err := c.Fit(req.Model, req.Messages, req.Tools, req.MaxTokens, 0)
	if err != nil {
		tb.Fatalf("count: %v", err)
	}
	return f.PromptTokens + f.DroppedTokens
}

// tkSeq returns the position a generated message carries, -1 for one the
// gateway added.
func tkSeq(m chat.Message) int {
	rest, ok := strings.CutPrefix(m.Text(), "[m")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, ']'), 0)])
	if err != nil {
		return -1
	}
	return n
}

// ---------------------------------------------------------------------------
// The gateway, the upstream and the client.

// tkResponder answers every chat completion with tkAnswer, streaming when
// asked, and reports as prompt_tokens the tiktoken count of what it got:
// an upstream whose tokenizer is tiktoken, so the learned ratio stays 1.
func tkResponder(c *tokens.Counter) proxytest.Responder {
	return func(rec proxytest.Received) sim.Reply {
		req, err := chat.ParseRequest(rec.Body)
		if err != nil {
			return sim.Error(http.StatusBadRequest, err.Error(), "invalid_request_error", "bad_body")
		}
		prompt := 0
		if f, err := c.Fit(req.Model, req.Messages, req.Tools, req.MaxTokens, 0); err == nil {
			prompt = f.PromptTokens + f.DroppedTokens
		}
		if !req.Stream {
			return sim.Completion(req.Model, map[string]any{"content": tkAnswer}, chat.FinishStop,
				map[string]any{"prompt_tokens": prompt, "completion_tokens": 9, "total_tokens": prompt + 9})
		}
		s := sim.NewStream(req.Model).Role().Content(tkAnswer[:10], tkAnswer[10:]).Finish(chat.FinishStop)
		if req.IncludeUsage {
			s.Usage(prompt, 9, nil)
		}
		return s.Done().Reply()
	}
}

// tkGateway serves a gateway that fits histories with counter, with the
// guard on /two-stage/v1, in front of a recording upstream.
func tkGateway(tb testing.TB, counter *tokens.Counter, respond proxytest.Responder) (*proxytest.Upstream, *httptest.Server) {
	tb.Helper()
	up, usrv := proxytest.NewServer(tb, respond)
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: usrv.URL + "/v1"}}}
	return up, serveGateway(tb, cfg, proxy.Options{Tokens: counter,
		TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{MaxPhaseCycles: tkMaxCycles}, nil)})
}

// tkHeaders adds headers to every request of a client.
type tkHeaders struct {
	base   http.RoundTripper
	header http.Header
}

func (t tkHeaders) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, vs := range t.header {
		req.Header[k] = vs
	}
	return t.base.RoundTrip(req)
}

// tkClient returns a go-openai client of the gateway on route ("/standard/v1",
// "/two-stage/v1") that sends header with every request.
func tkClient(gw *httptest.Server, route string, header http.Header) *openai.Client {
	c := openai.DefaultConfig("sk-client")
	c.BaseURL = gw.URL + route
	c.HTTPClient = &http.Client{Transport: tkHeaders{base: gw.Client().Transport, header: header}}
	c.EmptyMessagesLimit = 1 << 20
	return openai.NewClientWithConfig(c)
}

// tkAsk sends a history through client, streaming or not, and returns the
// answer's text and the response headers.
func tkAsk(ctx context.Context, client *openai.Client, model string, h tkHistory, stream bool) (string, http.Header, error) {
	req := openai.ChatCompletionRequest{Model: model, Messages: h.msgs, Tools: h.tools, Stream: stream}
	if !stream {
		resp, err := client.CreateChatCompletion(ctx, req)
		if err != nil {
			return "", nil, err
		}
		if len(resp.Choices) != 1 {
			return "", nil, fmt.Errorf("got %d choices, want 1", len(resp.Choices))
		}
		return resp.Choices[0].Message.Content, resp.Header(), nil
	}
	s, err := client.CreateChatCompletionStream(ctx, req)
	if err != nil {
		return "", nil, err
	}
	defer s.Close()
	var text strings.Builder
	for range 10_000 {
		c, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return text.String(), s.Header(), nil
		}
		if err != nil {
			return "", nil, err
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	return "", nil, errors.New("stream did not end after 10,000 chunks")
}

// tkReceived returns the one chat completion the upstream got for a
// request id.
func tkReceived(tb testing.TB, up *proxytest.Upstream, id string) *chat.Request {
	tb.Helper()
	var got []proxytest.Received
	for _, rec := range up.Received() {
		if rec.Header.Get("X-Request-Id") == id {
			got = append(got, rec)
		}
	}
	if len(got) != 1 {
		tb.Fatalf("upstream got %d requests with id %s, want 1", len(got), id)
	}
	req, err := chat.ParseRequest(got[0].Body)
	if err != nil {
		tb.Fatalf("upstream request: %v", err)
	}
	return req
}

// tkRouteName is a route without its slashes and version: "two-stage".
func tkRouteName(route string) string {
	return strings.TrimSuffix(strings.TrimPrefix(route, "/"), "/v1")
}

// tkHeaderInt reads a whole-number response header; -1 when absent.
func tkHeaderInt(tb testing.TB, h http.Header, name string) int {
	tb.Helper()
	v := h.Get(name)
	if v == "" {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		tb.Fatalf("%s: %q is not a whole number", name, v)
	}
	return n
}

// tkCheckHistory checks what the upstream got against what the client
// sent: the order kept, every system and developer message and the last
// user message kept, what was dropped being the oldest of the rest, every
// tool result with its call and every call with all its results. It
// returns the number of tool results shortened.
func tkCheckHistory(t *testing.T, sent tkHistory, got []chat.Message) (shortened int) {
	t.Helper()
	lastUser := -1
	for i, m := range sent.msgs {
		if m.Role == openai.ChatMessageRoleUser {
			lastUser = i
		}
	}
	kept := map[int]bool{}
	prev := -1
	for i, m := range got {
		seq := tkSeq(m)
		if seq < 0 || seq >= len(sent.msgs) {
			t.Fatalf("upstream message %d is not one the client sent: %.80s", i, m.Raw)
		}
		if seq <= prev {
			t.Fatalf("upstream message %d is the client's %d, after its %d: order changed", i, seq, prev)
		}
		prev = seq
		kept[seq] = true
		if m.Role != sent.msgs[seq].Role {
			t.Errorf("upstream message %d: role %s, the client sent %s", i, m.Role, sent.msgs[seq].Role)
		}
		if m.Text() != sent.msgs[seq].Content {
			if m.Role != chat.RoleTool || !strings.Contains(m.Text(), tkMarker) {
				t.Errorf("upstream message %d (client's %d, %s) changed and is not a shortened tool result: %.120q", i, seq, m.Role, m.Text())
			}
			shortened++
		}
	}
	firstKept := -1
	for i, m := range sent.msgs {
		pinned := m.Role == openai.ChatMessageRoleSystem || m.Role == openai.ChatMessageRoleDeveloper || i == lastUser
		switch {
		case pinned && !kept[i]:
			t.Errorf("client message %d (%s) was dropped; system, developer and the last user message must stay", i, m.Role)
		case !pinned && kept[i] && firstKept < 0:
			firstKept = i
		case !pinned && !kept[i] && firstKept >= 0:
			t.Errorf("client message %d (%s) was dropped after %d was kept: the oldest must go first", i, m.Role, firstKept)
		}
	}
	// Whole units: every result answers a call the upstream sees, and
	// every call the upstream sees has all its results.
	calls := map[string]bool{}
	answered := map[string]bool{}
	for i, m := range got {
		switch m.Role {
		case chat.RoleAssistant:
			for _, tc := range m.ToolCalls {
				calls[tc.ID] = true
			}
		case chat.RoleTool:
			if !calls[m.ToolCallID] {
				t.Errorf("upstream message %d: orphaned tool result for %s, whose call was dropped", i, m.ToolCallID)
			}
			answered[m.ToolCallID] = true
		}
	}
	for id := range calls {
		if !answered[id] {
			t.Errorf("upstream history: call %s is there, its result was dropped", id)
		}
	}
	return shortened
}

// ---------------------------------------------------------------------------
// The tests.

// TestTokensTruncate300kHistory sends a 300k-token agent history to a
// 128k model through both protocols, streaming and not, with the go-openai
// client.
func TestTokensTruncate300kHistory(t *testing.T) {
	t.Parallel()
	counter := tkCounter(t)
	up, gw := tkGateway(t, counter, tkResponder(counter))
	h := tkBig()
	sent := tkParse(t, tkModel, h.msgs, h.tools)
	budget := tkBudget(counter, tkModel)
	total := 0 // counted after the first request, which the gateway serves cold

	for _, route := range []string{"/standard/v1", "/two-stage/v1"} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tkRouteName(route), stream), func(t *testing.T) {
				id := fmt.Sprintf("tk-300k-%s-%v", tkRouteName(route), stream)
				ctx, cancel := context.WithTimeout(context.Background(), tkColdWait)
				defer cancel()
				start := time.Now()
				answer, hdr, err := tkAsk(ctx, tkClient(gw, route, http.Header{"X-Request-Id": {id}}), tkModel, h, stream)
				if err != nil {
					t.Fatalf("client: %v", err)
				}
				elapsed := time.Since(start)
				if answer != tkAnswer {
					t.Errorf("answer = %q, want %q", answer, tkAnswer)
				}
				if total == 0 {
					total = tkCount(t, counter, sent)
					t.Logf("history: %d messages, %d tokens, %d bytes; budget %d tokens", len(h.msgs), total, len(sent.Encode()), budget)
					if total < tkHistoryTokens || total > tkHistoryTokens*5/4 {
						t.Fatalf("generated history has %d tokens, want about %d", total, tkHistoryTokens)
					}
				}
				t.Logf("%v: dropped %s messages, %s tokens, shortened %s results; prompt %s tokens", elapsed.Round(time.Millisecond),
					hdr.Get("X-Phasegate-Dropped-Messages"), hdr.Get("X-Phasegate-Dropped-Tokens"), hdr.Get("X-Phasegate-Shortened-Tool-Results"), hdr.Get("X-Phasegate-Prompt-Tokens"))

				got := tkReceived(t, up, id)
				shortened := tkCheckHistory(t, h, got.Messages)
				if len(got.Tools) != 1 {
					t.Errorf("upstream got %d tools, want the client's 1", len(got.Tools))
				}
				// The upstream's history fits: the same counter has
				// nothing left to drop or shorten, within the budget.
				f, err := counter.Fit(tkModel, got.Messages, got.Tools, 0, 0)
				if err != nil {
					t.Fatalf("Fit of what the upstream got: %v", err)
				}
				if f.DroppedMessages != 0 || f.Shortened != 0 {
					t.Errorf("Fit of what the upstream got drops %d messages and shortens %d results, want 0 and 0", f.DroppedMessages, f.Shortened)
				}
				if f.PromptTokens > budget {
					t.Errorf("upstream prompt = %d tokens, want at most the budget %d", f.PromptTokens, budget)
				}
				if f.PromptTokens < budget*3/4 {
					t.Errorf("upstream prompt = %d tokens of a %d budget: more dropped than needed", f.PromptTokens, budget)
				}

				dropped := tkHeaderInt(t, hdr, "X-Phasegate-Dropped-Messages")
				if want := len(h.msgs) - len(got.Messages); dropped != want || want <= 0 {
					t.Errorf("X-Phasegate-Dropped-Messages = %d, want %d (the client sent %d, the upstream got %d)", dropped, want, len(h.msgs), len(got.Messages))
				}
				if got, want := tkHeaderInt(t, hdr, "X-Phasegate-Dropped-Tokens"), total-f.PromptTokens; got != want {
					t.Errorf("X-Phasegate-Dropped-Tokens = %d, want %d", got, want)
				}
				if got := tkHeaderInt(t, hdr, "X-Phasegate-Shortened-Tool-Results"); got != shortened || shortened == 0 {
					t.Errorf("X-Phasegate-Shortened-Tool-Results = %d; the upstream got %d shortened, want at least 1 (the current turn's)", got, shortened)
				}
				if got, want := hdr.Get("X-Phasegate-Protocol"), tkRouteName(route); got != want {
					t.Errorf("X-Phasegate-Protocol = %q, want %q", got, want)
				}
				if got := tkHeaderInt(t, hdr, "X-Phasegate-Prompt-Tokens"); got != f.PromptTokens {
					t.Errorf("X-Phasegate-Prompt-Tokens = %d, want the upstream's count %d", got, f.PromptTokens)
				}
			})
		}
	}

	t.Run("max prompt header cannot raise the budget", func(t *testing.T) {
		id := "tk-300k-raise"
		hdr := http.Header{"X-Request-Id": {id}, "X-Phasegate-Max-Prompt-Tokens": {"10000000"}}
		if _, _, err := tkAsk(testContext(t), tkClient(gw, "/standard/v1", hdr), tkModel, h, false); err != nil {
			t.Fatalf("client: %v", err)
		}
		got := tkReceived(t, up, id)
		if n := tkCount(t, counter, got); n > budget {
			t.Errorf("upstream prompt = %d tokens, want at most the window's budget %d", n, budget)
		}
	})
}

// TestTokensSystemPromptTooLong: when the system prompt alone exceeds the
// window, the client gets 400 context_length_exceeded and the upstream
// nothing.
func TestTokensSystemPromptTooLong(t *testing.T) {
	t.Parallel()
	counter := tkCounter(t)
	up, gw := tkGateway(t, counter, tkResponder(counter))
	r := rand.New(rand.NewPCG(3, 4))
	var h tkHistory
	h.text(openai.ChatMessageRoleSystem, tkProse(r, 15_000)) // above tkSmall's 12,000
	h.text(openai.ChatMessageRoleUser, "hi")
	for _, route := range []string{"/standard/v1", "/two-stage/v1"} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tkRouteName(route), stream), func(t *testing.T) {
				_, _, err := tkAsk(testContext(t), tkClient(gw, route, nil), tkSmall, h, stream)
				var ae *openai.APIError
				if !errors.As(err, &ae) {
					t.Fatalf("err = %v (%T), want *openai.APIError", err, err)
				}
				if ae.HTTPStatusCode != http.StatusBadRequest || ae.Code != tokens.CodeContextLengthExceeded || ae.Type != chat.TypeInvalidRequest {
					t.Errorf("error = %d %s %v, want 400 %s %s", ae.HTTPStatusCode, ae.Type, ae.Code, chat.TypeInvalidRequest, tokens.CodeContextLengthExceeded)
				}
				if ae.Param == nil || *ae.Param != "messages" {
					t.Errorf("param = %v, want messages", ae.Param)
				}
			})
		}
	}
	if n := len(up.Received()); n != 0 {
		t.Errorf("upstream got %d requests, want none", n)
	}
}

// TestTokensWholeUnits sends histories where dropping message by message
// would stop inside a tool-call unit, leaving a result without its call:
// the upstream must get whole units only.
func TestTokensWholeUnits(t *testing.T) {
	t.Parallel()
	counter := tkCounter(t)
	up, gw := tkGateway(t, counter, tkResponder(counter))
	tests := []struct {
		name string
		// old appends the unit that must go as a whole.
		old func(h *tkHistory, r *rand.Rand)
	}{
		{"parallel calls, the first result large", func(h *tkHistory, r *rand.Rand) {
			h.call(r, "par", tkCode(r, 330), "ok")
		}},
		{"large call arguments, a small result", func(h *tkHistory, r *rand.Rand) {
			args, err := json.Marshal(map[string]string{"path": "src/big.go", "text": tkCode(r, 330)})
			if err != nil {
				t.Fatal(err)
			}
			h.msgs = append(h.msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: h.tag("Writing it."),
				ToolCalls: []openai.ToolCall{{ID: "call_write", Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "write_file", Arguments: string(args)}}}})
			h.msgs = append(h.msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: "call_write", Content: h.tag("written")})
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, uint64(i)))
			h := tkHistory{tools: tkTools()}
			h.text(openai.ChatMessageRoleSystem, "You are a coding agent.")
			h.text(openai.ChatMessageRoleUser, "Start.")
			tt.old(&h, r)
			h.text(openai.ChatMessageRoleAssistant, "Done.")
			h.text(openai.ChatMessageRoleUser, tkProse(r, 5_000)) // with the unit, above tkSmall's budget
			total, budget := tkCount(t, counter, tkParse(t, tkSmall, h.msgs, h.tools)), tkBudget(counter, tkSmall)
			if total <= budget+200 || total > budget+5_000 {
				t.Fatalf("history has %d tokens, want a little over the budget %d", total, budget)
			}
			id := fmt.Sprintf("tk-units-%d", i)
			if _, _, err := tkAsk(testContext(t), tkClient(gw, "/standard/v1", http.Header{"X-Request-Id": {id}}), tkSmall, h, false); err != nil {
				t.Fatalf("client: %v", err)
			}
			tkCheckHistory(t, h, tkReceived(t, up, id).Messages)
		})
	}
}

// TestTokensLedgerKeepsDroppedCalls: the guard counts the calls executed
// in the current turn from the history as the client sent it, so calls
// that truncation dropped still spend the cycle budget and the final
// answer is forced.
func TestTokensLedgerKeepsDroppedCalls(t *testing.T) {
	t.Parallel()
	counter := tkCounter(t)
	up, gw := tkGateway(t, counter, tkResponder(counter))
	r := rand.New(rand.NewPCG(5, 6))
	h := tkHistory{tools: tkTools()}
	h.text(openai.ChatMessageRoleSystem, "You are a coding agent.")
	h.text(openai.ChatMessageRoleUser, "Find the bug.")
	for i := range tkMaxCycles {
		h.call(r, fmt.Sprintf("turn_%d", i), tkCode(r, 300)) // about 5,500 tokens each
	}
	sent := tkParse(t, tkSmall, h.msgs, h.tools)
	t.Logf("history: %d messages, %d tokens; budget %d", len(h.msgs), tkCount(t, counter, sent), tkBudget(counter, tkSmall))

	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			id := fmt.Sprintf("tk-ledger-%v", stream)
			answer, hdr, err := tkAsk(testContext(t), tkClient(gw, "/two-stage/v1", http.Header{"X-Request-Id": {id}}), tkSmall, h, stream)
			if err != nil {
				t.Fatalf("client: %v", err)
			}
			if !strings.Contains(answer, tkAnswer) || !strings.Contains(answer, "**System Notice**") {
				t.Errorf("answer = %q, want the cycle-budget notice and %q", answer, tkAnswer)
			}
			if n := tkHeaderInt(t, hdr, "X-Phasegate-Dropped-Messages"); n <= 0 {
				t.Fatalf("X-Phasegate-Dropped-Messages = %d, want some: the test needs truncation to drop executed calls", n)
			}
			got := tkReceived(t, up, id)
			calls := 0
			for _, m := range got.Messages {
				calls += len(m.ToolCalls)
			}
			if calls >= tkMaxCycles {
				t.Fatalf("upstream got %d executed calls, want fewer than %d: truncation dropped none", calls, tkMaxCycles)
			}
			if len(got.Tools) != 0 {
				t.Errorf("upstream got %d tools, want none: %d calls were executed this turn, the final answer must be forced", len(got.Tools), tkMaxCycles)
			}
			if _, ok := got.Field("tool_choice"); ok {
				t.Error("upstream got a tool_choice in the forced final answer")
			}
			last := got.Messages[len(got.Messages)-1]
			if last.Role != chat.RoleSystem || tkSeq(last) >= 0 {
				t.Fatalf("last upstream message = %s %.80q, want the guard's notice", last.Role, last.Text())
			}
			tkCheckHistory(t, h, got.Messages[:len(got.Messages)-1])
		})
	}
}

// TestTokensMaxPromptHeader: X-Phasegate-Max-Prompt-Tokens lowers the
// budget of one request only.
func TestTokensMaxPromptHeader(t *testing.T) {
	t.Parallel()
	counter := tkCounter(t)
	up, gw := tkGateway(t, counter, tkResponder(counter))
	h := tkAgentHistory(2)
	sent := tkParse(t, tkModel, h.msgs, h.tools)
	total := tkCount(t, counter, sent)
	const capTokens = 8_000
	if total <= capTokens*2 || total > tkBudget(counter, tkModel) {
		t.Fatalf("history has %d tokens, want well above the cap %d and within the window", total, capTokens)
	}
	for _, route := range []string{"/standard/v1", "/two-stage/v1"} {
		t.Run(tkRouteName(route), func(t *testing.T) {
			id := "tk-cap-" + tkRouteName(route)
			hdr := http.Header{"X-Request-Id": {id}, "X-Phasegate-Max-Prompt-Tokens": {strconv.Itoa(capTokens)}}
			answer, resp, err := tkAsk(heavyContext(t), tkClient(gw, route, hdr), tkModel, h, true)
			if err != nil {
				t.Fatalf("client: %v", err)
			}
			if answer != tkAnswer {
				t.Errorf("answer = %q, want %q", answer, tkAnswer)
			}
			if n := tkHeaderInt(t, resp, "X-Phasegate-Dropped-Messages"); n <= 0 {
				t.Errorf("X-Phasegate-Dropped-Messages = %d, want some", n)
			}
			got := tkReceived(t, up, id)
			tkCheckHistory(t, h, got.Messages)
			f, err := counter.Fit(tkModel, got.Messages, got.Tools, 0, capTokens)
			if err != nil {
				t.Fatal(err)
			}
			if f.DroppedMessages != 0 || f.Shortened != 0 {
				t.Errorf("Fit of what the upstream got under the cap drops %d and shortens %d, want 0 and 0", f.DroppedMessages, f.Shortened)
			}
			if est := tkHeaderInt(t, resp, "X-Phasegate-Prompt-Tokens"); est > capTokens {
				t.Errorf("X-Phasegate-Prompt-Tokens = %d, want at most the cap %d", est, capTokens)
			}

			// The next request, without the header, goes as it is.
			id2 := id + "-next"
			_, resp, err = tkAsk(heavyContext(t), tkClient(gw, route, http.Header{"X-Request-Id": {id2}}), tkModel, h, false)
			if err != nil {
				t.Fatalf("client: %v", err)
			}
			if v := resp.Get("X-Phasegate-Dropped-Messages"); v != "" {
				t.Errorf("next request: X-Phasegate-Dropped-Messages = %s, want none", v)
			}
			if got := tkReceived(t, up, id2); len(got.Messages) != len(h.msgs) {
				t.Errorf("next request: upstream got %d messages, want all %d", len(got.Messages), len(h.msgs))
			}
		})
	}

	t.Run("invalid", func(t *testing.T) {
		before := len(up.Received())
		for _, v := range []string{"0", "-5", "many"} {
			_, _, err := tkAsk(heavyContext(t), tkClient(gw, "/standard/v1", http.Header{"X-Phasegate-Max-Prompt-Tokens": {v}}), tkModel, h, false)
			var ae *openai.APIError
			if !errors.As(err, &ae) || ae.HTTPStatusCode != http.StatusBadRequest || ae.Type != chat.TypeInvalidRequest {
				t.Errorf("header %q: err = %v, want a 400 invalid_request_error", v, err)
			}
		}
		if n := len(up.Received()) - before; n != 0 {
			t.Errorf("upstream got %d requests with an invalid header, want none", n)
		}
	})
}

// ---------------------------------------------------------------------------
// The benchmark.

// tkSwap is a handler that can be replaced between requests.
type tkSwap struct{ h atomic.Pointer[http.Handler] }

func (s *tkSwap) ServeHTTP(w http.ResponseWriter, r *http.Request) { (*s.h.Load()).ServeHTTP(w, r) }

// BenchmarkTruncate300k times the 300k-token history direct to the
// double and through the gateway, which truncates it to gpt-4o's window,
// interleaved, and reports the medians and what the gateway adds: warm
// (the same counter each time: counts cached, as for an agent re-sending
// its history) and cold (a new counter each time: every message counted).
func BenchmarkTruncate300k(b *testing.B) {
	reply := sim.Completion(tkModel, map[string]any{"content": tkAnswer}, chat.FinishStop,
		map[string]any{"prompt_tokens": 100_000, "completion_tokens": 9, "total_tokens": 100_009})
	up, usrv := proxytest.NewServer(b, func(proxytest.Received) sim.Reply { return reply })
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: usrv.URL + "/v1"}}}
	newHandler := func() http.Handler {
		h, err := proxy.New(cfg, proxy.Options{Tokens: tkCounter(b)})
		if err != nil {
			b.Fatal(err)
		}
		return h
	}
	swap := &tkSwap{}
	first := newHandler()
	swap.h.Store(&first)
	gw := httptest.NewServer(swap)
	b.Cleanup(gw.Close)

	h := tkBig()
	body, err := json.Marshal(openai.ChatCompletionRequest{Model: tkModel, Messages: h.msgs, Tools: h.tools})
	if err != nil {
		b.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	b.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	send := func(url string) *http.Response {
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: status %d", url, resp.StatusCode)
		}
		return resp
	}
	direct, through := usrv.URL+"/v1/chat/completions", gw.URL+"/standard/v1/chat/completions"
	if resp := send(through); resp.Header.Get("X-Phasegate-Dropped-Messages") == "" {
		b.Fatal("the gateway did not truncate the history")
	}
	send(direct)
	b.Logf("history: %d messages, %d bytes; the upstream got %d bytes", len(h.msgs), len(body), len(up.Received()[0].Body))

	for _, mode := range []string{"warm", "cold"} {
		b.Run(mode, func(b *testing.B) {
			var d, g []time.Duration
			for b.Loop() {
				if mode == "cold" {
					b.StopTimer()
					fresh := newHandler()
					swap.h.Store(&fresh)
					b.StartTimer()
				}
				t0 := time.Now()
				send(direct)
				t1 := time.Now()
				send(through)
				t2 := time.Now()
				d, g = append(d, t1.Sub(t0)), append(g, t2.Sub(t1))
			}
			dm, gm := tkMedian(d), tkMedian(g)
			b.ReportMetric(float64(dm.Microseconds())/1e3, "direct-p50-ms")
			b.ReportMetric(float64(gm.Microseconds())/1e3, "gateway-p50-ms")
			b.ReportMetric(float64((gm-dm).Microseconds())/1e3, "added-p50-ms")
		})
	}
}

func tkMedian(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestTokensCountedOnlyNearTheWindow: a prompt whose size in bytes cannot
// reach the budget is sent as it is without being counted, so it has no
// X-Phasegate-Prompt-Tokens; one that may reach it is counted, and the
// header is the count.
func TestTokensCountedOnlyNearTheWindow(t *testing.T) {
	t.Parallel()
	counter := tkCounter(t)
	up, gw := tkGateway(t, tkCounter(t), tkResponder(counter))
	r := rand.New(rand.NewPCG(7, 14))
	h := tkHistory{tools: tkTools(), msgs: []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "You are a coding agent."},
		{Role: openai.ChatMessageRoleUser, Content: tkProse(r, 3000)},
	}}
	sent := tkParse(t, tkModel, h.msgs, h.tools)
	total := tkCount(t, counter, sent) // another counter: the gateway's has counted nothing yet
	for i, route := range []string{"/standard/v1", "/two-stage/v1"} {
		t.Run(tkRouteName(route), func(t *testing.T) {
			id := "tk-uncounted-" + tkRouteName(route)
			_, hdr, err := tkAsk(testContext(t), tkClient(gw, route, http.Header{"X-Request-Id": {id}}), tkModel, h, false)
			if err != nil {
				t.Fatalf("client: %v", err)
			}
			if v := hdr.Get("X-Phasegate-Prompt-Tokens"); i == 0 && v != "" {
				t.Errorf("small prompt: X-Phasegate-Prompt-Tokens = %q, want none (not counted)", v)
			}
			if got := tkReceived(t, up, id); len(got.Messages) != len(h.msgs) {
				t.Errorf("small prompt: upstream got %d of %d messages", len(got.Messages), len(h.msgs))
			}

			// A cap the prompt fits under, but its bytes do not: counted.
			capTokens := total * 11 / 10
			id += "-capped"
			_, hdr, err = tkAsk(testContext(t), tkClient(gw, route, http.Header{"X-Request-Id": {id}, "X-Phasegate-Max-Prompt-Tokens": {strconv.Itoa(capTokens)}}), tkModel, h, false)
			if err != nil {
				t.Fatalf("client: %v", err)
			}
			if got := tkHeaderInt(t, hdr, "X-Phasegate-Prompt-Tokens"); got != total {
				t.Errorf("prompt near its cap: X-Phasegate-Prompt-Tokens = %d, want the count %d", got, total)
			}
			if got := tkReceived(t, up, id); len(got.Messages) != len(h.msgs) {
				t.Errorf("prompt near its cap: upstream got %d of %d messages, want all", len(got.Messages), len(h.msgs))
			}
		})
	}
}
