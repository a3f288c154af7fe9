package tools

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/chat"
)

// step is one tool call of a scripted turn and the result the client's
// tool returns for it.
type step struct {
	tool, args, result string
}

// sh is a shell call; code an execute_code call.
func sh(cmd, result string) step {
	return step{"run_shell", fmt.Sprintf(`{"command":%q}`, cmd), result}
}

func code(src, result string) step {
	return step{"execute_code", fmt.Sprintf(`{"code":%q}`, src), result}
}

func call(tool, args, result string) step { return step{tool, args, result} }

// corpusTools are the tools every corpus turn declares.
var corpusTools = []chat.Tool{
	declare("run_shell", ""), declare("execute_code", ""), declare("read_file", ""), declare("write_file", ""),
	declare("edit_file", ""), declare("search", ""), declare("list_dir", ""), declare("run_tests", ""),
	declare("job_status", ""), declare("list_issues", ""), declare("web_search", ""),
	declare("exec_command", ""), declare("run_shell_command", ""),
}

// legitimate are long turns modelled on real agent sessions (explore,
// read, edit, test, fix, test). None of their calls may be refused.
var legitimate = []struct {
	name  string
	steps []step
}{
	{"bug fix: searches that find nothing before the right one, edit, tests re-run after each edit", bugFix()},
	{"refactor across 15 files: read, edit, test per file, the same failure each time with an edit between", refactor()},
	{"pagination with a cursor, then a summary written and read back", pagination()},
	{"polling a job whose status changes, between builds", polling()},
	{"shell-only agent: the same build and test commands after every edit, empty outputs", shellAgent()},
	{"re-reading files after writing them, reading one again after an unrelated change", rereads()},
}

func bugFix() []step {
	s := []step{call("list_dir", `{"path":"."}`, "cmd/ internal/ pkg/ go.mod")}
	for _, dir := range []string{"cmd", "internal", "pkg/api", "pkg/store"} {
		s = append(s, call("search", fmt.Sprintf(`{"query":"ErrTimeout","path":%q}`, dir), "no matches"))
	}
	s = append(s,
		call("search", `{"query":"ErrTimeout","path":"pkg/client"}`, "pkg/client/dial.go:41"),
		call("read_file", `{"path":"pkg/client/dial.go"}`, "v1 of dial.go"),
		call("read_file", `{"path":"pkg/client/dial_test.go"}`, "dial tests"),
		call("run_tests", `{"package":"./pkg/client"}`, "FAIL TestDialTimeout"),
	)
	for i := range 6 {
		s = append(s,
			call("edit_file", fmt.Sprintf(`{"path":"pkg/client/dial.go","old":"line %d","new":"fixed %d"}`, i, i), "edited"),
			call("run_tests", `{"package":"./pkg/client"}`, map[bool]string{true: "ok", false: "FAIL TestDialTimeout"}[i == 5]),
		)
	}
	s = append(s,
		call("read_file", `{"path":"pkg/client/dial.go"}`, "v7 of dial.go"),
		call("run_tests", `{"package":"./..."}`, "ok all"),
		sh("git diff --stat", "1 file changed"),
	)
	return s
}

func refactor() []step {
	files := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o"}
	s := []step{sh("grep -rl OldName .", strings.Join(files, ".go ")+".go")}
	for _, f := range files {
		s = append(s,
			call("read_file", fmt.Sprintf(`{"path":"%s.go"}`, f), "old "+f),
			call("edit_file", fmt.Sprintf(`{"path":"%s.go","old":"OldName","new":"NewName"}`, f), "edited"),
			call("run_tests", `{}`, "FAIL: undefined OldName in other files"),
		)
	}
	// The failure stays the same until the last file is done: every run
	// follows an edit, which is progress.
	return append(s, call("run_tests", `{"verbose":true}`, "ok (verbose)"), sh("git status --short", "M 15 files"))
}

func pagination() []step {
	var s []step
	cursor := ""
	for i := range 20 {
		next := fmt.Sprintf("c%02d", i+1)
		s = append(s, call("list_issues", fmt.Sprintf(`{"state":"open","cursor":%q}`, cursor), fmt.Sprintf("issues page %d, next %s", i+1, next)))
		cursor = next
	}
	return append(s,
		call("write_file", `{"path":"summary.md","content":"summary"}`, "written"),
		call("read_file", `{"path":"summary.md"}`, "summary"),
	)
}

