package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// TestDemo runs the demo and checks the story it tells: without the guard
// the looping and test-rerun agents never answer and the leaked call is
// shown as text; with it, each scenario ends in an answer.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	// The user's gateway address: the demo ignores it for its own, and
	// names it in its last line.
	getenv := env(map[string]string{"LISTEN_ADDR": "0.0.0.0:9191"})
	if err := runDemo(ctx, nil, getenv, &out, io.Discard); err != nil {
		t.Fatalf("runDemo: %v\n%s", err, out.String())
	}
	text := out.String()
	if !strings.HasPrefix(text, "Settings of the guard in this demo") || !strings.Contains(text, "MAX_PHASE_CYCLES=6 (raised by the demo from 3") {
		t.Errorf("the demo does not start by saying its settings:\n%s", text)
	}
	sections := strings.Split(text, "== with the guard")
	if len(sections) != 5 {
		t.Fatalf("want four scenarios, each with and without the guard; got:\n%s", text)
	}
	for _, want := range []string{
		"stopped by the demo after 6 requests",                       // looping, without the guard
		"agent runs get_weather {\"city\":\"example\"}",              // a call forwarded
		"**System Notice**: refused \"get_weather\": it already ran", // the guard's refusal, one line
		"<｜tool▁calls▁begin｜>",                                       // the leak, shown raw without the guard
		"its last two identical runs gave the same result",           // the test-rerun loop stopped
		"Final answer (simulated): one test still fails after my",    // ... with an answer
		`"estimated_complexity": "huge"`,                             // the broken envelope, shown without the guard
		"**System Notice**: The orchestrator envelope could not be used (missing required field data.recommended_splits)",
		`"recommended_splits": 3`, // ... and the envelope the guard asked again for
	} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	// The envelope asked again: the text before it is read once.
	if got := strings.Count(sections[4], "says: I explored the codebase."); got != 1 {
		t.Errorf("scenario 4 with the guard shows the text before the envelope %d times, want once:\n%s", got, sections[4])
	}
	// The last line: the command a go run user has, and the address the
	// environment gives the gateway.
	last := text[strings.LastIndex(strings.TrimRight(text, "\n"), "\n")+1:]
	if want := "To keep a gateway up, run `go run ./cmd/phasegate`; then point your own client at http://127.0.0.1:9191/v1"; !strings.HasPrefix(last, want) {
		t.Errorf("the demo's last line is %q, want it to start %q", last, want)
	}
	// Every guarded run ends in an answer.
	for i, s := range sections[1:] {
		guarded := strings.SplitN(s, "##### ", 2)[0]
		if !strings.Contains(guarded, "done: an answer") {
			t.Errorf("scenario %d with the guard did not end in an answer:\n%s", i+1, guarded)
		}
		if strings.Contains(guarded, "tool▁calls▁begin") {
			t.Errorf("scenario %d with the guard showed leaked markers to the client", i+1)
		}
	}
}
