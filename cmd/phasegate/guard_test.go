package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestStartLogsGuardInForce: the start log says the guard a request meets,
// mode, profile and every rule of the config file, in the order they are
// tried.
func TestStartLogsGuardInForce(t *testing.T) {
	file := writeFile(t, `guard_mode: observe
guard_profile: agent
guard:
  models:
    deepseek-*: agent
    gpt-*: strict
  modes:
    gpt-*: observe
    deepseek-reasoner: enforce
  projects:
    search: observe
    payments: enforce
`)
	o, err := parseOptions(serveCommand, []string{"--config", file}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	logStart(slog.New(slog.NewJSONHandler(&out, nil)), o, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080})
	var got map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == "guard in force" {
			got = rec
		}
	}
	want := map[string]any{
		"two_stage": true, "guard_mode": "observe", "guard_profile": "agent",
		"project_modes":  []any{"payments=enforce", "search=observe"},
		"model_modes":    []any{"gpt-*=observe", "deepseek-reasoner=enforce"},
		"model_profiles": []any{"deepseek-*=agent", "gpt-*=strict"},
	}
	for k, v := range want {
		if diff := cmp.Diff(v, got[k]); diff != "" {
			t.Errorf("%s (-want +got):\n%s\nlog:\n%s", k, diff, out.String())
		}
	}
	d, err := parseOptions(serveCommand, nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := effectiveGuard(d).text(""), "guard_mode=enforce (a request no rule below names)\n"+
		"guard_profile=strict (a model no rule below names)\nper project, mode: none\nper model, mode: none\nper model, profile: none\n"; got != want {
		t.Errorf("the default guard reads\n%s\nwant\n%s", got, want)
	}
}

// TestDemoHelpListsWhatItReads: phasegate demo --help lists the settings
// the demo reads and no other; a flag of the gateway's it ignores is an
// unknown flag to it, and no config file is read.
func TestDemoHelpListsWhatItReads(t *testing.T) {
	var stdout strings.Builder
	if _, err := parseOptions(demoCommand, []string{"--help"}, env(nil), &stdout); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("demo --help = %v, want flag.ErrHelp", err)
	}
	help := stdout.String()
	var listed []string
	for _, line := range strings.Split(help, "\n") {
		if name, ok := strings.CutPrefix(line, "  --"); ok {
			listed = append(listed, strings.Fields(name)[0])
		}
	}
	want := []string{"version"}
	for _, s := range demoCommand.reads {
		want = append(want, s.Flag())
	}
	if diff := cmp.Diff(want, listed); diff != "" {
		t.Errorf("demo --help lists (-want +got):\n%s\n%s", diff, help)
	}
	if strings.Contains(help, "file key") {
		t.Errorf("demo --help names config file keys, and the demo reads no file:\n%s", help)
	}
	for _, args := range [][]string{{"--listen-addr=:9999"}, {"--guard-mode=observe"}, {"--config=x.yaml"}} {
		if _, err := parseOptions(demoCommand, args, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "unknown flag") {
			t.Errorf("demo %v: %v, want an unknown flag", args, err)
		}
	}
	read := demoEnv(env(map[string]string{"MAX_PHASE_CYCLES": "9", "GUARD_MODE": "observe", "REDIS_URL": "redis://h:1/0", "CONFIG": "x.yaml", "DEEPSEEK_API_KEY": "sk-x"}))
	for name, want := range map[string]string{"MAX_PHASE_CYCLES": "9", "GUARD_MODE": "", "REDIS_URL": "", "CONFIG": "", "DEEPSEEK_API_KEY": "", "LISTEN_ADDR": "127.0.0.1:0", "LOG_LEVEL": "error"} {
		if got := read(name); got != want {
			t.Errorf("the demo reads %s as %q, want %q", name, got, want)
		}
	}
}