func polling() []step {
	s := []step{sh("make release", "job 42 started")}
	for i, st := range []string{"queued", "running 10%", "running 35%", "running 60%", "running 85%", "running 99%", "done"} {
		s = append(s, call("job_status", `{"job":42}`, st))
		if i%2 == 1 {
			s = append(s, sh(fmt.Sprintf("tail -n 5 build-%d.log", i), fmt.Sprintf("log lines %d", i)))
		}
	}
	s = append(s, sh("make deploy", "job 43 started"))
	for _, st := range []string{"queued", "running", "running 50%", "done"} {
		s = append(s, call("job_status", `{"job": 43}`, st))
	}
	for i := range 4 {
		s = append(s, sh("sleep 30", ""), call("job_status", `{"job":44}`, fmt.Sprintf("waiting for approval (%d s)", 30*(i+1))))
	}
	return append(s, call("job_status", `{"job":44}`, "approved"))
}

func shellAgent() []step {
	s := []step{sh("ls", "main.go util.go"), sh("cat main.go", "package main ...")}
	for i := range 10 {
		s = append(s,
			sh(fmt.Sprintf("sed -i 's/v%d/v%d/' main.go", i, i+1), ""),
			sh("go build ./...", ""),
			sh("go test ./...", map[bool]string{true: "ok", false: "FAIL"}[i >= 8]),
		)
	}
	return append(s, sh("gofmt -l .", ""), sh("go vet ./...", ""))
}

func rereads() []step {
	var s []step
	for i := range 8 {
		f := fmt.Sprintf(`{"path":"pkg/f%d.go"}`, i)
		s = append(s,
			call("read_file", f, fmt.Sprintf("f%d v1", i)),
			call("write_file", fmt.Sprintf(`{"path":"pkg/f%d.go","content":"v2 of %d"}`, i, i), "written"),
			call("read_file", f, fmt.Sprintf("f%d v2", i)),
		)
	}
	// The same unchanged file read again after other work.
	return append(s, call("read_file", `{"path":"pkg/f0.go"}`, "f0 v2"), call("run_tests", `{}`, "ok"), call("read_file", `{"path":"pkg/f0.go"}`, "f0 v2"))
}

