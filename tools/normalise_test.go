package tools

import (
	"strings"
	"testing"
)

// TestNormaliseResult runs every stamp rule on the output shape of a real
// tool: two runs of the same command that differ only in the stamp read
// alike, and a run that differs in substance still differs.
func TestNormaliseResult(t *testing.T) {
	tests := []struct {
		name string
		// rule is the rule the row is about (a line rule, a word rule,
		// or "terminal": what a terminal shows); every rule has a row.
		rule string
		a, b string
		same bool
	}{
		{"Codex exec_command: a fresh chunk id", "Codex chunk id",
			"Chunk ID: 3fa1c2\nWall time: 0.0113 seconds\nProcess exited with code 0\nOutput:\ndone\n",
			"Chunk ID: 9b07e4\nWall time: 0.0113 seconds\nProcess exited with code 0\nOutput:\ndone\n", true},
		{"Codex exec_command: another wall time", "Codex wall time",
			"Chunk ID: 3fa1c2\nWall time: 0.0113 seconds\nProcess exited with code 0\nOutput:\ndone\n",
			"Chunk ID: 3fa1c2\nWall time: 1.5020 seconds\nProcess exited with code 0\nOutput:\ndone\n", true},
		{"Codex exec_command: a process still running", "Codex session id",
			"Chunk ID: 1\nWall time: 10.0021 seconds\nProcess running with session ID 4\nOutput:\nwaiting\n",
			"Chunk ID: 2\nWall time: 10.0007 seconds\nProcess running with session ID 9\nOutput:\nwaiting\n", true},
		{"Codex exec_command: the token count of a cut output", "Codex token count",
			"Chunk ID: 1\nWall time: 0.2 seconds\nProcess exited with code 0\nOriginal token count: 20412\nOutput:\nlog\n",
			"Chunk ID: 2\nWall time: 0.3 seconds\nProcess exited with code 0\nOriginal token count: 20408\nOutput:\nlog\n", true},
		{"Codex exec_command: another exit code is substance", "Codex wall time",
			"Chunk ID: 3fa1c2\nWall time: 0.0113 seconds\nProcess exited with code 0\nOutput:\nok\n",
			"Chunk ID: 9b07e4\nWall time: 0.0210 seconds\nProcess exited with code 1\nOutput:\nok\n", false},
		{"Qwen Code run_shell_command: the echo of the command", "echoed command",
			"Command: echo done\nDirectory: (root)\nOutput: done\nError: (none)\nExit Code: 0\nSignal: (none)\nBackground PIDs: (none)\nProcess Group PGID: 48211",
			"Command: echo \"done\"\nDirectory: (root)\nOutput: done\nError: (none)\nExit Code: 0\nSignal: (none)\nBackground PIDs: (none)\nProcess Group PGID: 48377", true},
		{"Qwen Code run_shell_command: background pids", "background pids",
			"Command: npm run dev &\nDirectory: (root)\nOutput: (empty)\nError: (none)\nExit Code: 0\nSignal: (none)\nBackground PIDs: 5120\nProcess Group PGID: 5118",
			"Command: npm run dev &\nDirectory: (root)\nOutput: (empty)\nError: (none)\nExit Code: 0\nSignal: (none)\nBackground PIDs: 6044\nProcess Group PGID: 6042", true},
		{"Qwen Code run_shell_command: other output is substance", "echoed command",
			"Command: cat VERSION\nDirectory: (root)\nOutput: 1.2.0\nExit Code: 0",
			"Command: cat VERSION\nDirectory: (root)\nOutput: 1.3.0\nExit Code: 0", false},
		{"a shell's prompt echo", "echoed command", "$ make test\nall passed\n", "$ make  test\nall passed\n", true},
		{"a process id in a log line", "process id",
			"Starting server (pid 48211)\nListening on :8080", "Starting server (pid 48377)\nListening on :8080", true},
		{"a background job", "shell job", "[1] 48211\nstarted", "[1] 50012\nstarted", true},
		{"Claude Code Bash: colours of a test run", "terminal",
			"\x1b[32m✓\x1b[39m parses the config \x1b[2m(3 ms)\x1b[22m\n\x1b[1mTests:\x1b[22m 1 passed, 1 total",
			"✓ parses the config (5 ms)\nTests: 1 passed, 1 total", true},
		{"Claude Code Bash: a test that now fails is substance", "terminal",
			"\x1b[32m✓\x1b[39m parses the config\n\x1b[1mTests:\x1b[22m 1 passed, 1 total",
			"\x1b[31m✕\x1b[39m parses the config\n\x1b[1mTests:\x1b[22m 1 failed, 1 total", false},
		{"a progress bar redrawn", "terminal",
			"Building\r[==>      ] 30%\r[========>] 100%\ndone\n", "Building\r[========>] 100%\ndone\n", true},
		{"Windows line endings", "terminal", "ok\r\nall\r\n", "ok\nall\n", true},
		{"OpenCode bash: pytest's duration", "duration",
			"============================= 3 passed in 0.41s ==============================",
			"============================= 3 passed in 1.07s ==============================", true},
		{"OpenCode bash: another pytest count is substance", "duration",
			"============================= 3 passed in 0.41s ==============================",
			"======================== 2 passed, 1 failed in 0.44s =========================", false},
		{"go test: a duration and the cache", "go test cache",
			"ok  \tgithub.com/acme/dial\t0.014s", "ok  \tgithub.com/acme/dial\t(cached)", true},
		{"unittest and time(1)", "duration",
			"Ran 3 tests in 0.001s\n\nOK\nreal\t0m1.204s", "Ran 3 tests in 0.003s\n\nOK\nreal\t0m0.998s", true},
		{"date(1)", "weekday date", "Thu Nov 27 14:49:28 UTC 2026", "Thu Nov 27 14:50:02 UTC 2026", true},
		{"an HTTP date header", "weekday date",
			"HTTP/1.1 200 OK\nDate: Thu, 27 Nov 2026 14:49:28 GMT", "HTTP/1.1 200 OK\nDate: Fri, 28 Nov 2026 09:01:55 GMT", true},
		{"ISO timestamps in a log", "ISO timestamp",
			"2026-11-27T14:49:28.120Z INFO ready", "2026-11-27T14:51:03.377Z INFO ready", true},
		{"an ISO date", "ISO date", "report of 2026-11-27: 3 open", "report of 2026-11-28: 3 open", true},
		{"a clock time", "clock time", "[14:49:28] compiled", "[14:50:11] compiled", true},
		{"a unix time", "unix time", `{"created": 1764254968, "ok": true}`, `{"created": 1764255012, "ok": true}`, true},
		{"pip's transfer rate and estimate", "transfer rate",
			"Downloading numpy-2.1.3.tar.gz (20.3 MB)\n   ━━━━━━━━━━━━━━━━━━━━━━━━ 20.3/20.3 MB 41.3 MB/s eta 0:00:00",
			"Downloading numpy-2.1.3.tar.gz (20.3 MB)\n   ━━━━━━━━━━━━━━━━━━━━━━━━ 20.3/20.3 MB 12.0 MB/s eta 0:00:01", true},
		{"an estimate left", "clock time", "copying 3 files, eta 0:01:10", "copying 3 files, eta 0:00:42", true},
		{"a progress bar with its percentage", "progress bar", "[=====>    ] 55% fetching", "[=======>  ] 71% fetching", true},
		{"a percentage outside a bar is substance", "progress bar", "coverage: 81%", "coverage: 84%", false},
		{"macOS's temporary folder", "temporary folder",
			"wrote /var/folders/qz/4k1s_r2x0b/T/build-a1/out.o", "wrote /var/folders/qz/4k1s_r2x0b/T/build-b7/out.o", true},
		{"Python's tempfile", "temporary name",
			`File "/tmp/tmpk3j2_9xq/test_dial.py", line 4`, `File "/tmp/tmpa81bc0de/test_dial.py", line 4`, true},
		{"go test's temporary directory", "temporary name",
			"open /tmp/TestDial1234567890/001/cfg: no such file", "open /tmp/TestDial9876543210/001/cfg: no such file", true},
		{"a UUID", "UUID", "request_id=7c9e6679-7425-40de-944b-e07fc1f5b5c9 status=ok", "request_id=16fd2706-8baf-433b-82eb-8c7fada847da status=ok", true},
		{"a memory address in a repr", "address",
			"<dial.Client object at 0x7f3b2c1d0e50>", "<dial.Client object at 0x7f91aa04c2b0>", true},
		{"a long hex id", "hex id", "container 4f2a9c1be07d33a18c0e5f6d7a8b9c0d started", "container 9e1f0a2b3c4d5e6f7a8b9c0d1e2f3a4b started", true},
		{"a short hash is substance", "hex id", "HEAD is now at 3f2a1b4 fix dial", "HEAD is now at 9c0e5f6 fix dial", false},
		{"terminal", "terminal", "a  \nb\t\n\n", "a\nb", true},
		{"SWE-agent: the open file is substance", "terminal",
			"(Open file: /repo/dial.py)\n(Current directory: /repo)\nbash-$", "(Open file: /repo/client.py)\n(Current directory: /repo)\nbash-$", false},
		{"mini-swe-agent: another return code is substance", "terminal",
			"<returncode>0</returncode>\n<output>\n</output>", "<returncode>1</returncode>\n<output>\n</output>", false},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.rule] = true
		t.Run(tt.name, func(t *testing.T) {
			a, b := NormaliseResult(tt.a), NormaliseResult(tt.b)
			if got := a == b; got != tt.same {
				t.Errorf("same: got %v, want %v\n%q\n%q", got, tt.same, a, b)
			}
		})
	}
	var rules []string
	for _, r := range lineRules {
		rules = append(rules, r.name)
	}
	for _, r := range wordRules {
		rules = append(rules, r.name)
	}
	for _, name := range rules {
		if !covered[name] {
			t.Errorf("rule %q has no test from a tool's output", name)
		}
	}
}

// TestNormaliseResultKeepsText checks that text with no stamp comes back
// as it was, but for the white space around it.
func TestNormaliseResultKeepsText(t *testing.T) {
	for _, s := range []string{
		"def dial(addr):\n    return connect(addr, timeout=5)",
		"Wrong flag!\n(Open file: n/a)\n(Current directory: /ctf)\nbash-$",
		"[... 812 characters cut; sha256 3f2a1b4c5d6e]",
		"3 passed, 1 skipped",
	} {
		if got := NormaliseResult(s); got != strings.TrimSpace(s) {
			t.Errorf("NormaliseResult(%q) = %q, want it unchanged", s, got)
		}
	}
}

func BenchmarkNormaliseResult(b *testing.B) {
	out := strings.Repeat("ok  \tgithub.com/acme/dial\t0.014s\n=== RUN   TestDial\n--- PASS: TestDial (0.00s)\n", 12)
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		NormaliseResult(out)
	}
}
