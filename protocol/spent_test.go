package protocol_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
)

// refusalMeter records the usage and the refusals the guard metered.
type refusalMeter struct {
	usageMeter
	refused []string
}

func (m *refusalMeter) Refused(verdict string) { m.refused = append(m.refused, verdict) }

// TestTwoStageSpentBudget: a request whose session spent its budget is
// the forced final answer from the start, whatever its turn holds: one
// upstream call with no tools and the session's notice, a tool call the
// model still makes dropped (and metered as refused), one stop.
func TestTwoStageSpentBudget(t *testing.T) {
	spent := &protocol.Spent{Budget: "SESSION_MAX_TOOL_CALLS", Notice: "The session's budget is spent.", Shown: "session budget spent."}
	stubborn := stream().Role().Content("Here is what I found. ").ToolCall(0, "c9", "read_file", `{"path":"c.go"}`).Finish("tool_calls").
		Usage(50, 5, map[string]any{"prompt_cache_hit_tokens": 40}).Done()
	for _, streaming := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", streaming), func(t *testing.T) {
			tr := &recorder{}
			u := newUpstream(t, streamReply(stubborn))
			req := newRequest(t, streaming, history(), `"tool_choice":"required"`)
			x := exchange(req, u, protocol.Limits{Spent: spent})
			m := &refusalMeter{}
			x.Meter = m
			a := read(t, run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, tr), x))
			sent := u.sent()
			if len(sent) != 1 {
				t.Fatalf("upstream calls = %d, want 1", len(sent))
			}
			_, hasTools := sent[0].Field("tools")
			_, hasChoice := sent[0].Field("tool_choice")
			if hasTools || hasChoice {
				t.Errorf("the final call has tools %v, tool_choice %v; want neither", hasTools, hasChoice)
			}
			want := append(raws(req.Messages), string(chat.NewMessage(chat.RoleSystem, spent.Notice).Raw))
			if diff := cmp.Diff(want, raws(sent[0].Messages)); diff != "" {
				t.Errorf("the final call's messages (-want +got):\n%s", diff)
			}
			if got, want := a.content, shown(spent.Shown)+"Here is what I found. "; got != want {
				t.Errorf("client content = %q, want %q", got, want)
			}
			if len(a.calls) != 0 || a.finish() != chat.FinishStop {
				t.Errorf("calls %+v, finish %q; want none and stop", a.calls, a.finish())
			}
			if evs := tr.kinds(metrics.TraceBudgetExhausted); len(evs) != 1 || evs[0].Reason != spent.Budget {
				t.Errorf("budget_exhausted traces = %+v, want one for %s", evs, spent.Budget)
			}
			if !cmp.Equal(m.refused, []string{"dropped"}) {
				t.Errorf("refusals metered = %v, want the dropped call", m.refused)
			}
			if len(m.usage) != 1 || m.usage[0].PromptTokens != 50 || m.usage[0].CacheHitTokens != 40 {
				t.Errorf("usage metered = %+v, want 50 prompt tokens of which 40 cache hits", m.usage)
			}
		})
	}
}

// TestUsageCacheHits: the cache hits of a call are metered as DeepSeek
// and OpenAI report them.
func TestUsageCacheHits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra map[string]any
		want  int
	}{
		{"none reported", nil, 0},
		{"DeepSeek", map[string]any{"prompt_cache_hit_tokens": 30, "prompt_cache_miss_tokens": 70}, 30},
		{"OpenAI", map[string]any{"prompt_tokens_details": map[string]any{"cached_tokens": 64}}, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := stream().Role().Content("ok").Finish("stop").Usage(100, 2, tc.extra).Done()
			x := exchange(newRequest(t, true, history(), ""), newUpstream(t, streamReply(up)), protocol.Limits{})
			m := &usageMeter{}
			x.Meter = m
			run(t, protocol.Standard{}, x)
			if len(m.usage) != 1 || m.usage[0].CacheHitTokens != tc.want || m.usage[0].PromptTokens != 100 {
				t.Errorf("usage metered = %+v, want 100 prompt tokens, %d cache hits", m.usage, tc.want)
			}
		})
	}
}
