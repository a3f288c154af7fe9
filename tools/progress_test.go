package tools

import (
	"fmt"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/chat"
)

// TestForm checks what the form of arguments keeps and drops, per value
// type and per language of a string.
func TestForm(t *testing.T) {
	tests := []struct {
		name string
		tool string
		a, b string
		same bool
	}{
		{"key order and white space", "t", `{"a":1,"b":"x"}`, `{ "b" : "x", "a" : 1 }`, true},
		{"number spelling", "t", `{"n":10}`, `{"n":1e1}`, true},
		{"number as a string", "t", `{"n":10}`, `{"n":"10"}`, true},
		{"boolean case", "t", `{"f":true}`, `{"f":"TRUE"}`, true},
		{"text: trailing punctuation", "t", `{"query":"loop fix"}`, `{"query":"loop fix."}`, true},
		{"text: white space inside", "t", `{"query":"a  b\n c"}`, `{"query":"a b c"}`, true},
		{"text: a URL fragment is not a comment", "t", `{"url":"https://h/a#x"}`, `{"url":"https://h/a#y"}`, false},
		{"text: case matters", "t", `{"path":"Main.go"}`, `{"path":"main.go"}`, false},
		{"a different number", "t", `{"n":1}`, `{"n":2}`, false},
		{"array order matters", "t", `{"argv":["a","b"]}`, `{"argv":["b","a"]}`, false},
		{"key case matters", "t", `{"Path":"a"}`, `{"path":"a"}`, false},
		{"a string is not a number when it is more", "t", `{"n":"10 items"}`, `{"n":10}`, false},

		// Shell commands: the shell decides what is cosmetic.
		{"shell: extra spaces", "t", `{"command":"ls  -la   src"}`, `{"command":"ls -la src"}`, true},
		{"shell: a trailing ;", "t", `{"command":"make build;"}`, `{"command":"make build"}`, true},
		{"shell: a trailing newline", "t", `{"command":"make build\n"}`, `{"command":"make build"}`, true},
		{"shell: quoting a plain word", "t", `{"command":"echo done"}`, `{"command":"echo \"done\""}`, true},
		{"shell: single quotes on a plain word", "t", `{"command":"echo done"}`, `{"command":"echo 'done'"}`, true},
		{"shell: an escaped plain letter", "t", `{"command":"echo done"}`, `{"command":"echo d\\one"}`, true},
		{"shell: a comment", "t", `{"command":"make build"}`, `{"command":"make build  # again"}`, true},
		{"shell: a newline is a ;", "t", `{"command":"cd src; make"}`, `{"command":"cd src\nmake"}`, true},
		{"shell: a line continuation", "t", `{"command":"make \\\n build"}`, `{"command":"make build"}`, true},
		{"shell: quotes around a brace change the word", "t", `{"command":"submit 'flag{x}'"}`, `{"command":"submit flag{x}"}`, false},
		{"shell: quotes join words", "t", `{"command":"submit 'flag{People always}'"}`, `{"command":"submit flag{People always}"}`, false},
		{"shell: quotes stop a glob", "t", `{"command":"ls '*.go'"}`, `{"command":"ls *.go"}`, false},
		{"shell: quotes stop an expansion", "t", `{"command":"echo '$HOME'"}`, `{"command":"echo $HOME"}`, false},
		{"shell: double quotes stop word splitting", "t", `{"command":"echo \"$A\""}`, `{"command":"echo $A"}`, false},
		{"shell: an escaped space joins words", "t", `{"command":"cat my\\ file"}`, `{"command":"cat my file"}`, false},
		{"shell: // is an argument", "t", `{"command":"make build"}`, `{"command":"make build // again"}`, false},
		{"shell: a flag moved is another argv", "t", `{"command":"pip install -U -q x"}`, `{"command":"pip install x -q -U"}`, false},
		{"shell: dot and dot-dot", "t", `{"command":"ls ."}`, `{"command":"ls .."}`, false},
		{"shell: an operator", "t", `{"command":"a && b"}`, `{"command":"a || b"}`, false},
		{"shell: a background job", "t", `{"command":"serve &"}`, `{"command":"serve"}`, false},
		{"shell: a here-document keeps its indentation", "t",
			`{"command":"cat <<'EOF' > a.py\nif x:\n    y()\nEOF"}`, `{"command":"cat <<'EOF' > a.py\nif x:\ny()\nEOF"}`, false},
		{"shell: a here-document's command respaced", "t",
			`{"command":"cat <<'EOF' >  a.py\nif x:\n    y()\nEOF"}`, `{"command":"cat  <<'EOF' > a.py\nif x:\n    y()\nEOF\n"}`, true},
		{"shell: by the tool's name", "bash", `{"input":"echo done"}`, `{"input":"echo \"done\""}`, true},
		{"shell: a plain string that quotes", "t", `{"q":"submit 'flag{x}'"}`, `{"q":"submit flag{x}"}`, false},

		// Source code: comments and white space are cosmetic, literals not.
		{"code: quote marks of a literal", "t", `{"code":"print('done')"}`, `{"code":"print(\"done\")"}`, true},
		{"code: white space around punctuation", "t", `{"code":"print('done')"}`, `{"code":"print( 'done' );"}`, true},
		{"code: comments", "t", `{"code":"x = 1\nprint(x)"}`, `{"code":"# set x\nx = 1\nprint(x)  # show it"}`, true},
		{"code: a // comment in C-like code", "t", `{"code":"f();"}`, `{"code":"f(); // again"}`, true},
		{"code: a block comment", "t", `{"code":"f(1)"}`, `{"code":"/* try */ f(1)"}`, true},
		{"code: blank lines", "t", `{"code":"a()\nb()"}`, `{"code":"a()\n\n\nb()"}`, true},
		{"code: the text of a literal", "t", `{"code":"print('done')"}`, `{"code":"print('done ')"}`, false},
		{"code: a # inside a literal", "t", `{"code":"print('#1')"}`, `{"code":"print('#2')"}`, false},
		{"code: Python's floor division is code", "t", `{"code":"print(x // 2)"}`, `{"code":"print(x // 3)"}`, false},
		{"code: indentation", "t", `{"code":"if x:\n    y()"}`, `{"code":"if x:\ny()"}`, false},
		{"code: #include is code", "t", `{"code":"#include <a.h>"}`, `{"code":"#include <b.h>"}`, false},
		{"code: by the tool's name", "execute_code", `{"input":"print('done')"}`, `{"input":"print(\"done\")  # check"}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, pa := parseArguments(tt.a)
			b, pb := parseArguments(tt.b)
			if pa != "" || pb != "" {
				t.Fatalf("parse: %q %q", pa, pb)
			}
			k := kinds{tool: tt.tool}
			fa, fb := formOf("p", tt.tool, a, k), formOf("p", tt.tool, b, k)
			if got := fa == fb; got != tt.same {
				t.Errorf("same form: got %v, want %v\n%s\n%s", got, tt.same, fa, fb)
			}
		})
	}
	x, _ := parseArguments(`{}`)
	if formOf("p", "t", x, kinds{}) == formOf("q", "t", x, kinds{}) || formOf("p", "t", x, kinds{}) == formOf("p", "u", x, kinds{}) {
		t.Error("the form ignores the project or the tool name")
	}
}

// TestFormSchemaHints checks that a parameter's description in the tool's
// schema decides the language of its strings.
func TestFormSchemaHints(t *testing.T) {
	tools := []chat.Tool{declare("run", `{"type":"object","properties":{"line":{"type":"string","description":"The bash line to run"}}}`)}
	p := NewPolicy(tools, nil, nil)
	a, _ := parseArguments(`{"line":"submit 'flag{x}'"}`)
	b, _ := parseArguments(`{"line":"submit flag{x}"}`)
	c, _ := parseArguments(`{"line":"submit  flag{x};"}`)
	k := p.kindsOf("run")
	if formOf("", "run", a, k) == formOf("", "run", b, k) || formOf("", "run", b, k) != formOf("", "run", c, k) {
		t.Errorf("the schema's description does not make the line a shell command: %s, %s, %s", formOf("", "run", a, k), formOf("", "run", b, k), formOf("", "run", c, k))
	}
}

// repeated is n runs of s.
func repeated(s step, n int) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestProgressive checks the progress rule on short turns: any tool may
// repeat while its result changes or after another call brought
// something new, and a loop may waste DefaultMaxWasted calls.
func TestProgressive(t *testing.T) {
	tests := []struct {
		name    string
		history []step
		next    step
		want    Verdict
	}{
		{"an identical repeat after one run", []step{sh("ls", "a")}, sh("ls", "a"), VerdictForward},
		{"an identical repeat whose result changed", []step{sh("ls", "a"), sh("ls", "a b")}, sh("ls", "a"), VerdictForward},
		{"three wasted runs: the next is refused", repeated(sh("ls", "a"), 4), sh("ls", "a"), VerdictNoProgress},
		{"two wasted runs: one more may go", repeated(sh("ls", "a"), 3), sh("ls", "a"), VerdictForward},
		{"the same result but for a stamp", []step{sh("date; ls", "Thu Nov 27 14:49:28 UTC 2026\na"), sh("date; ls", "Thu Nov 27 14:49:31 UTC 2026\na"),
			sh("date; ls", "Thu Nov 27 14:49:35 UTC 2026\na"), sh("date; ls", "Thu Nov 27 14:49:40 UTC 2026\na")}, sh("date; ls", "x"), VerdictNoProgress},
		{"the same result, in other forms", []step{sh("ls -l", "a"), sh("ls  -l # again", "a"), sh("ls -l;", "a"), sh("'ls' -l", "a")}, sh(`"ls" -l`, "a"), VerdictNoProgress},
		{"an edit since", append(repeated(sh("go test", "FAIL"), 4), call("edit_file", `{"old":"a","new":"b"}`, "ok")), sh("go test", "FAIL"), VerdictForward},
		{"a wait since: polling", []step{sh("gh run view", "in progress"), sh("sleep 30", ""), sh("gh run view", "in progress"), sh("sleep 30", ""),
			sh("gh run view", "in progress"), sh("sleep 30", ""), sh("gh run view", "in progress"), sh("sleep 30", "")}, sh("gh run view", "in progress"), VerdictForward},
		{"a cycle of two", []step{sh("go test", "FAIL"), sh("cat x", "x"), sh("go test", "FAIL"), sh("cat x", "x"), sh("go test", "FAIL"), sh("cat x", "x")}, sh("go test", "FAIL"), VerdictCycle},
		{"a cycle of three", []step{sh("a", "1"), sh("b", "2"), sh("c", "3"), sh("a", "1"), sh("b", "2"), sh("c", "3")}, sh("a", "1"), VerdictForward},
		{"a cycle of three, wasting its third call", []step{sh("a", "1"), sh("b", "2"), sh("c", "3"), sh("a", "1"), sh("b", "2"), sh("c", "3"), sh("a", "1"), sh("b", "2")}, sh("c", "3"), VerdictCycle},
		{"a cycle of four", []step{sh("a", "1"), sh("b", "2"), sh("c", "3"), sh("d", "4"), sh("a", "1"), sh("b", "2"), sh("c", "3"), sh("d", "4"), sh("a", "1"), sh("b", "2")}, sh("c", "3"), VerdictCycle},
		{"a malformed call ran: its effect is unknown", append(repeated(sh("go test", "FAIL"), 4), call("edit_file", `{"old":`, "ok")), sh("go test", "FAIL"), VerdictForward},
		{"failing in a row with the same error", []step{sh("pip install -q x", "ERROR: No matching distribution found for x"), sh("pip install -U x", "ERROR: No matching distribution found for x"),
			sh("pip3 install x", "ERROR: No matching distribution found for x")}, sh("python -m pip install x", "?"), VerdictFailingStreak},
		{"failing in a row, another tool next", []step{sh("pip install -q x", "ERROR: No matching distribution found for x"), sh("pip install -U x", "ERROR: No matching distribution found for x"),
			sh("pip3 install x", "ERROR: No matching distribution found for x")}, call("web_search", `{"query":"x wheel"}`, "?"), VerdictForward},
		{"failing in a row with other errors", []step{sh("a", "Error: one"), sh("b", "Error: two"), sh("c", "Error: three")}, sh("d", "?"), VerdictForward},
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
// it repeats (the earlier calls) and never quotes argument values, and
// that a failing streak's quotes the error.
func TestProgressiveNotice(t *testing.T) {
	j := judgeNext(t, []step{code("print('sk-VALUE')", "x"), code(`print("sk-VALUE")`, "x"), code("print('sk-VALUE')  # again", "x"), code("print( 'sk-VALUE' )", "x")},
		code("print('sk-VALUE');", "x"))
	if j.Verdict != VerdictNoProgress || !j.Variant {
		t.Fatalf("verdict: got %s (variant %v), want a no_progress variant", j.Verdict, j.Variant)
	}
	n := Notice(j, Budget{Executions: 2, MaxExecutions: 60, Refused: 1, MaxRefused: 3})
	for _, want := range []string{`"call_2"`, `"call_3"`, "only in form", "rule: no_progress"} {
		if !strings.Contains(n, want) {
			t.Errorf("notice %q does not name %q", n, want)
		}
	}
	if strings.Contains(n, "sk-VALUE") || strings.Contains(Shown(j, Budget{MaxRefused: 3}), "sk-VALUE") {
		t.Errorf("the notice quotes an argument value: %q", n)
	}
	fail := "<returncode>1</returncode>\n<output>\nModuleNotFoundError: No module named 'numpy'\n</output>"
	j = judgeNext(t, []step{sh("python a.py", fail), sh("python3 a.py", fail), sh("python  a.py;", fail)}, sh("python -m a", "?"))
	n = Notice(j, Budget{MaxRefused: 3})
	if j.Verdict != VerdictFailingStreak || !strings.Contains(n, `ModuleNotFoundError: No module named 'numpy'`) || strings.Contains(j.Reason, "numpy") {
		t.Errorf("failing streak: got %s, notice %q, reason %q; want the notice, not the reason, to quote the error", j.Verdict, n, j.Reason)
	}
}

// TestResultDuplicates checks STRICT_DUPLICATES=results: an exact repeat
// is forwarded when its result may have changed since, and refused as a
// duplicate otherwise.
func TestResultDuplicates(t *testing.T) {
	tests := []struct {
		name    string
		history []step
		next    step
		want    Verdict
	}{
		{"back to back", []step{sh("cat a", "v1")}, sh("cat a", "v1"), VerdictDuplicate},
		{"a file re-read after an edit", []step{sh("cat a", "v1"), call("edit_file", `{"path":"a"}`, "edited")}, sh("cat a", "v2"), VerdictForward},
		{"a script re-run after its result changed", []step{sh("python t.py", "FAIL"), sh("python t.py", "ok")}, sh("python t.py", "ok"), VerdictForward},
		{"nothing new since", []step{sh("cat a", "v1"), call("edit_file", `{"path":"a"}`, "edited"), sh("cat a", "v2"), sh("cat a", "v2")}, sh("cat a", "v2"), VerdictDuplicate},
		{"a call repeated after a repeat is no news", []step{sh("cat a", "v1"), sh("ls", "a"), sh("cat a", "v1"), sh("ls", "a")}, sh("cat a", "?"), VerdictDuplicate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPolicy(corpusTools, nil, NewLedger("p", turn(t, tt.history))).ResultDuplicates()
			if got := p.Judge(toolCall("next", tt.next.tool, tt.next.args)); got.Verdict != tt.want {
				t.Errorf("verdict: got %s (%s), want %s", got.Verdict, got.Reason, tt.want)
			}
		})
	}
}

// BenchmarkJudge judges a call against a 200-call turn whose ledger the
// guard built (as it does for every request, whatever the profile): the
// policy, and its judgement, by the strict rules and by the progress rule
// of the agent profile (forms of every call, results normalised where two
// runs of a form differ). BenchmarkLedger200 is the ledger's own cost.
func BenchmarkJudge(b *testing.B) {
	l := NewLedger("p", turn(b, turn200()))
	next := toolCall("next", "run_tests", `{"package":"./pkg/client"}`)
	for _, progressive := range []bool{false, true} {
		b.Run(map[bool]string{false: "strict", true: "agent"}[progressive], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p := NewPolicy(corpusTools, nil, l)
				if progressive {
					p.Progressive(0, 0)
				}
				if j := p.Judge(next); j.Verdict == "" {
					b.Fatal("no verdict")
				}
			}
		})
	}
}

// turn200 is a 200-call turn: the legitimate corpus turns one after
// another, with shell commands and stamped results between them.
func turn200() []step {
	var s []step
	for _, tt := range legitimate {
		s = append(s, tt.steps...)
	}
	for i := 0; len(s) < 200; i++ {
		s = append(s, sh(fmt.Sprintf("go test ./pkg/%d/...", i%7), fmt.Sprintf("ok  \tgithub.com/acme/pkg/%d\t0.%03ds", i%7, i)))
	}
	return s[:200]
}

func BenchmarkLedger200(b *testing.B) {
	msgs := turn(b, turn200())
	b.ReportAllocs()
	for b.Loop() {
		if NewLedger("p", msgs).CycleIndex() != 200 {
			b.Fatal("not 200 calls")
		}
	}
}
