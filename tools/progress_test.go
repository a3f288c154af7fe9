package tools

import (
	"strings"
	"testing"
)

// TestForm checks what the form of arguments keeps and drops, per value
// type.
func TestForm(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{"key order and white space", `{"a":1,"b":"x"}`, `{ "b" : "x", "a" : 1 }`, true},
		{"number spelling", `{"n":10}`, `{"n":1e1}`, true},
		{"number as a string", `{"n":10}`, `{"n":"10"}`, true},
		{"boolean case", `{"f":true}`, `{"f":"TRUE"}`, true},
		{"quotes in code", `{"code":"print('done')"}`, `{"code":"print(\"done\")"}`, true},
		{"white space around punctuation", `{"code":"print('done')"}`, `{"code":"print( 'done' );"}`, true},
		{"a comment added", `{"code":"x = 1\nprint(x)"}`, `{"code":"# set x\nx = 1\nprint(x)  # show it"}`, true},
		{"a // comment added", `{"command":"make build"}`, `{"command":"make build // again"}`, true},
		{"a flag moved", `{"command":"pip install -U -q x"}`, `{"command":"pip install x -q -U"}`, true},
		{"trailing punctuation", `{"query":"loop fix"}`, `{"query":"loop fix."}`, true},
		{"white space inside a string", `{"query":"a  b\n c"}`, `{"query":"a b c"}`, true},
		{"a URL fragment is not a comment", `{"url":"https://h/a#x"}`, `{"url":"https://h/a#y"}`, false},
		{"case in a string matters", `{"path":"Main.go"}`, `{"path":"main.go"}`, false},
		{"a different word", `{"command":"ls src"}`, `{"command":"ls test"}`, false},
		{"a different number", `{"n":1}`, `{"n":2}`, false},
		{"array order matters", `{"argv":["a","b"]}`, `{"argv":["b","a"]}`, false},
		{"key case matters", `{"Path":"a"}`, `{"path":"a"}`, false},
		{"dot and dot-dot stay apart", `{"command":"ls ."}`, `{"command":"ls .."}`, false},
		{"a string is not a number when it is more", `{"n":"10 items"}`, `{"n":10}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, pa := parseArguments(tt.a)
			b, pb := parseArguments(tt.b)
			if pa != "" || pb != "" {
				t.Fatalf("parse: %q %q", pa, pb)
			}
			if got := formOf("p", "t", a) == formOf("p", "t", b); got != tt.same {
				t.Errorf("same form: got %v, want %v\n%s\n%s", got, tt.same, formOf("p", "t", a), formOf("p", "t", b))
			}
		})
	}
	x, _ := parseArguments(`{}`)
	if formOf("p", "t", x) == formOf("q", "t", x) || formOf("p", "t", x) == formOf("p", "u", x) {
		t.Error("the form ignores the project or the tool name")
	}
}

// TestProgressive checks the progress rule on short turns: any tool may
// repeat while its result changes, or after another call brought
// something new.
func TestProgressive(t *testing.T) {
	tests := []struct {
		name    string
		history []step
		next    step
		want    Verdict
	}{
		{"an identical repeat after one run", []step{sh("ls", "a")}, sh("ls", "a"), VerdictForward},
		{"an identical repeat whose result changed", []step{sh("ls", "a"), sh("ls", "a b")}, sh("ls", "a"), VerdictForward},
		{"twice the same result", []step{sh("ls", "a"), sh("ls", "a")}, sh("ls", "a"), VerdictNoProgress},
		{"twice the same result, in another form", []step{sh("ls -l", "a"), sh("ls  -l # again", "a")}, sh("'ls' -l.", "a"), VerdictNoProgress},
		{"an edit since", []step{sh("go test", "FAIL"), sh("go test", "FAIL"), call("edit_file", `{"old":"a","new":"b"}`, "ok")}, sh("go test", "FAIL"), VerdictForward},
		{"alternating: the first repeat of the pair still follows news", []step{sh("go test", "FAIL"), sh("cat x", "x"), sh("go test", "FAIL"), sh("cat x", "x")}, sh("go test", "FAIL"), VerdictForward},
		{"alternating: a repeat of repeats is no news", []step{sh("go test", "FAIL"), sh("cat x", "x"), sh("go test", "FAIL"), sh("cat x", "x"), sh("go test", "FAIL")}, sh("cat x", "x"), VerdictNoProgress},
		{"a malformed call ran: its effect is unknown", []step{sh("go test", "FAIL"), sh("go test", "FAIL"), call("edit_file", `{"old":`, "ok")}, sh("go test", "FAIL"), VerdictForward},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := judgeNext(t, tt.history, tt.next); got.Verdict != tt.want {
				t.Errorf("verdict: got %s (%s), want %s", got.Verdict, got.Reason, tt.want)
			}
		})
	}
}

// TestProgressiveNotice checks the notice of a cosmetic repeat names what
// it repeats (the earlier calls) and never quotes argument values.
func TestProgressiveNotice(t *testing.T) {
	j := judgeNext(t, []step{code("print('sk-VALUE')", "x"), code(`print("sk-VALUE")`, "x")}, code("print('sk-VALUE')  # again", "x"))
	if j.Verdict != VerdictNoProgress || !j.Variant {
		t.Fatalf("verdict: got %s (variant %v), want a no_progress variant", j.Verdict, j.Variant)
	}
	n := Notice(j, Budget{Executions: 2, MaxExecutions: 60, Refused: 1, MaxRefused: 3})
	for _, want := range []string{`"call_0"`, `"call_1"`, "only in form", "rule: no_progress"} {
		if !strings.Contains(n, want) {
			t.Errorf("notice %q does not name %q", n, want)
		}
	}
	if strings.Contains(n, "sk-VALUE") || strings.Contains(Shown(j, Budget{MaxRefused: 3}), "sk-VALUE") {
		t.Errorf("the notice quotes an argument value: %q", n)
	}
}

// BenchmarkJudge judges a call against a 50-call turn whose ledger the
// guard built (as it does for every request, whatever the profile): the
// policy, and its judgement, by the strict rules and by the progress rule.
// BenchmarkLedger50 is the ledger's own cost, for comparison.
func BenchmarkJudge(b *testing.B) {
	l := NewLedger("p", turn(b, append(bugFix(), refactor()...)[:50]))
	next := toolCall("next", "run_tests", `{"package":"./pkg/client"}`)
	for _, progressive := range []bool{false, true} {
		b.Run(map[bool]string{false: "strict", true: "progressive"}[progressive], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p := NewPolicy(corpusTools, nil, l)
				if progressive {
					p.Progressive()
				}
				if j := p.Judge(next); j.Verdict == "" {
					b.Fatal("no verdict")
				}
			}
		})
	}
}

func BenchmarkLedger50(b *testing.B) {
	msgs := turn(b, append(bugFix(), refactor()...)[:50])
	b.ReportAllocs()
	for b.Loop() {
		if NewLedger("p", msgs).CycleIndex() != 50 {
			b.Fatal("not 50 calls")
		}
	}
}
