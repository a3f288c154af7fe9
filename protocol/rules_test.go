package protocol_test

import (
	"strings"
	"testing"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/tools"
)

// ranResult is an executed call whose tool returned result.
func ranResult(id, name, args, result string) []string {
	r := ran(id, name, args)
	r[1] = jsonText(map[string]any{"role": "tool", "tool_call_id": id, "content": result})
	return r
}

// TestAgentCycleBudget: under the agent profile the cycle budget counts
// only the executions that brought nothing new, so a long turn of real
// work is not cut however many calls it made, and a turn that spent its
// budget on stale calls gets the final answer forced, under
// AGENT_MAX_PHASE_CYCLES.
func TestAgentCycleBudget(t *testing.T) {
	answer := streamReply(stream().Role().Content("Done.").Finish("stop").Done())
	var fresh []any
	for i := range 8 {
		fresh = append(fresh, ranResult("c"+string(rune('a'+i)), "read_file", `{"path":"`+string(rune('a'+i))+`.go"}`, "v"+string(rune('a'+i))))
	}
	var stale []any
	for i := range 5 {
		// A read and a listing, five times over with the same results:
		// after the first of each, 8 executions that brought nothing new.
		stale = append(stale, ranResult("s"+string(rune('a'+i)), "read_file", `{"path":"a.go"}`, "same"), ranResult("l"+string(rune('a'+i)), "list_dir", `{}`, "a.go"))
	}
	cfg := protocol.TwoStageConfig{Profile: protocol.ProfileAgent, AgentMaxPhaseCycles: 4}
	t.Run("eight new calls: not cut", func(t *testing.T) {
		u := newUpstream(t, answer)
		a := read(t, run(t, protocol.NewTwoStage(cfg, nil), exchange(newRequest(t, true, history(fresh...), ""), u, protocol.Limits{})))
		if a.content != "Done." || len(u.sent()) != 1 || len(u.sent()[0].Tools) == 0 {
			t.Errorf("content %q, %d calls; want the answer, asked with tools", a.content, len(u.sent()))
		}
	})
	t.Run("stale calls: budget spent", func(t *testing.T) {
		u := newUpstream(t, answer)
		rec := &recorder{}
		a := read(t, run(t, protocol.NewTwoStage(cfg, rec), exchange(newRequest(t, true, history(stale...), ""), u, protocol.Limits{})))
		sent := u.sent()
		if len(sent) != 1 || len(sent[0].Tools) != 0 {
			t.Fatalf("%d upstream calls, tools %d; want the one final call without tools", len(sent), len(sent[0].Tools))
		}
		b := tools.Budget{Executions: 8, MaxExecutions: 4, MaxRefused: 3, NoProgress: true}
		if !strings.Contains(a.content, tools.ShownCycleBudget(b)) {
			t.Errorf("content %q; want the client told %q", a.content, tools.ShownCycleBudget(b))
		}
		after := messagesAfter(sent[0], len(newRequest(t, true, history(stale...), "").Messages))
		if len(after) != 1 || after[0].Content != tools.CycleBudgetNotice(b) {
			t.Errorf("appended %+v; want the notice %q", after, tools.CycleBudgetNotice(b))
		}
		if evs := rec.kinds(metrics.TraceBudgetExhausted); len(evs) != 1 || evs[0].Reason != "AGENT_MAX_PHASE_CYCLES" {
			t.Errorf("budget events %+v; want AGENT_MAX_PHASE_CYCLES", evs)
		}
	})
}
