package proxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"testing"

	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// billingUpstream plays a provider that bills by its own tokenizer: it
// renders each request with a chat template of its own and counts it with
// cl100k_base, where the gateway counts with o200k_base and the OpenAI
// cookbook's framing, as DeepSeek's tokenizer differs from both. Every
// answer is the same tool-call step, read to the end with its usage.
type billingUpstream struct {
	t   testing.TB
	enc *tiktoken.Tiktoken

	mu     sync.Mutex
	billed []openai.Usage // what each answer reported, in order
	bytes  []int          // the size of each request body
}

const usageModel = "deepseek-v4-flash"

// The answer of every call: a short thought, a sentence, a tool call.
const (
	usageReasoning = "The failing test is in store_test.go; I should run it alone to see the assertion."
	usageContent   = "Let me run the failing test on its own."
	usageTool      = "run_tests"
	usageArgs      = `{"path":"./store","run":"TestStoreEvictsOldest","verbose":true}`
)

func newBillingUpstream(t testing.TB) *billingUpstream {
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
	enc, err := tiktoken.GetEncoding("cl100k_base")
	if err != nil {
		t.Fatalf("load cl100k_base: %v", err)
	}
	return &billingUpstream{t: t, enc: enc}
}

func (u *billingUpstream) count(s string) int { return len(u.enc.Encode(s, nil, nil)) }

// bill counts a request as this provider would: every message rendered as
// "<|role|>text" plus its tool calls as JSON, the tools as JSON in a
// preamble, two tokens a message of template overhead.
func (u *billingUpstream) bill(req *chat.Request) openai.Usage {
	var b strings.Builder
	if len(req.Tools) > 0 {
		b.WriteString("## Tools\nYou may call these functions:\n")
		for _, t := range req.Tools {
			b.Write(t.Function.Parameters)
			b.WriteString(t.Function.Name + ": " + t.Function.Description + "\n")
		}
	}
	for _, m := range req.Messages {
		b.WriteString("<|" + m.Role + "|>" + m.Text())
		for _, tc := range m.ToolCalls {
			b.WriteString(`{"name":"` + tc.Function.Name + `","arguments":` + tc.Function.Arguments + "}")
		}
	}
	prompt := u.count(b.String()) + 2*len(req.Messages)
	completion := u.count(usageReasoning) + u.count(usageContent) + u.count(`{"name":"`+usageTool+`","arguments":`+usageArgs+"}")
	return openai.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
}

func (u *billingUpstream) respond(r proxytest.Received) sim.Reply {
	req, err := chat.ParseRequest(r.Body)
	if err != nil {
		u.t.Errorf("upstream got a request that does not parse: %v", err)
		return sim.Error(400, err.Error(), "invalid_request_error", "bad_request")
	}
	usage := u.bill(req)
	u.mu.Lock()
	u.billed = append(u.billed, usage)
	u.bytes = append(u.bytes, len(r.Body))
	u.mu.Unlock()
	return sim.NewStream(usageModel).Role().Reasoning(usageReasoning).Content(usageContent).
		ToolCall(0, "call_run", usageTool, usageArgs[:20], usageArgs[20:]).Finish("tool_calls").
		Usage(usage.PromptTokens, usage.CompletionTokens, nil).Done().Reply()
}

// usageHistory is a coding agent's conversation a few steps in: a system
// prompt, five tools with schemas, a user task and tool results holding
// code and prose. steps adds that many more tool rounds.
func usageHistory(steps int) []openai.ChatCompletionMessage {
	code := strings.Repeat(`func (s *Store) Put(key string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(v) > s.max {
		return fmt.Errorf("value of %d bytes over the limit of %d", len(v), s.max)
	}
	s.items[key] = item{v: v, at: s.now()}
	s.evict()
	return nil
}
`, 4)
	prose := strings.Repeat("The store keeps at most max bytes of values and evicts the oldest entries first when a put would exceed it. "+
		"Entries older than the TTL are dropped on read. A value larger than the whole store is refused with an error. ", 6)
	msgs := []openai.ChatCompletionMessage{
		{Role: "system", Content: "You are a careful software engineer working in a Go repository. Use the tools to read, change and test code. " +
			"Keep changes small, run the tests after every change, and explain what you did in one paragraph at the end."},
		{Role: "user", Content: "TestStoreEvictsOldest fails since the last change to store.go. Find out why and fix it."},
	}
	calls := []struct{ name, args, result string }{
		{"read_file", `{"path":"store/store.go"}`, code},
		{"search_docs", `{"query":"store eviction order"}`, prose},
		{"run_tests", `{"path":"./store"}`, "--- FAIL: TestStoreEvictsOldest (0.00s)\n    store_test.go:41: Get(\"a\") = found, want evicted\nFAIL\nexit status 1"},
		{"read_file", `{"path":"store/store_test.go"}`, code},
		{"list_dir", `{"path":"store"}`, "store.go\nstore_test.go\nevict.go\nevict_test.go\nREADME.md"},
	}
	for i := range 1 + steps {
		c := calls[i%len(calls)]
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			openai.ChatCompletionMessage{Role: "assistant", Content: "Looking at " + c.name + " next.", ToolCalls: []openai.ToolCall{
				{ID: id, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: c.name, Arguments: c.args}}}},
			openai.ChatCompletionMessage{Role: "tool", ToolCallID: id, Content: c.result})
	}
	return msgs
}

