package tools

import "strings"

// A command that printed nothing still returns a result: the frame its
// agent puts around every output (Qwen Code's "Directory:" and "Exit
// Code:" lines, Codex's "Process exited with code", mini-swe-agent's
// <returncode>) with nothing in it. The progress rule reads such a
// silent result and a run of the same command just before or after it
// that printed something, with nothing new between them, as one result:
// a shell that loses the output of a fast command (Qwen Code's does under
// load: "Output: (empty)" for a wc -l that counts 5 lines a moment before
// or after) must not make a loop look like progress. A silent result in
// another frame (another exit code, another signal) is still substance,
// and so is an output after something new came back (a file listed empty,
// a build, the file listed again).

// lineKind is what a line of a normalised result is to silentFrame.
type lineKind uint8

const (
	// lineOutput is what the command printed.
	lineOutput lineKind = iota
	// lineFrame is a line of the agent's frame: compared, but no output.
	lineFrame
	// lineNoOutput is the frame's way of saying the output was empty.
	lineNoOutput
)

// frameRule recognises the lines of one tool's frame.
type frameRule struct {
	name  string
	kind  lineKind
	match func(line string) bool
}

// frameRules are the frames of the agents whose results the guard reads,
// each with a test from the agent's real output in silence_test.go.
var frameRules = []frameRule{
	// Qwen Code's run_shell_command: "Command: …" (dropped by
	// NormaliseResult), "Directory: …", "Output: …", "Error: …", "Exit
	// Code: …", "Signal: …", "Background PIDs: …", "Process Group PGID: …".
	{"Qwen Code empty output", lineNoOutput, equal("Output: (empty)")},
	// An error it names is output.
	{"Qwen Code frame", lineFrame, anyPrefix("Directory: ", "Error: (none)", "Exit Code: ", "Signal: ", "Background PIDs: ", "Process Group PGID: ")},
	// Codex's exec_command: "Process exited with code N", then "Output:"
	// on a line of its own and the output after it.
	{"Codex exit code", lineFrame, anyPrefix("Process exited with code ")},
	{"Codex output label", lineNoOutput, equal("Output:")},
	// mini-swe-agent: "<returncode>N</returncode>", then the output
	// between <output> and </output>.
	{"mini-swe-agent return code", lineFrame, func(l string) bool {
		return strings.HasPrefix(l, "<returncode>") && strings.HasSuffix(l, "</returncode>")
	}},
	{"mini-swe-agent output tags", lineNoOutput, equal("<output>", "</output>")},
	// SWE-agent: its sentence for no output, and the prompt it appends to
	// every observation.
	{"SWE-agent no output", lineNoOutput, equal("Your command ran successfully and did not produce any output.")},
	{"SWE-agent prompt", lineFrame, func(l string) bool {
		return l == "bash-$" || strings.HasPrefix(l, "(Open file: ") || strings.HasPrefix(l, "(Current directory: ")
	}},
}

func equal(lines ...string) func(string) bool {
	return func(l string) bool {
		for _, s := range lines {
			if l == s {
				return true
			}
		}
		return false
	}
}

func anyPrefix(prefixes ...string) func(string) bool {
	return func(l string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				return true
			}
		}
		return false
	}
}

// kindOf classifies one line of a normalised result.
func kindOf(line string) lineKind {
	for _, r := range frameRules {
		if r.match(line) {
			return r.kind
		}
	}
	return lineOutput
}

// silentFrame reads a normalised result (NormaliseResult's): its frame,
// the lines of the agent's frame in order, and whether it holds no
// output at all (an empty result is silent, with an empty frame).
func silentFrame(norm string) (frame string, silent bool) {
	var b strings.Builder
	silent = true
	for line := range strings.Lines(norm) {
		line = strings.TrimSuffix(line, "\n")
		switch kindOf(line) {
		case lineOutput:
			if line != "" {
				silent = false
			}
		case lineFrame:
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String(), silent
}
