package tools

import (
	"strings"
	"unicode/utf8"
)

// failure reads a tool result as a failure: ok reports whether it is one,
// and line is the line that says what went wrong, for a notice. It knows
// the exit status agents put on a shell result (mini-swe-agent's
// <returncode>, Codex's "Process exited with code", Qwen Code's "Exit
// Code:", Claude Code's "Exit code") and the first line of an error
// (Error…, Traceback…, fatal:, panic:, a command not found).
func failure(result string) (line string, ok bool) {
	status, body, known := exitStatus(result)
	if known {
		if status == "0" {
			return "", false
		}
		return firstLine(body), true
	}
	first := firstLine(result)
	for _, p := range []string{"Error", "ERROR", "error:", "error[", "Traceback (most recent call last)", "fatal:", "Fatal error", "panic:", "Exception", "<tool_use_error>"} {
		if strings.HasPrefix(first, p) {
			return first, true
		}
	}
	if strings.HasSuffix(first, ": command not found") || strings.HasSuffix(first, ": No such file or directory") {
		return first, true
	}
	return "", false
}

// exitStatus finds the exit status an agent wrote on a shell result, and
// the output that goes with it.
func exitStatus(result string) (status, body string, ok bool) {
	if rest, found := strings.CutPrefix(strings.TrimSpace(result), "<returncode>"); found {
		status, body, _ = strings.Cut(rest, "</returncode>")
		body = strings.TrimPrefix(strings.TrimSpace(body), "<output>")
		return strings.TrimSpace(status), body, true
	}
	for _, label := range []string{"Process exited with code ", "Exit Code: ", "Exit code: ", "Exit code "} {
		i := strings.Index(result, label)
		if i < 0 || i > 0 && result[i-1] != '\n' {
			continue
		}
		rest := result[i+len(label):]
		end := strings.IndexAny(rest, "\n \t")
		if end < 0 {
			end = len(rest)
		}
		if digits(strings.TrimPrefix(rest[:end], "-")) {
			body := rest[end:]
			if _, out, found := strings.Cut(result, "Output:"); found {
				body = out
			} else if _, out, found := strings.Cut(result, "Error: "); found && !strings.HasPrefix(out, "(none)") {
				body = out
			}
			return rest[:end], body, true
		}
	}
	return "", "", false
}

// firstLine is the first line of s with text, cut to 200 bytes.
func firstLine(s string) string {
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if line == "" || line == "<output>" || line == "</output>" {
			continue
		}
		const most = 200
		if len(line) > most {
			cut := most
			for cut > 0 && !utf8.RuneStart(line[cut]) {
				cut--
			}
			line = line[:cut] + "…"
		}
		return line
	}
	return ""
}

// failingStreak is the run of failures of one tool that ends the turn:
// the tool, how many calls in a row failed with the same error (as an
// agent reads it), and the line of the last one that says what went
// wrong.
type failingStreak struct {
	tool  string
	calls int
	line  string
}

// failingStreakOf reads the turn's trailing run of failures.
func (p *progress) failingStreakOf() failingStreak {
	n := len(p.l.executed)
	if n == 0 {
		return failingStreak{}
	}
	last := p.l.executed[n-1]
	line, ok := failure(last.Result)
	if !ok {
		return failingStreak{}
	}
	s := failingStreak{tool: last.Call.Function.Name, calls: 1, line: line}
	for k := n - 2; k >= 0; k-- {
		e := p.l.executed[k]
		if e.Call.Function.Name != s.tool || !p.sameResult(k, n-1) {
			break
		}
		s.calls++
	}
	return s
}