// loops are the kinds of loops users of agent frameworks report with
// DeepSeek models, each a call the model would make forever (call n of
// the loop, from 0): the guard must refuse one within 3 wasted executions
// (executions of the loop that brought nothing new: their form and result
// had been seen in the turn already).
var loops = []struct {
	name   string
	source string // the kind of public report the case models
	lead   []step // legitimate work before the loop starts
	next   func(n int) step
}{
	{"cosmetic execute_code verification", "NousResearch/hermes-agent issue 37255: deepseek-v4-pro, done with its task, verifies with about a hundred execute_code no-ops (print('done')) while its reasoning says it will stop",
		bugFix()[:6], func(n int) step {
			return code([]string{"print('done')", `print("done")`, "print('done')  # verify", "print( 'done' )\n", "print(\"done\")  # final check", "print('done');"}[n%6], "done\n")
		}},
	{"says it will stop, sends the same command", "QwenLM/qwen-code issue 4695: deepseek-v4-pro writes 'let me stop this loop and give a clear summary' and sends run_shell_command `git status --short` again, every round",
		shellAgent()[:5], func(int) step { return sh("npm run build", "Error: Cannot find module 'x'") }},
	{"install retried with a flag moved", "gptme/gptme issue 3459: DeepSeek retries the same numpy install without acknowledging the result it got; here the flags move between tries",
		nil, func(n int) step {
			return sh([]string{"pip install -q -U torch==9.9", "pip install -U -q torch==9.9", "pip install torch==9.9 -q -U", "pip install 'torch==9.9' -U -q"}[n%4], "ERROR: No matching distribution found for torch==9.9")
		}},
	{"same search, punctuation and spacing changed", "deepseek-ai/DeepSeek-V3 issue 301: a LangChain ReAct agent on deepseek-chat repeats its DuckDuckGo search indefinitely; here the query changes only in punctuation, spacing and quotes",
		pagination()[:3], func(n int) step {
			q := []string{"deepseek tool call loop fix", "deepseek tool call loop fix.", "  deepseek  tool call loop fix ", `"deepseek tool call loop fix"`}[n%4]
			return call("web_search", fmt.Sprintf(`{"query":%q}`, q), "3 results: a, b, c")
		}},
	{"arguments re-encoded: key order, number and boolean spelling", "function-calling loops through OpenAI-compatible SDKs: the same read re-sent with keys reordered, a number as a string and a boolean as \"True\"",
		nil, func(n int) step {
			return call("read_file", []string{`{"path":"a.go","line":10,"follow":true}`, `{"follow":"True","line":"10","path":"a.go"}`, `{"line":1e1,"path":"a.go","follow":"true"}`}[n%3], "line 10: x := 1")
		}},
	{"polling that never changes", "agents that poll a job or a page: the status call repeated with the same answer and nothing else done",
		polling()[:3], func(int) step { return call("job_status", `{"job":7}`, "running") }},
	{"two calls alternating, nothing new", "Integration-Automation/AutoControlGUI pull request 254 names the ping_pong loop (A-B-A-B) of agents; here reading a file and running its tests, both unchanged",
		refactor()[:4], func(n int) step {
			if n%2 == 0 {
				return call("read_file", `{"path":"z.go"}`, "z")
			}
			return call("run_tests", `{"package":"./z"}`, "FAIL TestZ")
		}},
	{"Codex: the same exec_command, each result stamped anew", "the gateway's issue 28: Codex's exec_command output opens with a fresh Chunk ID and Wall time, so a loop of one command never returned two byte-equal results and ran 20 times through the agent profile",
		nil, func(n int) step {
			return call("exec_command", `{"cmd":"npm test","yield_time_ms":10000}`, fmt.Sprintf("Chunk ID: %06x\nWall time: %d.%04d seconds\nProcess exited with code 1\nOriginal token count: 12\nOutput:\nError: Cannot find module 'jest'\n", 0x3fa1c2+n*7919, n%3, 1000+n*37))
		}},
	{"Codex: a cosmetic loop", "the gateway's issue 28: Codex re-sends a command re-spaced and re-quoted, each result with its own Chunk ID and Wall time",
		nil, func(n int) step {
			cmd := []string{"ls -la src", "ls  -la src", `ls -la "src"`, "ls -la src;"}[n%4]
			return call("exec_command", fmt.Sprintf(`{"cmd":%q}`, cmd), fmt.Sprintf("Chunk ID: %06x\nWall time: 0.%04d seconds\nProcess exited with code 0\nOutput:\nmain.go\nutil.go\n", 0x9b07e4+n, 100+n))
		}},
	{"Qwen Code: echo done in two spellings", "the gateway's issue 28: Qwen Code's run_shell_command result opens with \"Command: <the command as given>\", so echo done and echo \"done\" never returned the same result",
		nil, func(n int) step {
			cmd := []string{"echo done", `echo "done"`}[n%2]
			return call("run_shell_command", fmt.Sprintf(`{"command":%q}`, cmd), fmt.Sprintf("Command: %s\nDirectory: (root)\nOutput: done\nError: (none)\nExit Code: 0\nSignal: (none)\nBackground PIDs: (none)\nProcess Group PGID: %d", cmd, 48211+n*17))
		}},
	{"the same directory listed again and again", "earendil-works/pi issue 6158: an agent lists the same directory 6 times in a row, the output identical each time, instead of writing the file",
		nil, func(int) step { return sh("ls /home/dev/.jupyter/custom/", "custom.css\ncustom.js") }},
	{"the same file read anywhere in the turn", "google-gemini/gemini-cli issue 8259: the agent reads the same file again and again, between other checks that tell it nothing new either",
		bugFix()[:3], func(n int) step {
			switch n % 4 {
			case 0, 2:
				return call("read_file", `{"path":"src/office-details.component.html"}`, "<div class=\"office\">…</div>")
			case 1:
				return call("list_dir", `{"path":"src"}`, "office-details.component.html office-details.component.ts")
			}
			return sh("git status --short", " M src/office-details.component.ts")
		}},
	{"comment added to the same code", "notebook agents: the same snippet re-run with a comment added or removed, the same output",
		nil, func(n int) step {
			return code([]string{"import os\nprint(os.getcwd())", "# where am I\nimport os\nprint(os.getcwd())", "import os\nprint(os.getcwd())  # again"}[n%3], "/home/user\n")
		}},
}

