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
	if !strings.HasPrefix(text, "The guard in this demo:\n  guard_mode=enforce") || !strings.Contains(text, "MAX_PHASE_CYCLES=6 (raised by the demo from 3") {
		t.Errorf("the demo does not start by saying its settings:\n%s", text)
	}
	sections := strings.Split(text, "== with the guard")
	if len(sections) != 8 {
		t.Fatalf("want six scenarios, each with and without the guard, the long session under both profiles; got:\n%s", text)
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
			t.Errorf("guarded run %d did not end in an answer:\n%s", i+1, guarded)
		}
		if strings.Contains(guarded, "tool▁calls▁begin") {
			t.Errorf("guarded run %d showed leaked markers to the client", i+1)
		}
	}
	demoAgentScenarios(t, text)
}

// demoAgentScenarios checks the agent profile's two scenarios: the long
// session answers untouched without the guard and under the agent
// profile and is cut at 3 under the strict default; the cosmetic loop
// never answers without the guard and is stopped within 3 wasted runs
// under the agent profile.
func demoAgentScenarios(t *testing.T, text string) {
	t.Helper()
	scenarios := strings.Split(text, "\n##### ")
	if len(scenarios) != 7 {
		t.Fatalf("want six scenarios; got:\n%s", text)
	}
	runs := func(sc string) map[string]string {
		out := map[string]string{}
		for _, part := range strings.Split(sc, "\n== ")[1:] {
			title, body, _ := strings.Cut(part, " ==\n")
			out[strings.SplitN(title, ":", 2)[0]] = body
		}
		return out
	}
	session := runs(scenarios[5])
	const answered = "done: an answer after 21 request(s) and 20 tool execution(s)."
	for _, route := range []string{"without the guard", "with the guard, GUARD_PROFILE=agent"} {
		if body := session[route]; !strings.Contains(body, answered) || strings.Contains(body, "System Notice") {
			t.Errorf("the long session %s did not run its 20 calls untouched to its answer:\n%s", route, body)
		}
	}
	strict := session["with the guard, strict profile (the default"]
	if !strings.Contains(strict, "tool runs of this turn used up (3 of 3)") || !strings.Contains(strict, "done: an answer after 4 request(s) and 3 tool execution(s).") {
		t.Errorf("the long session under the strict default was not cut at 3:\n%s", strict)
	}
	loop := runs(scenarios[6])
	if body := loop["without the guard"]; !strings.Contains(body, "stopped by the demo after 8 requests and 8 tool executions") {
		t.Errorf("the cosmetic loop without the guard:\n%s", body)
	}
	agent := loop["with the guard, GUARD_PROFILE=agent"]
	// One run does the work; every later one is a wasted verification.
	if wasted := strings.Count(agent, "agent runs execute_code") - 1; wasted > 3 || !strings.Contains(agent, "done: an answer") ||
		!strings.Contains(agent, "its last two runs, the same but for form, gave the same result") {
		t.Errorf("the cosmetic loop under the agent profile was not stopped within 3 wasted runs (%d):\n%s", wasted, agent)
	}
}

// TestDemoIgnoresGuardSettingsFromShell: the demo shows the guard acting
// whatever GUARD_MODE and GUARD_PROFILE say in the shell, and says it
// ignores them: under observe mode its guarded runs would loop like the
// unguarded ones.
func TestDemoIgnoresGuardSettingsFromShell(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	getenv := env(map[string]string{"GUARD_MODE": "observe", "GUARD_PROFILE": "agent", "TWO_STAGE_ENABLED": "false"})
	if err := runDemo(ctx, nil, getenv, &out, io.Discard); err != nil {
		t.Fatalf("runDemo: %v\n%s", err, out.String())
	}
	text := out.String()
	first, _, _ := strings.Cut(text, "\n")
	if want := "Ignored by the demo, which always shows the guard enforcing: GUARD_MODE=observe, GUARD_PROFILE=agent, TWO_STAGE_ENABLED=false"; !strings.HasPrefix(first, want) {
		t.Errorf("the demo's first line is %q, want it to start %q", first, want)
	}
	if !strings.Contains(text, "guard_mode=enforce") || !strings.Contains(text, "guard_profile=strict") {
		t.Errorf("the demo's header does not show the guard enforcing, strict:\n%s", text)
	}
	looping := strings.SplitN(strings.SplitN(text, "== with the guard", 2)[1], "#####", 2)[0]
	if !strings.Contains(looping, "**System Notice**: refused") || strings.Contains(looping, "stopped by the demo") {
		t.Errorf("the looping model's guarded run is not guarded:\n%s", looping)
	}
}