func usageTools() []openai.Tool {
	def := func(name, desc, params string) openai.Tool {
		return openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: name, Description: desc, Parameters: json.RawMessage(params)}}
	}
	return []openai.Tool{
		def("read_file", "Read a file of the repository.", `{"type":"object","properties":{"path":{"type":"string","description":"Path from the repository root."}},"required":["path"]}`),
		def("write_file", "Replace a file's content.", `{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string","description":"The whole new content."}},"required":["path","content"]}`),
		def("run_tests", "Run go test on a package.", `{"type":"object","properties":{"path":{"type":"string"},"run":{"type":"string","description":"A -run pattern."},"verbose":{"type":"boolean"}},"required":["path"]}`),
		def("search_docs", "Search the project's documentation.", `{"type":"object","properties":{"query":{"type":"string"},"limit":{"type":"integer","minimum":1,"maximum":20}},"required":["query"]}`),
		def("list_dir", "List a directory.", `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`),
	}
}

// TestUsageEstimateMatchesBilling: the guard closes an answer as soon as
// its first tool call is complete, so the upstream never reports that
// call's usage and the gateway estimates it. Here the upstream reads every
// call to the end and reports what it bills, counted with another
// tokenizer and another template than the gateway's; the usage the
// go-openai client sees on the guarded route (estimated) must be within
// 10 % of what the same call through the pass-through route reports
// (billed), on agent conversations of growing length.
func TestUsageEstimateMatchesBilling(t *testing.T) {
	for _, steps := range []int{0, 2, 5, 9} {
		t.Run(fmt.Sprintf("%d tool rounds", steps+1), func(t *testing.T) {
			up := newBillingUpstream(t)
			_, usrv := proxytest.NewServer(t, up.respond)
			cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}}
			reg := prometheus.NewRegistry()
			m := metrics.New(reg, []string{"deepseek"})
			// A budget the conversation does not reach: the guard must
			// forward the call, not force a final answer.
			gw := serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, Tokens: tkCounter(t), Metrics: m, Gatherer: reg,
				TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{MaxPhaseCycles: 50, Metrics: m}, nil)})
			req := openai.ChatCompletionRequest{Model: usageModel, Messages: usageHistory(steps), Tools: usageTools(),
				Stream: true, StreamOptions: &openai.StreamOptions{IncludeUsage: true}}

			// The guarded call first: what the gateway estimates before it
			// learned anything of this model from reported usage.
			estimated := streamUsage(t, gw.URL+"/v1", req)
			billed := streamUsage(t, gw.URL+"/standard/v1", req)
			if len(up.billed) != 2 || billed != up.billed[1] {
				t.Fatalf("pass-through usage %+v, want the upstream's own of its second call %+v", billed, up.billed)
			}
			if got := gathered(t, reg, "phasegate_upstream_tokens_total", "source", "estimated"); got != float64(estimated.TotalTokens) {
				t.Fatalf("estimated tokens counted = %v, want the guarded call's %d: the guard did not estimate this call", got, estimated.TotalTokens)
			}
			byBytes := up.bytes[0] / 4
			t.Logf("for comparison, encoded bytes / 4: %d (%+.1f %%)", byBytes, 100*float64(byBytes-billed.PromptTokens)/float64(billed.PromptTokens))
			for _, f := range []struct {
				name          string
				billed, estim int
				tolerance     float64
			}{
				{"prompt_tokens", billed.PromptTokens, estimated.PromptTokens, 0.10},
				{"total_tokens", billed.TotalTokens, estimated.TotalTokens, 0.10},
				// A few dozen tokens: the tokenizers' difference weighs more.
				{"completion_tokens", billed.CompletionTokens, estimated.CompletionTokens, 0.25},
			} {
				diff := math.Abs(float64(f.estim-f.billed)) / float64(f.billed)
				t.Logf("%s: billed %d, estimated %d (%+.1f %%)", f.name, f.billed, f.estim, 100*float64(f.estim-f.billed)/float64(f.billed))
				if diff > f.tolerance {
					t.Errorf("%s: estimated %d, billed %d: off by %.1f %%, want within %.0f %%", f.name, f.estim, f.billed, 100*diff, 100*f.tolerance)
				}
			}
		})
	}
}

// streamUsage sends req with the go-openai client and returns the usage
// of its stream.
func streamUsage(t *testing.T, baseURL string, req openai.ChatCompletionRequest) openai.Usage {
	t.Helper()
	cfg := openai.DefaultConfig("sk-test-client")
	cfg.BaseURL = baseURL
	s, err := openai.NewClientWithConfig(cfg).CreateChatCompletionStream(tsContext(t), req)
	if err != nil {
		t.Fatalf("%s: %v", baseURL, err)
	}
	defer s.Close()
	var usage *openai.Usage
	for range 1000 {
		c, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: recv: %v", baseURL, err)
		}
		if c.Usage != nil {
			usage = c.Usage
		}
	}
	if usage == nil {
		t.Fatalf("%s: the stream carried no usage", baseURL)
	}
	return *usage
}
