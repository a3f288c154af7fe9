package proxy_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/phasegate/phasegate/pricing"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/session"
)

// msSessionTools are the tools of sim.SessionScript, as the Anthropic SDK
// declares them.
func msSessionTools() []anthropic.ToolUnionParam {
	var tools []anthropic.ToolUnionParam
	for _, name := range []string{"list_files", "search", "read_file", "run_tests", "edit_file", "git"} {
		tools = append(tools, anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: name, InputSchema: anthropic.ToolInputSchemaParam{
			Properties: map[string]any{"path": map[string]any{"type": "string"}}}}})
	}
	return tools
}

// msReply is one Messages response as the Anthropic SDK read it, with its
// headers.
type msReply struct {
	m      *anthropic.Message
	header http.Header
	calls  int
}

// msSessionTurn plays a coding agent on the Messages door with the
// Anthropic SDK: one user turn of session id, every tool_use run (each
// result unique), until an answer without one.
func msSessionTurn(t *testing.T, s *sessStack, id string, stream bool, more ...option.RequestOption) []msReply {
	t.Helper()
	c := msClient(s.gw.URL, "sk-client-messages", append([]option.RequestOption{option.WithHeader(session.Header, id)}, more...)...)
	msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Fix the rounding bug."))}
	var replies []msReply
	for range 30 {
		var resp *http.Response
		m, err := msSend(t, c, stream, anthropic.MessageNewParams{Model: anthropic.Model(sessModel), MaxTokens: 1024, Messages: msgs,
			Tools: msSessionTools()}, option.WithResponseInto(&resp))
		if err != nil {
			t.Fatalf("request %d: %v", len(replies)+1, err)
		}
		r := msReply{m: m, header: resp.Header}
		msgs = append(msgs, m.ToParam())
		var results []anthropic.ContentBlockParamUnion
		for _, b := range m.Content {
			if b.Type == "tool_use" {
				r.calls++
				results = append(results, anthropic.NewToolResultBlock(b.ID, fmt.Sprintf("result %d of %s", len(replies), b.Name), false))
			}
		}
		replies = append(replies, r)
		if len(results) == 0 {
			return replies
		}
		msgs = append(msgs, anthropic.NewUserMessage(results...))
	}
	t.Fatal("no answer after 30 requests")
	return nil
}

// TestSessionMessagesDoor: through the Anthropic SDK on the Messages
// door, a session capped by tool calls, by tokens and by US dollars ends
// each time with an answer (no tool_use, end_turn, after the notice) and
// the header naming the budget, streamed or not; another session is its
// own.
func TestSessionMessagesDoor(t *testing.T) {
	price := pricing.Price{InputCacheMiss: 100, InputCacheHit: 10, Output: 400}
	for _, tc := range []struct {
		budget session.Budget
		cap    session.Cap
	}{
		{budget: session.Budget{ToolCalls: 3}, cap: session.CapToolCalls},
		{budget: session.Budget{Tokens: 1500}, cap: session.CapTokens},
		{budget: session.Budget{USD: 0.2}, cap: session.CapUSD},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.cap, stream), func(t *testing.T) {
				cfg := proxy.Config{Sessions: budget(tc.budget), Prices: []pricing.Rule{{Pattern: sessModel, Price: price}}}
				s := newSessStack(t, cfg, proxy.Options{})
				replies := msSessionTurn(t, s, "claude-run-1", stream)
				ran := 0
				for _, r := range replies {
					ran += r.calls
				}
				if ran == 0 || ran >= 20 || tc.cap == session.CapToolCalls && ran != 3 {
					t.Fatalf("tool calls run = %d, want the budget to stop the session before its end", ran)
				}
				last := replies[len(replies)-1]
				if got := last.header.Get(proxy.SessionBudgetHeader); got != string(tc.cap) {
					t.Errorf("%s = %q, want %q", proxy.SessionBudgetHeader, got, tc.cap)
				}
				text := msText(last.m)
				if last.m.StopReason != anthropic.StopReasonEndTurn || !strings.Contains(text, "**System Notice**: session budget spent") ||
					!strings.Contains(text, fmt.Sprintf("Final answer (simulated): stopped after %d of 20 steps", ran)) {
					t.Errorf("the last answer: stop %q, text %q; want the session's forced final answer", last.m.StopReason, text)
				}
				for _, r := range replies[:len(replies)-1] {
					if h := r.header.Get(proxy.SessionBudgetHeader); h != "" || r.calls != 1 {
						t.Errorf("a response before the cap: header %q, %d calls; want none and one call", h, r.calls)
					}
				}
				if other := msSessionTurn(t, s, "claude-run-2", stream); other[0].calls != 1 || other[0].header.Get(proxy.SessionBudgetHeader) != "" {
					t.Errorf("another session's first response: %d calls, header %q; want a session of its own", other[0].calls,
						other[0].header.Get(proxy.SessionBudgetHeader))
				}
			})
		}
	}
}
