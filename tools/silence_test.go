package tools

import (
	"fmt"
	"testing"
)

// TestSilentFrame reads the results of real agents' tools: a result that
// printed nothing is silent and keeps its frame, one that printed
// something is not, and the frame of two runs is equal only when the
// agent framed them alike (the same exit code, signal, directory).
func TestSilentFrame(t *testing.T) {
	tests := []struct {
		name string
		// rule is the frame rule the row is about; every rule has a row.
		rule   string
		result string
		silent bool
		frame  string
	}{
		{"Qwen Code run_shell_command: the output lost", "Qwen Code empty output",
			"Command: wc -l README.md\nDirectory: (root)\nOutput: (empty)\nError: (none)\nExit Code: 0\nSignal: (none)\nProcess Group PGID: (none)",
			true, "Directory: (root)\nError: (none)\nExit Code: 0\nSignal: (none)\nProcess Group PGID: (none)\n"},
		{"Qwen Code run_shell_command: an output", "Qwen Code frame",
			"Command: wc -l README.md\nDirectory: (root)\nOutput: 5 README.md\nError: (none)\nExit Code: 0\nSignal: (none)\nProcess Group PGID: (none)",
			false, "Directory: (root)\nError: (none)\nExit Code: 0\nSignal: (none)\nProcess Group PGID: (none)\n"},
		{"Qwen Code run_shell_command: an error it names is output", "Qwen Code frame",
			"Command: make\nDirectory: (root)\nOutput: (empty)\nError: spawn make ENOENT\nExit Code: 127\nSignal: (none)\nBackground PIDs: (none)\nProcess Group PGID: 48211",
			false, "Directory: (root)\nExit Code: 127\nSignal: (none)\nBackground PIDs: (none)\nProcess Group PGID: <n>\n"},
		{"Codex exec_command: nothing printed", "Codex output label",
			"Chunk ID: 3fa1c2\nWall time: 0.0113 seconds\nProcess exited with code 0\nOutput:\n", true, "Process exited with code 0\n"},
		{"Codex exec_command: an output", "Codex exit code",
			"Chunk ID: 9b07e4\nWall time: 0.0113 seconds\nProcess exited with code 0\nOutput:\nmain.go\n", false, "Process exited with code 0\n"},
		{"mini-swe-agent: nothing printed", "mini-swe-agent output tags", "<returncode>0</returncode>\n<output>\n</output>", true, "<returncode>0</returncode>\n"},
		{"mini-swe-agent: a failure printed nothing", "mini-swe-agent return code", "<returncode>1</returncode>\n<output>\n</output>", true, "<returncode>1</returncode>\n"},
		{"mini-swe-agent: an output", "mini-swe-agent output tags", "<returncode>0</returncode>\n<output>\nTrue\n</output>", false, "<returncode>0</returncode>\n"},
		{"SWE-agent: nothing printed", "SWE-agent no output",
			"Your command ran successfully and did not produce any output.\n(Open file: /testbed/reproduce.py)\n(Current directory: /testbed)\nbash-$",
			true, "(Open file: /testbed/reproduce.py)\n(Current directory: /testbed)\nbash-$\n"},
		{"SWE-agent: an output", "SWE-agent prompt", "344\n(Open file: /testbed/reproduce.py)\n(Current directory: /testbed)\nbash-$",
			false, "(Open file: /testbed/reproduce.py)\n(Current directory: /testbed)\nbash-$\n"},
		{"an empty result", "", "", true, ""},
		{"white space only", "", " \n\t\n", true, ""},
		{"a plain output has no frame", "", "a.go\nb.go", false, ""},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.rule] = true
		t.Run(tt.name, func(t *testing.T) {
			frame, silent := silentFrame(NormaliseResult(tt.result))
			if silent != tt.silent || frame != tt.frame {
				t.Errorf("got silent %v, frame %q; want %v, %q", silent, frame, tt.silent, tt.frame)
			}
		})
	}
	for _, r := range frameRules {
		if !covered[r.name] {
			t.Errorf("frame rule %q has no test from a tool's output", r.name)
		}
	}
}

