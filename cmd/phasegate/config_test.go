package main

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/proxy"
)

// Secrets the tests set everywhere a secret can come from; none may ever
// show in help or in an error.
const (
	secretFlag = "sk-flag-SECRET-0001"
	secretEnv  = "sk-env-SECRET-0002"
	secretFile = "sk-file-SECRET-0003"
)

var secrets = []string{secretFlag, secretEnv, secretFile}

// env returns a getenv over m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// writeFile writes a config file in the test's temporary directory.
func writeFile(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "phasegate.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPrecedence checks flag over environment over file over default, for
// settings of each kind.
func TestPrecedence(t *testing.T) {
	file := "max_phase_cycles: 4\nupstream_idle_timeout: 4s\nlisten_addr: 127.0.0.1:4\nlog_level: warn\n"
	tests := []struct {
		name    string
		file    bool
		env     map[string]string
		args    []string
		cycles  int
		idle    time.Duration
		listen  string
		logging string
	}{
		{name: "defaults", cycles: 3, idle: 2 * time.Minute, listen: ":8080", logging: "info"},
		{name: "file over default", file: true, cycles: 4, idle: 4 * time.Second, listen: "127.0.0.1:4", logging: "warn"},
		{name: "environment over file", file: true,
			env:    map[string]string{"MAX_PHASE_CYCLES": "5", "UPSTREAM_IDLE_TIMEOUT": "5s", "LISTEN_ADDR": "127.0.0.1:5"},
			cycles: 5, idle: 5 * time.Second, listen: "127.0.0.1:5", logging: "warn"},
		{name: "flag over environment", file: true,
			env:    map[string]string{"MAX_PHASE_CYCLES": "5", "UPSTREAM_IDLE_TIMEOUT": "5s", "LISTEN_ADDR": "127.0.0.1:5", "LOG_LEVEL": "error"},
			args:   []string{"--max-phase-cycles", "6", "--upstream-idle-timeout=6s", "-listen-addr", "127.0.0.1:6"},
			cycles: 6, idle: 6 * time.Second, listen: "127.0.0.1:6", logging: "error"},
		{name: "an empty environment variable is unset", file: true, env: map[string]string{"MAX_PHASE_CYCLES": ""}, cycles: 4, idle: 4 * time.Second, listen: "127.0.0.1:4", logging: "warn"},
		{name: "config file named by the environment", file: true, env: map[string]string{"LOG_LEVEL": "debug"}, cycles: 4, idle: 4 * time.Second, listen: "127.0.0.1:4", logging: "debug"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := map[string]string{}
			for k, v := range tt.env {
				e[k] = v
			}
			args := tt.args
			if tt.file {
				path := writeFile(t, file)
				if tt.name == "config file named by the environment" {
					e["CONFIG"] = path
				} else {
					args = append([]string{"--config", path}, args...)
				}
			}
			var stderr strings.Builder
			o, err := parseOptions(args, env(e), &stderr)
			if err != nil {
				t.Fatalf("parseOptions: %v", err)
			}
			got := []any{o.budgets.maxPhaseCycles, o.proxy.Timeouts.Idle, o.listenAddr, o.logLevel}
			want := []any{tt.cycles, tt.idle, tt.listen, tt.logging}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("[cycles idle listen log] (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	o, err := parseOptions(nil, env(nil), &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if o.proxy.Timeouts != proxy.DefaultTimeouts {
		t.Errorf("timeouts = %+v, want %+v", o.proxy.Timeouts, proxy.DefaultTimeouts)
	}
	if o.proxy.MaxBodyBytes != 16<<20 || o.proxy.MaxEventBytes != proxy.DefaultMaxEventBytes {
		t.Errorf("limits = body %d, event %d; want 16 MiB and %d", o.proxy.MaxBodyBytes, o.proxy.MaxEventBytes, proxy.DefaultMaxEventBytes)
	}
	if o.shutdownTimeout != 30*time.Second || o.drainDelay != 5*time.Second {
		t.Errorf("shutdown timeout = %v, drain delay %v; want 30s, 5s", o.shutdownTimeout, o.drainDelay)
	}
	if !o.twoStage || o.defaultProtocol != proxy.ProtocolTwoStage {
		t.Errorf("two-stage = %v, default protocol %q; want on, two-stage", o.twoStage, o.defaultProtocol)
	}
	if want := (budgets{3, 3, 1}); o.budgets != want {
		t.Errorf("budgets = %+v, want %+v", o.budgets, want)
	}
}

func TestProviders(t *testing.T) {
	type provider struct {
		Name, BaseURL, Key string
		Simulated          bool
	}
	tests := []struct {
		name   string
		env    map[string]string
		file   string
		want   []provider
		routes []proxy.Route
	}{
		{name: "none configured: simulated", want: []provider{{Name: "simulated", BaseURL: simBaseURL, Simulated: true}}},
		{name: "a key enables its provider", env: map[string]string{"DEEPSEEK_API_KEY": secretEnv},
			want: []provider{{Name: "deepseek", BaseURL: "https://api.deepseek.com", Key: secretEnv}}},
		{name: "a base URL enables its provider", env: map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},
			want: []provider{{Name: "openai", BaseURL: "http://127.0.0.1:9/v1"}}},
		{name: "both", env: map[string]string{"OPENAI_API_KEY": secretEnv, "DEEPSEEK_BASE_URL": "http://127.0.0.1:8"},
			want: []provider{{Name: "deepseek", BaseURL: "http://127.0.0.1:8"}, {Name: "openai", BaseURL: "https://api.openai.com/v1", Key: secretEnv}}},
		{name: "PROVIDERS picks", env: map[string]string{"PROVIDERS": " openai ", "DEEPSEEK_API_KEY": secretEnv},
			want: []provider{{Name: "openai", BaseURL: "https://api.openai.com/v1"}}},
		{name: "key from the file", file: "deepseek_api_key: " + secretFile + "\n",
			want: []provider{{Name: "deepseek", BaseURL: "https://api.deepseek.com", Key: secretFile}}},
		{name: "routes from the file", file: "openai_base_url: http://127.0.0.1:7/v1\nroutes:\n  - model: qwen-*\n    provider: openai\n",
			want:   []provider{{Name: "openai", BaseURL: "http://127.0.0.1:7/v1"}},
			routes: []proxy.Route{{Pattern: "qwen-*", Provider: "openai"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var args []string
			if tt.file != "" {
				args = []string{"--config", writeFile(t, tt.file)}
			}
			o, err := parseOptions(args, env(tt.env), &strings.Builder{})
			if err != nil {
				t.Fatalf("parseOptions: %v", err)
			}
			var got []provider
			for _, p := range o.proxy.Providers {
				got = append(got, provider{Name: p.Name, BaseURL: p.BaseURL, Key: p.APIKey.Reveal(), Simulated: p.Simulated})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("providers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.routes, o.proxy.Routes); diff != "" {
				t.Errorf("routes (-want +got):\n%s", diff)
			}
			if o.simulated != (tt.want[0].Simulated) {
				t.Errorf("simulated = %v", o.simulated)
			}
		})
	}
}

// TestInvalid checks each bad setting fails parseOptions, whichever way
// it comes, and that no error ever carries a secret.
func TestInvalid(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		file string
		args []string
		// wantIn is a word the error must name: the setting at fault.
		wantIn string
	}{
		{name: "unknown key in the file", file: "max_phase_cycle: 3\n", wantIn: "max_phase_cycle"},
		{name: "unknown nested key in the file", file: "routes:\n  - model: x\n    provider: openai\n    weight: 2\n", wantIn: "weight"},
		{name: "unknown model limit in the file", file: "models:\n  my-model:\n    context_windw: 100\n", wantIn: "context_windw"},
		{name: "file is not a mapping", file: "- a\n- b\n", wantIn: "config file"},
		{name: "a scalar setting given a list", file: "listen_addr: [a, b]\n", wantIn: "listen_addr"},
		{name: "missing config file", args: []string{"--config", "/nonexistent/phasegate.yaml"}, wantIn: "config file"},
		{name: "bad URL", env: map[string]string{"DEEPSEEK_BASE_URL": "ftp://api.deepseek.com"}, wantIn: "deepseek"},
		{name: "URL without host", env: map[string]string{"OPENAI_BASE_URL": "https://"}, wantIn: "openai"},
		{name: "bad URL in the file", file: "openai_base_url: not a url\n", wantIn: "openai"},
		{name: "negative budget", env: map[string]string{"MAX_PHASE_CYCLES": "-1"}, wantIn: "MAX_PHASE_CYCLES"},
		{name: "negative budget by flag", args: []string{"--max-duplicate-attempts=-2"}, wantIn: "MAX_DUPLICATE_ATTEMPTS"},
		{name: "negative budget in the file", file: "max_phase_cycles: -3\n", wantIn: "MAX_PHASE_CYCLES"},
		{name: "zero cycles", env: map[string]string{"MAX_PHASE_CYCLES": "0"}, wantIn: "MAX_PHASE_CYCLES"},
		{name: "budget not a number", env: map[string]string{"MAX_DUPLICATE_ATTEMPTS": "three"}, wantIn: "MAX_DUPLICATE_ATTEMPTS"},
		{name: "more than one tool per phase", env: map[string]string{"MAX_TOOLS_PER_TOOL_PHASE": "2"}, wantIn: "MAX_TOOLS_PER_TOOL_PHASE"},
		{name: "negative body limit", env: map[string]string{"MAX_BODY_BYTES": "-1"}, wantIn: "MAX_BODY_BYTES"},
		{name: "bad duration", env: map[string]string{"UPSTREAM_IDLE_TIMEOUT": "soon"}, wantIn: "UPSTREAM_IDLE_TIMEOUT"},
		{name: "negative duration", args: []string{"--upstream-first-byte-timeout", "-1s"}, wantIn: "UPSTREAM_FIRST_BYTE_TIMEOUT"},
		{name: "negative drain delay", env: map[string]string{"SHUTDOWN_DRAIN_DELAY": "-5s"}, wantIn: "SHUTDOWN_DRAIN_DELAY"},
		{name: "drain delay without a unit in the file", file: "shutdown_drain_delay: 5\n", wantIn: "SHUTDOWN_DRAIN_DELAY"},
		{name: "bad bool", env: map[string]string{"TWO_STAGE_ENABLED": "maybe"}, wantIn: "TWO_STAGE_ENABLED"},
		{name: "bad log level", env: map[string]string{"LOG_LEVEL": "loud"}, wantIn: "LOG_LEVEL"},
		{name: "bad protocol", env: map[string]string{"DEFAULT_PROTOCOL": "fancy"}, wantIn: "DEFAULT_PROTOCOL"},
		{name: "unknown provider", env: map[string]string{"PROVIDERS": "azure"}, wantIn: "azure"},
		{name: "route to an unknown provider", file: "routes:\n  - model: x\n    provider: azure\n", wantIn: "azure"},
		{name: "unknown flag", args: []string{"--max-phase-cycle", "3"}, wantIn: "max-phase-cycle"},
		{name: "stray argument", args: []string{"serve"}, wantIn: "serve"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := map[string]string{"DEEPSEEK_API_KEY": secretEnv}
			for k, v := range tt.env {
				e[k] = v
			}
			args := append([]string{"--openai-api-key", secretFlag}, tt.args...)
			if tt.file != "" {
				args = append([]string{"--config", writeFile(t, "deepseek_api_key: "+secretFile+"\n"+tt.file)}, args...)
			}
			var stderr strings.Builder
			_, err := parseOptions(args, env(e), &stderr)
			if err == nil {
				t.Fatal("parseOptions: got nil error")
			}
			if !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("error %q does not name %q", err, tt.wantIn)
			}
			for _, s := range secrets {
				if strings.Contains(err.Error(), s) || strings.Contains(stderr.String(), s) {
					t.Errorf("secret %q leaked: error %q, stderr %q", s, err, stderr.String())
				}
			}
		})
	}
}

// TestHelp checks --help lists every setting with its environment name
// and shows no secret, wherever the secrets were set.
func TestHelp(t *testing.T) {
	path := writeFile(t, "openai_api_key: "+secretFile+"\n")
	e := env(map[string]string{"DEEPSEEK_API_KEY": secretEnv, "CONFIG": path})
	var stderr strings.Builder
	_, err := parseOptions([]string{"--openai-api-key", secretFlag, "--help"}, e, &stderr)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseOptions(--help) = %v, want flag.ErrHelp", err)
	}
	help := stderr.String()
	for _, s := range secrets {
		if strings.Contains(help, s) {
			t.Errorf("help shows secret %q", s)
		}
	}
	for _, s := range settings {
		if !strings.Contains(help, "-"+s.flag()) || !strings.Contains(help, s.env) {
			t.Errorf("help does not list %s (--%s)", s.env, s.flag())
		}
	}
}