// turn builds the messages of a user turn that executed steps.
func turn(t testing.TB, steps []step) []chat.Message {
	t.Helper()
	var b strings.Builder
	b.WriteString(`[{"role":"user","content":"fix it"}`)
	for i, s := range steps {
		fmt.Fprintf(&b, `,{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":%q,"arguments":%s}}]}`,
			i, s.tool, mustJSON(t, s.args))
		fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"call_%d","content":%s}`, i, mustJSON(t, s.result))
	}
	b.WriteString(`]`)
	return history(t, b.String())
}

func mustJSON(t testing.TB, s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func judgeNext(t testing.TB, executed []step, s step) Judgement {
	p := NewPolicy(corpusTools, nil, NewLedger("p", turn(t, executed))).Progressive(0, 0)
	return p.Judge(toolCall("next", s.tool, s.args))
}

// TestCorpus runs the legitimate turns and the loops through the
// progressive policy, call by call, as the guard would see each request:
// no legitimate call is refused, and every loop is refused within 3 wasted
// executions. The figures are in the README.
func TestCorpus(t *testing.T) {
	for _, tt := range legitimate {
		t.Run("legitimate/"+tt.name, func(t *testing.T) {
			if n := len(tt.steps); n < 20 || n > 50 {
				t.Fatalf("turn has %d calls; the corpus holds turns of 20 to 50", n)
			}
			for i, s := range tt.steps {
				if j := judgeNext(t, tt.steps[:i], s); j.Verdict != VerdictForward {
					t.Errorf("call %d (%s %s): got %s (%s), want forward", i, s.tool, s.args, j.Verdict, j.Reason)
				}
			}
		})
	}
	for _, tt := range loops {
		t.Run("loop/"+tt.name, func(t *testing.T) {
			executed := append([]step{}, tt.lead...)
			for n := 0; ; n++ {
				s := tt.next(n)
				j := judgeNext(t, executed, s)
				if j.Verdict.Loop() {
					wasted := wastedExecutions(t, executed, len(tt.lead))
					if wasted > 3 && j.Verdict != VerdictFailingStreak || n > DefaultMaxFailingStreak && j.Verdict == VerdictFailingStreak {
						t.Errorf("stopped (%s) at loop call %d after %d wasted executions, want at most 3 (a failing streak at most %d calls)", j.Verdict, n, wasted, DefaultMaxFailingStreak)
					}
					t.Logf("%s: refused (%s) at loop call %d, %d wasted", tt.source, j.Verdict, n, wasted)
					return
				}
				if j.Verdict != VerdictForward || n > 20 {
					t.Fatalf("loop call %d: got %s (%s); want forward until a loop verdict", n, j.Verdict, j.Reason)
				}
				executed = append(executed, s)
			}
		})
	}
}

// wastedExecutions counts the executions of executed[from:] since the
// last one that brought something new (its tool, form and result, as
// NewForm and NormaliseResult read them, were new to the turn) that each
// repeated an earlier execution with nothing new in between.
func wastedExecutions(t testing.TB, executed []step, from int) int {
	t.Helper()
	keys := make([]string, len(executed))
	for k, s := range executed {
		f, err := NewForm(s.tool, s.args)
		if err != nil {
			t.Fatal(err)
		}
		keys[k] = string(f) + "\x00" + NormaliseResult(s.result)
	}
	last := map[string]int{}
	lastFresh, wasted := -1, 0
	for k, key := range keys {
		i, seen := last[key]
		last[key] = k
		switch {
		case !seen:
			lastFresh = k
			if k >= from {
				wasted = 0
			}
		case i >= lastFresh && k >= from:
			wasted++
		}
	}
	return wasted
}
