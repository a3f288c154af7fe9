package replay_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tracesDir is where the trajectories live, relative to the repository
// root (the directory holding go.mod).
const tracesDir = "../shared/traces"

// trajectoryFiles are the data sets, one trajectory per line.
var trajectoryFiles = []string{"tau-airline.jsonl", "mini-swe-agent.jsonl", "swe-agent-demo.jsonl"}

// trajectory is one recorded run in OpenAI chat shape.
type trajectory struct {
	ID      string `json:"id"`
	Dataset string `json:"dataset"`
	Outcome struct {
		Success bool   `json:"success"`
		Status  string `json:"status"`
	} `json:"outcome"`
	Tools    json.RawMessage   `json:"tools"`
	Messages []json.RawMessage `json:"messages"`
	// msgs are the messages read, in the same order.
	msgs []message
}

// message is what the test reads of a recorded message.
type message struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls"`
	ToolCallID string     `json:"tool_call_id"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func (m message) text() string {
	if m.Content == nil {
		return ""
	}
	return *m.Content
}

// repoRoot walks up from the test's directory to the one holding go.mod.
func repoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("no go.mod above the test's directory: cannot find the repository root")
		}
		dir = parent
	}
}

// loadTrajectories reads every trajectory of the data sets. A missing
// directory or file fails the test: the replay is the test of the guard
// on real work, and a run without it must not pass as one with it.
func loadTrajectories(tb testing.TB) []*trajectory {
	tb.Helper()
	dir := filepath.Join(repoRoot(tb), tracesDir)
	if _, err := os.Stat(dir); err != nil {
		tb.Fatalf("the public trajectories are missing: %v\n"+
			"The replay test reads them from %s, beside the repository (see its README.md); "+
			"put the data sets there (%s) and run the test again.", err, tracesDir, strings.Join(trajectoryFiles, ", "))
	}
	var out []*trajectory
	for _, name := range trajectoryFiles {
		ts, err := readFile(filepath.Join(dir, name))
		if err != nil {
			tb.Fatalf("read the trajectories of %s: %v", name, err)
		}
		out = append(out, ts...)
	}
	return out
}

func readFile(path string) ([]*trajectory, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []*trajectory
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for line := 1; sc.Scan(); line++ {
		t := &trajectory{}
		if err := json.Unmarshal(sc.Bytes(), t); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		t.msgs = make([]message, len(t.Messages))
		for i, raw := range t.Messages {
			if err := json.Unmarshal(raw, &t.msgs[i]); err != nil {
				return nil, fmt.Errorf("line %d, message %d: %w", line, i, err)
			}
		}
		out = append(out, t)
	}
	return out, sc.Err()
}

// steps are the indexes of the assistant messages: the turns the
// upstream plays, in order.
func (t *trajectory) steps() []int {
	var out []int
	for i, m := range t.msgs {
		if m.Role == "assistant" {
			out = append(out, i)
		}
	}
	return out
}
