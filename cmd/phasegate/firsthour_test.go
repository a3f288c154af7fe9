//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runBinary runs the test binary as the gateway's main with args and only
// the environment e, and returns what it wrote and its exit code. It must
// exit within wait.
func runBinary(t *testing.T, e map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = []string{runMainEnv + "=1"}
	for k, v := range e {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
		code = ee.ExitCode()
	default:
		t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", args, err, out.String(), errOut.String())
	}
	return out.String(), errOut.String(), code
}

// TestHealthcheckReadsAddrAsGateway: the healthcheck finds the gateway at
// every LISTEN_ADDR the gateway itself accepts, a port alone included,
// and at PORT when LISTEN_ADDR is unset; a LISTEN_ADDR the gateway would
// refuse is refused with the gateway's own words.
func TestHealthcheckReadsAddrAsGateway(t *testing.T) {
	t.Parallel()
	g := start(t, nil, nil)
	_, port, _ := net.SplitHostPort(g.addr)
	for _, e := range []map[string]string{
		{"LISTEN_ADDR": port},
		{"LISTEN_ADDR": " " + port + " "},
		{"LISTEN_ADDR": "0.0.0.0:" + port},
		{"PORT": port},
	} {
		_, stderr, code := runBinary(t, e, "healthcheck")
		if code != 0 {
			t.Errorf("healthcheck with %v: exit %d, want 0 (the gateway is ready):\n%s", e, code, stderr)
		}
	}
	_, stderr, code := runBinary(t, map[string]string{"LISTEN_ADDR": "80x"}, "healthcheck")
	if code != 1 || !strings.Contains(stderr, "LISTEN_ADDR=80x: must be host:port or a port alone") {
		t.Errorf("healthcheck with LISTEN_ADDR=80x: exit %d, stderr %q; want 1 and the gateway's rule", code, stderr)
	}
}

// TestHealthcheckHelp: the top-level help lists the healthcheck, and the
// healthcheck's own help is phasegate's, on stdout, exit 0, its flags
// spelt --name as the main help spells them.
func TestHealthcheckHelp(t *testing.T) {
	t.Parallel()
	stdout, _, code := runBinary(t, nil, "--help")
	if code != 0 || !strings.Contains(stdout, "phasegate healthcheck") {
		t.Errorf("phasegate --help: exit %d, does not list the healthcheck:\n%s", code, stdout)
	}
	for _, args := range [][]string{{"healthcheck", "--help"}, {"help", "healthcheck"}} {
		stdout, stderr, code := runBinary(t, nil, args...)
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "phasegate healthcheck: ") ||
			!strings.Contains(stdout, "\n  --url string\n") || !strings.Contains(stdout, "\n  --timeout duration\n") ||
			strings.Contains(stdout, "\n  -url") || !strings.Contains(stdout, "LISTEN_ADDR") {
			t.Errorf("phasegate %s: exit %d, stderr %q, stdout:\n%s", strings.Join(args, " "), code, stderr, stdout)
		}
	}
	_, stderr, code := runBinary(t, nil, "healthcheck", "--bogus")
	if code != 1 || !strings.Contains(stderr, "phasegate healthcheck --help") || strings.Contains(stderr, "Usage of") {
		t.Errorf("healthcheck --bogus: exit %d, stderr %q", code, stderr)
	}
}

// TestConfigSyntaxErrorLines: a config file that is not YAML is reported
// at the line (and column) of the fault, tabs included, by the real
// binary.
func TestConfigSyntaxErrorLines(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, yaml, want string }{
		{"flow list left open on line 2", "log_level: info\nmax_phase_cycles: [1\n", ":2:19: not valid YAML"},
		{"list item among keys on line 2", "log_level: info\n- show_notices\n", ":2:1: not valid YAML"},
		{"tab indenting line 2", "log_level: info\n\tmax_phase_cycles: 3\n", ":2:1: not valid YAML"},
		{"tab on line 1", "\tlog_level: info\n", ":1:"},
		{"unclosed quote on line 3", "log_level: info\nshow_notices: true\nplan_tools: 'read_file\n", ":3:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, tt.yaml)
			_, stderr, code := runBinary(t, map[string]string{"CONFIG": path})
			if code != 1 || !strings.Contains(stderr, "phasegate: "+path+tt.want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr, path+tt.want)
			}
			if strings.Contains(tt.yaml, "\t") && !strings.Contains(stderr, "tab") {
				t.Errorf("the error does not say the tab is at fault: %q", stderr)
			}
		})
	}
}

