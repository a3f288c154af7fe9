package tools

import (
	"strings"
	"testing"
)

func TestNotice(t *testing.T) {
	ledger := NewLedger("proj", history(t, `[
		{"role":"user","content":"go"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.txt\"}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"text of a"}
	]`))
	judge := func(allow []string, name, args string) Judgement {
		return NewPolicy(testTools(), allow, ledger).Judge(toolCall("x", name, args))
	}
	budget := Budget{Executions: 2, MaxExecutions: 3, Refused: 2, MaxRefused: 3}
	tests := []struct {
		name string
		got  string
		want string
	}{
		{
			name: "forward has no notice",
			got:  Notice(judge(nil, "read_file", `{"path":"b"}`), budget),
			want: "",
		},
		{
			name: "duplicate",
			got:  Notice(judge(nil, "read_file", `{"path":"a.txt"}`), budget),
			want: "Duplicate tool call detected (already executed in this turn). Do NOT call this tool again. Use previous results." +
				" (rule: duplicate; tool executions used: 2 of 3; refused attempts left: 1 of 3)",
		},
		{
			name: "malformed",
			got:  Notice(judge(nil, "read_file", `{"path":"secret`), budget),
			want: `The arguments of tool "read_file" are malformed: the JSON value is incomplete.` +
				" Send the call again with arguments that are one complete JSON object, or answer without it." +
				" (rule: malformed; tool executions used: 2 of 3; refused attempts left: 1 of 3)",
		},
		{
			name: "undeclared",
			got:  Notice(judge(nil, "rm", `{}`), budget),
			want: `Tool "rm" is not declared in this request; declared tools: read_file, list_dir, now, write_file, broken, remote_ref, file_ref.` +
				" Call only a declared tool, or answer without tools." +
				" (rule: undeclared; tool executions used: 2 of 3; refused attempts left: 1 of 3)",
		},
		{
			name: "undeclared with no tools declared",
			got:  Notice(NewPolicy(nil, nil, ledger).Judge(toolCall("x", "rm", `{}`)), budget),
			want: `Tool "rm" is not declared in this request; no tools are declared.` +
				" Call only a declared tool, or answer without tools." +
				" (rule: undeclared; tool executions used: 2 of 3; refused attempts left: 1 of 3)",
		},
		{
			name: "not allowed",
			got:  Notice(judge([]string{"read_file"}, "write_file", `{}`), budget),
			want: `Tool "write_file" is not allowed in plan mode; allowed tools: read_file.` +
				" Call only an allowed tool, or answer without tools." +
				" (rule: not_allowed; tool executions used: 2 of 3; refused attempts left: 1 of 3)",
		},
		{
			name: "schema invalid",
			got:  Notice(judge(nil, "read_file", `{"limit":0}`), budget),
			want: `The arguments of tool "read_file" do not match its parameters schema: missing required property "path"; at /properties/limit: value fails "minimum".` +
				" Send the call again with arguments that match the tool's parameters schema, or answer without it." +
				" (rule: schema_invalid; tool executions used: 2 of 3; refused attempts left: 1 of 3)",
		},
		{
			name: "refusals left never below zero",
			got:  Notice(judge(nil, "read_file", `{"path":"a.txt"}`), Budget{Executions: 1, MaxExecutions: 3, Refused: 5, MaxRefused: 3}),
			want: "Duplicate tool call detected (already executed in this turn). Do NOT call this tool again. Use previous results." +
				" (rule: duplicate; tool executions used: 1 of 3; refused attempts left: 0 of 3)",
		},
		{
			name: "cycle budget",
			got:  CycleBudgetNotice(Budget{Executions: 3, MaxExecutions: 3, Refused: 0, MaxRefused: 3}),
			want: "Maximum tool execution cycles (3) reached. Provide final answer without further tool calls." +
				" (rule: MAX_PHASE_CYCLES; tool executions used: 3 of 3; refused attempts left: 3 of 3)",
		},
		{
			name: "duplicate exceeded",
			got:  DuplicateExceededNotice(Budget{Executions: 1, MaxExecutions: 3, Refused: 3, MaxRefused: 3}),
			want: "Maximum duplicate tool call attempts exceeded. Provide a final answer now using existing results ONLY. Do NOT call tools." +
				" (rule: MAX_DUPLICATE_ATTEMPTS; tool executions used: 1 of 3; refused attempts left: 0 of 3)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("notice:\ngot  %q\nwant %q", tt.got, tt.want)
			}
			if strings.Contains(tt.got, "secret") {
				t.Errorf("notice: got %q, want no argument content", tt.got)
			}
		})
	}
}

