package replay_test

import (
	"github.com/phasegate/phasegate/tools"
)

// maxWasted is the most calls a loop may waste before the guard must
// stop it. The data sets it: a successful run (SWE-agent's eps CTF
// demonstration) sent the same failing `submit` four times, three of them
// wasted, before it changed its quoting and solved the task.
const maxWasted = 3

// execution is one executed call of a turn: the step (the index of the
// assistant message that made it) and what a loop is judged by.
type execution struct {
	step int
	key  string
}

// turns splits the recorded conversation into turns (the messages after
// each user message) and lists the calls each executed, with their
// results, in order.
func (t *trajectory) turns() [][]execution {
	var out [][]execution
	var cur []execution
	pending := map[string]int{} // call id -> index in cur
	calls := map[string]toolCall{}
	for i, m := range t.msgs {
		switch m.Role {
		case "user":
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur, pending = nil, map[string]int{}
		case "assistant":
			for _, c := range m.ToolCalls {
				pending[c.ID] = len(cur)
				calls[c.ID] = c
				cur = append(cur, execution{step: i})
			}
		case "tool":
			k, ok := pending[m.ToolCallID]
			if !ok {
				continue
			}
			delete(pending, m.ToolCallID)
			c := calls[m.ToolCallID]
			cur[k].key = loopKey(c, m.text())
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	// A call no tool message answers was not executed.
	for i, turn := range out {
		kept := turn[:0]
		for _, e := range turn {
			if e.key != "" {
				kept = append(kept, e)
			}
		}
		out[i] = kept
	}
	return out
}

// loopKey is what two executions must share to be the same work done
// twice: the tool, its arguments up to form (tools.NewForm: what the
// language of a command treats alike) and its result as an agent reads it
// (tools.NormaliseResult: without timestamps, ids, durations and the
// like).
func loopKey(c toolCall, result string) string {
	f, err := tools.NewForm(c.Function.Name, c.Function.Arguments)
	if err != nil {
		f = tools.Form("malformed:" + c.Function.Name + c.Function.Arguments)
	}
	return string(f) + "\x00" + tools.NormaliseResult(result)
}

// wasted marks the executions of a turn that wasted a call: each repeats
// an earlier execution (the same key) and nothing executed since that
// earlier one was new (every execution in between repeated one before
// it). So A A wastes the second A; A B A B wastes the second B (the first
// repeat of A followed B, which was new); edit, test, edit, test with a
// new edit wastes nothing.
func wasted(turn []execution) []bool {
	out := make([]bool, len(turn))
	fresh := make([]bool, len(turn))
	last := map[string]int{}
	for k, e := range turn {
		i, seen := last[e.key]
		last[e.key] = k
		if !seen {
			fresh[k] = true
			continue
		}
		out[k] = true
		for j := i + 1; j < k; j++ {
			if fresh[j] {
				out[k] = false
				break
			}
		}
	}
	return out
}

// loop is what the data says of a trajectory's loops.
type loop struct {
	// longest is the most wasted calls of one streak: those since the
	// last new execution of a turn.
	longest int
	// mustStop is the step at which the streak of wasted calls of a turn
	// would pass maxWasted, or -1: the gateway must have altered the run
	// at or before it.
	mustStop int
}

func loopOf(t *trajectory) loop {
	l := loop{mustStop: -1}
	for _, turn := range t.turns() {
		streak := 0
		for k, w := range wasted(turn) {
			switch {
			case w:
				streak++
			case isFresh(turn, k):
				streak = 0
			}
			l.longest = max(l.longest, streak)
			if streak > maxWasted && l.mustStop < 0 {
				l.mustStop = turn[k].step
			}
		}
	}
	return l
}

// isFresh reports whether execution k of turn is the first with its key.
func isFresh(turn []execution, k int) bool {
	for i := range k {
		if turn[i].key == turn[k].key {
			return false
		}
	}
	return true
}