// qwenShell is a call of Qwen Code's run_shell_command and the result
// Qwen Code 0.24.4 sends back for it, with output as the command's
// output ("" when Qwen Code lost it).
func qwenShell(command, output string) step {
	if output == "" {
		output = "(empty)"
	}
	return call("run_shell_command", fmt.Sprintf(`{"command":%q}`, command),
		"Command: "+command+"\nDirectory: (root)\nOutput: "+output+"\nError: (none)\nExit Code: 0\nSignal: (none)\nProcess Group PGID: (none)")
}

// TestProgressiveLostOutput checks the progress rule on Qwen Code's real
// results when a run loses its output (as Qwen Code 0.24.4 did on the
// first, second or fourth run of a loop through the gateway): a lost
// output is no progress, so the exact and the cosmetic loop are refused
// at their fifth call wherever the output went missing, and the agent's
// own detector (Qwen Code halts at the fifth identical call) never sees
// it; but a silent run, or an output, after something new came back, or
// a silent run in another frame, is progress.
func TestProgressiveLostOutput(t *testing.T) {
	wc := func(out string) step { return qwenShell("wc -l README.md", out) }
	echo := func(cmd, out string) step { return qwenShell(cmd, out) }
	tests := []struct {
		name    string
		history []step
		next    step
		want    Verdict
	}{
		{"exact loop, the fourth output lost", []step{wc("5 README.md"), wc("5 README.md"), wc("5 README.md"), wc("")}, wc("5 README.md"), VerdictNoProgress},
		{"exact loop, the second output lost", []step{wc("5 README.md"), wc(""), wc("5 README.md"), wc("5 README.md")}, wc("5 README.md"), VerdictNoProgress},
		{"exact loop, two outputs lost", []step{wc("5 README.md"), wc(""), wc(""), wc("5 README.md")}, wc("5 README.md"), VerdictNoProgress},
		{"cosmetic loop, the second output lost", []step{echo("echo done", "done"), echo("echo  done", ""), echo(`echo "done"`, "done"), echo(`echo  "done"`, "done")},
			echo("echo done;", "done"), VerdictNoProgress},
		{"exact loop, three runs: one more may go", []step{wc("5 README.md"), wc(""), wc("5 README.md")}, wc("5 README.md"), VerdictForward},
		{"silent after something new came back", []step{echo("ls build", "out.o"), echo("rm build/out.o", ""), echo("ls build", ""), echo("ls build", ""), echo("ls build", "")},
			echo("ls build", ""), VerdictForward},
		{"exact loop, the first output lost", []step{wc(""), wc("5 README.md"), wc("5 README.md"), wc("5 README.md")}, wc("5 README.md"), VerdictNoProgress},
		{"cosmetic loop, outputs lost on and off", []step{echo("echo done", ""), echo("echo  done", "done"), echo(`echo "done"`, "done"), echo(`echo  "done"`, "")},
			echo("echo done;", "done"), VerdictNoProgress},
		{"silent, then an output after an edit: progress", []step{echo("ls build", ""), echo("make", "built"), echo("ls build", "out.o"), echo("ls build", "out.o"), echo("ls build", "out.o")},
			echo("ls build", "out.o"), VerdictForward},
		{"silent with another exit code: progress", []step{wc("5 README.md"), wc("5 README.md"), wc("5 README.md"),
			call("run_shell_command", `{"command":"wc -l README.md"}`, "Command: wc -l README.md\nDirectory: (root)\nOutput: (empty)\nError: (none)\nExit Code: 1\nSignal: (none)\nProcess Group PGID: (none)")},
			wc("5 README.md"), VerdictForward},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := judgeNext(t, tt.history, tt.next); got.Verdict != tt.want {
				t.Errorf("verdict: got %s (%s), want %s", got.Verdict, got.Reason, tt.want)
			}
		})
	}
}
