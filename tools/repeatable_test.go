package tools

import (
	"fmt"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/chat"
)

// runs builds a turn in which run_tests and read_file were called, in
// order, with the given results.
func runs(t *testing.T, calls ...[2]string) []chat.Message {
	t.Helper()
	var b strings.Builder
	b.WriteString(`[{"role":"user","content":"fix the bug"}`)
	for i, c := range calls {
		fmt.Fprintf(&b, `,{"role":"assistant","content":null,"tool_calls":[{"id":"c%d","type":"function","function":{"name":%q,"arguments":"{}"}}]}`, i, c[0])
		fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"c%d","content":%q}`, i, c[1])
	}
	b.WriteString(`]`)
	return history(t, b.String())
}

func TestRepeatable(t *testing.T) {
	tools := []chat.Tool{declare("run_tests", ""), declare("read_file", "")}
	tests := []struct {
		name    string
		history [][2]string
		call    string
		want    Verdict
	}{
		{"first run", nil, "run_tests", VerdictForward},
		{"one earlier run: its result may change", [][2]string{{"run_tests", "1 failed"}}, "run_tests", VerdictForward},
		{"results changed", [][2]string{{"run_tests", "2 failed"}, {"run_tests", "1 failed"}}, "run_tests", VerdictForward},
		{"edit between identical runs counts only the runs", [][2]string{{"run_tests", "1 failed"}, {"read_file", "x"}, {"run_tests", "1 failed"}}, "run_tests", VerdictNoProgress},
		{"last two identical: no progress", [][2]string{{"run_tests", "2 failed"}, {"run_tests", "1 failed"}, {"run_tests", "1 failed"}}, "run_tests", VerdictNoProgress},
		{"progress after a stall", [][2]string{{"run_tests", "1 failed"}, {"run_tests", "1 failed"}, {"run_tests", "ok"}}, "run_tests", VerdictForward},
		{"other tools stay strict", [][2]string{{"read_file", "x"}}, "read_file", VerdictDuplicate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPolicy(tools, nil, NewLedger("", runs(t, tt.history...))).Repeatable([]string{"run_tests"})
			got := p.Judge(chat.ToolCall{ID: "new", Type: "function", Function: chat.FunctionCall{Name: tt.call, Arguments: "{}"}})
			if got.Verdict != tt.want {
				t.Errorf("verdict: got %q (%s), want %q", got.Verdict, got.Reason, tt.want)
			}
		})
	}
}

func TestRepeatableOffByDefault(t *testing.T) {
	p := NewPolicy([]chat.Tool{declare("run_tests", "")}, nil, NewLedger("", runs(t, [2]string{"run_tests", "1 failed"})))
	got := p.Judge(chat.ToolCall{ID: "new", Type: "function", Function: chat.FunctionCall{Name: "run_tests", Arguments: "{}"}})
	if got.Verdict != VerdictDuplicate {
		t.Errorf("verdict: got %q, want %q", got.Verdict, VerdictDuplicate)
	}
}

func TestNoProgressNotice(t *testing.T) {
	n := Notice(Judgement{Verdict: VerdictNoProgress, Reason: "Tool \"run_tests\" is repeatable, but its last two calls returned the same result."},
		Budget{Executions: 2, MaxExecutions: 3, Refused: 1, MaxRefused: 3})
	if !strings.Contains(n, "rule: no_progress") || !strings.Contains(n, "tool executions used: 2 of 3") {
		t.Errorf("notice: got %q, want the rule and the budget named", n)
	}
}