// TestShown checks the line a person reading the client's output gets for
// each decision: what was refused and why, and the budget left, in one
// short line with no instruction meant for the model.
func TestShown(t *testing.T) {
	ledger := NewLedger("proj", history(t, `[
		{"role":"user","content":"go"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.txt\"}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"text of a"}
	]`))
	judge := func(allow []string, name, args string) Judgement {
		return NewPolicy(testTools(), allow, ledger).Judge(toolCall("x", name, args))
	}
	two := Budget{Executions: 1, MaxExecutions: 3, Refused: 1, MaxRefused: 3}
	spent := Budget{Executions: 1, MaxExecutions: 3, Refused: 3, MaxRefused: 3}
	tests := []struct {
		name string
		got  string
		want string
	}{
		{name: "forward shows nothing", got: Shown(judge(nil, "read_file", `{"path":"b"}`), two), want: ""},
		{name: "duplicate", got: Shown(judge(nil, "read_file", `{"path":"a.txt"}`), two),
			want: `refused "read_file": it already ran with the same arguments in this turn (2 of 3 refusals left).`},
		{name: "malformed", got: Shown(judge(nil, "read_file", `{"path":"secret`), two),
			want: `refused "read_file": its arguments are not one complete JSON object (2 of 3 refusals left).`},
		{name: "undeclared", got: Shown(judge(nil, "rm", `{}`), two),
			want: `refused "rm": this request declares no such tool (2 of 3 refusals left).`},
		{name: "not allowed", got: Shown(judge([]string{"read_file"}, "write_file", `{}`), two),
			want: `refused "write_file": plan mode does not allow it (2 of 3 refusals left).`},
		{name: "schema invalid", got: Shown(judge(nil, "read_file", `{"limit":0}`), two),
			want: `refused "read_file": its arguments do not match the tool's parameters (2 of 3 refusals left).`},
		{name: "the last refusal says what follows", got: Shown(judge(nil, "read_file", `{"path":"a.txt"}`), spent),
			want: `refused "read_file": it already ran with the same arguments in this turn. No refusals left (3 of 3 used): the model answers now, without tools.`},
		{name: "a call without a name", got: Shown(Judgement{Verdict: VerdictMalformed}, two),
			want: `refused a tool call: its arguments are not one complete JSON object (2 of 3 refusals left).`},
		{name: "cycle budget", got: ShownCycleBudget(Budget{Executions: 3, MaxExecutions: 3, MaxRefused: 3}),
			want: "tool runs of this turn used up (3 of 3): the model answers now, without tools."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("shown:\ngot  %q\nwant %q", tt.got, tt.want)
			}
			if strings.Contains(tt.got, "\n") || strings.Contains(tt.got, "secret") {
				t.Errorf("shown: got %q, want one line and no argument content", tt.got)
			}
		})
	}
}

func TestQuoteNameCutsLongNames(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "short", in: "read_file", want: `"read_file"`},
		{name: "long ascii", in: strings.Repeat("a", 100), want: `"` + strings.Repeat("a", 64) + `…"`},
		{name: "cut on a rune boundary", in: strings.Repeat("a", 63) + "日本", want: `"` + strings.Repeat("a", 63) + `…"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := QuoteName(tt.in); got != tt.want {
				t.Errorf("quoteName: got %s, want %s", got, tt.want)
			}
		})
	}
}