// TestConfigYAMLLists: a list setting is accepted as a YAML list, flow
// or block, as the comma-separated string it is in the environment; a
// scalar setting written as a list and a list item that is not one name
// are refused at their line, saying how to write them.
func TestConfigYAMLLists(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "repeatable_tools: [run_tests, git_status]\nplan_tools:\n  - read_file\n  - list_dir\nmodel_fallbacks: [deepseek-v4-pro=deepseek-v4-flash]\n")
	o, err := parseOptions(serveCommand, nil, env(map[string]string{"CONFIG": path}), io.Discard)
	if err != nil {
		t.Fatalf("parseOptions: %v", err)
	}
	if strings.Join(o.RepeatableTools, ",") != "run_tests,git_status" || strings.Join(o.PlanTools, ",") != "read_file,list_dir" ||
		len(o.Proxy.Fallbacks) != 1 || o.Proxy.Fallbacks[0].Model != "deepseek-v4-flash" {
		t.Errorf("repeatable %q, plan %q, fallbacks %+v", o.RepeatableTools, o.PlanTools, o.Proxy.Fallbacks)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"log_level: info\nmax_phase_cycles: [1, 2]\n", ":2: max_phase_cycles must be a single value"},
		{"repeatable_tools:\n  - run_tests\n  - [a, b]\n", ":3: repeatable_tools: each item of the list must be one name, such as repeatable_tools: [a, b]"},
		{"plan_tools: [\"a,b\"]\n", ":1: plan_tools: each item"},
	} {
		path := writeFile(t, tt.yaml)
		_, err := parseOptions(serveCommand, nil, env(map[string]string{"CONFIG": path}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), path+tt.want) {
			t.Errorf("%q: error %v, want %q", tt.yaml, err, path+tt.want)
		}
	}
}

// TestStrayVariables: the real binary warns about each variable that
// looks like a misspelt setting, naming the nearest one and never the
// value, leaves other programs' variables alone, and logs the budgets it
// runs with (the misspelt one changed nothing).
func TestStrayVariables(t *testing.T) {
	t.Parallel()
	c := startProcess(t, map[string]string{
		"MAX_PHASE_CYCLE":        "5",
		"rate_limit_key_rpm":     "60",
		"PHASEGATE_API_KEY":      "sk-stray-SECRET-0004",
		"OPENAI_ORGANIZATION":    "org-1",
		"LOG_FORMAT":             "json",
		"MAX_DUPLICATE_ATTEMPTS": "2",
	})
	deadline := time.Now().Add(wait)
	for !strings.Contains(c.log(), `"guard budgets"`) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	log := c.log()
	warned := map[string]string{}
	var budgets map[string]any
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if name, ok := rec["name"].(string); ok && rec["level"] == "WARN" {
			warned[name], _ = rec["did_you_mean"].(string)
		}
		if rec["msg"] == "guard budgets" {
			budgets = rec
		}
	}
	for name, want := range map[string]string{"MAX_PHASE_CYCLE": "MAX_PHASE_CYCLES", "rate_limit_key_rpm": "RATE_LIMIT_KEY_RPM", "PHASEGATE_API_KEY": "PHASEGATE_API_KEYS"} {
		if got, ok := warned[name]; !ok || got != want {
			t.Errorf("%s: warned %v, suggesting %q; want a warning suggesting %s", name, ok, got, want)
		}
	}
	for _, name := range []string{"OPENAI_ORGANIZATION", "LOG_FORMAT", "MAX_DUPLICATE_ATTEMPTS"} {
		if _, ok := warned[name]; ok {
			t.Errorf("%s was warned about: it is another program's, or a setting", name)
		}
	}
	if strings.Contains(log, "sk-stray-SECRET") {
		t.Errorf("a stray variable's value reached the log:\n%s", log)
	}
	if budgets["max_phase_cycles"] != float64(3) || budgets["max_duplicate_attempts"] != float64(2) {
		t.Errorf("budgets logged %v; want max_phase_cycles 3 (the misspelt variable is ignored) and max_duplicate_attempts 2\n%s", budgets, log)
	}
}

// TestListenAddrInUse: an address another process holds is reported by
// the real binary naming the setting that gave it, LISTEN_ADDR or PORT.
func TestListenAddrInUse(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, port, _ := net.SplitHostPort(busy.Addr().String())
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"LISTEN_ADDR": busy.Addr().String()}, "LISTEN_ADDR=" + busy.Addr().String() + ": cannot listen, the address is already in use"},
		{map[string]string{"PORT": port}, "PORT=" + port + ": cannot listen, the address is already in use"},
	} {
		_, stderr, code := runBinary(t, tt.env)
		if code != 1 || !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "set LISTEN_ADDR or PORT") {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", tt.env, code, stderr, tt.want)
		}
	}
}

// TestVersionStamped: a binary built with the version and commit stamped
// as the Dockerfile and `make release` stamp them prints them.
func TestVersionStamped(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "phasegate")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, gobin, "build", "-ldflags", "-X main.stampVersion=v9.8.7 -X main.stampCommit=0123abc", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		t.Fatalf("--version: %v", err)
	}
	if !strings.HasPrefix(string(out), "phasegate v9.8.7, commit 0123abc, built with go") {
		t.Errorf("--version = %q", out)
	}
}
