package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/settings"
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
			o, err := parseOptions(serveCommand, args, env(e), &stderr)
			if err != nil {
				t.Fatalf("parseOptions: %v", err)
			}
			got := []any{o.MaxPhaseCycles, o.Proxy.Timeouts.Idle, o.ListenAddr, o.LogLevel}
			want := []any{tt.cycles, tt.idle, tt.listen, tt.logging}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("[cycles idle listen log] (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	o, err := parseOptions(serveCommand, nil, env(nil), &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if o.Proxy.Timeouts != proxy.DefaultTimeouts() {
		t.Errorf("timeouts = %+v, want %+v", o.Proxy.Timeouts, proxy.DefaultTimeouts())
	}
	if o.Proxy.MaxBodyBytes != 16<<20 || o.Proxy.MaxEventBytes != proxy.DefaultMaxEventBytes {
		t.Errorf("limits = body %d, event %d; want 16 MiB and %d", o.Proxy.MaxBodyBytes, o.Proxy.MaxEventBytes, proxy.DefaultMaxEventBytes)
	}
	if o.ShutdownTimeout != 30*time.Second || o.DrainDelay != 5*time.Second {
		t.Errorf("shutdown timeout = %v, drain delay %v; want 30s, 5s", o.ShutdownTimeout, o.DrainDelay)
	}
	if !o.TwoStage || o.DefaultProtocol != proxy.ProtocolTwoStage {
		t.Errorf("two-stage = %v, default protocol %q; want on, two-stage", o.TwoStage, o.DefaultProtocol)
	}
	if got, want := [3]int{o.MaxPhaseCycles, o.MaxDuplicateAttempts, o.AgentMaxPhaseCycles}, [3]int{3, 3, 60}; got != want {
		t.Errorf("budgets = %v, want %v", got, want)
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
			o, err := parseOptions(serveCommand, args, env(tt.env), &strings.Builder{})
			if err != nil {
				t.Fatalf("parseOptions: %v", err)
			}
			var got []provider
			for _, p := range o.Proxy.Providers {
				got = append(got, provider{Name: p.Name, BaseURL: p.BaseURL, Key: p.APIKey.Reveal(), Simulated: p.Simulated})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("providers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.routes, o.Proxy.Routes); diff != "" {
				t.Errorf("routes (-want +got):\n%s", diff)
			}
			if o.Simulated != (tt.want[0].Simulated) {
				t.Errorf("simulated = %v", o.Simulated)
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
		{name: "unknown key in the file", file: "max_phase_cycle: 3\n", wantIn: ":2: unknown key max_phase_cycle; did you mean max_phase_cycles?"},
		{name: "environment name in the file", file: "SHOW_NOTICES: false\n", wantIn: ":2: unknown key SHOW_NOTICES; did you mean show_notices?"},
		{name: "unknown nested key in the file", file: "routes:\n  - model: x\n    provider: openai\n    weight: 2\n", wantIn: ":5: routes[0]: unknown key weight"},
		{name: "unknown model limit in the file", file: "models:\n  my-model:\n    context_windw: 100\n", wantIn: ":4: models: my-model: unknown key context_windw; did you mean context_window?"},
		{name: "bad model limit in the file", file: "models:\n  my-model:\n    safety_margin: 2\n", wantIn: ":4: models: my-model: safety_margin: 2: must be a fraction"},
		{name: "file is not YAML", file: "- a\n- b\n", wantIn: ":2:1: not valid YAML: non-map value is specified"},
		{name: "a scalar setting given a list", file: "listen_addr: [a, b]\n", wantIn: ":2: listen_addr must be a single value"},
		{name: "a key set twice", file: "log_level: warn\nlog_level: info\n", wantIn: ":3: log_level is set twice (first on line 2)"},
		{name: "missing config file", args: []string{"--config", "/nonexistent/phasegate.yaml"}, wantIn: "config file"},
		{name: "bad URL", env: map[string]string{"DEEPSEEK_BASE_URL": "ftp://api.deepseek.com"}, wantIn: "DEEPSEEK_BASE_URL=ftp://api.deepseek.com: must be an http:// or https:// URL"},
		{name: "not a URL", env: map[string]string{"DEEPSEEK_BASE_URL": "notaurl"}, wantIn: "DEEPSEEK_BASE_URL=notaurl: must be an http:// or https:// URL"},
		{name: "URL without host", env: map[string]string{"OPENAI_BASE_URL": "https://"}, wantIn: "OPENAI_BASE_URL=https://: must be"},
		{name: "bad URL in the file", file: "openai_base_url: not a url\n", wantIn: `:2: openai_base_url: "not a url": must be an http:// or https:// URL`},
		{name: "bad guard mode", env: map[string]string{"GUARD_MODE": "watch"}, wantIn: "GUARD_MODE=watch: must be enforce or observe"},
		{name: "bad hosted tools", env: map[string]string{"HOSTED_TOOLS": "keep"}, wantIn: "HOSTED_TOOLS=keep: must be drop or refuse"},
		{name: "bad guard mode of a model", file: "guard:\n  modes:\n    gpt-*: audit\n", wantIn: `:4: guard: modes: gpt-*: audit: must be enforce or observe`},
		{name: "bad guard mode of a project", file: "guard:\n  projects:\n    payments: [enforce]\n", wantIn: `:4: guard: projects: payments: [enforce]: must be enforce or observe`},
		{name: "guard projects as a list", file: "guard:\n  projects: [payments]\n", wantIn: ":3: guard: projects must be a mapping of project names to enforce or observe"},
		{name: "unknown guard key", file: "guard:\n  mode: observe\n", wantIn: ":3: guard: unknown key mode; did you mean modes?"},
		{name: "negative budget", env: map[string]string{"MAX_PHASE_CYCLES": "-1"}, wantIn: "MAX_PHASE_CYCLES=-1: must be a whole number of 1 or more"},
		{name: "negative budget by flag", args: []string{"--max-duplicate-attempts=-2"}, wantIn: "--max-duplicate-attempts=-2: must be a whole number of 1 or more"},
		{name: "negative budget in the file", file: "max_phase_cycles: -3\n", wantIn: ":2: max_phase_cycles: -3: must be a whole number of 1 or more"},
		{name: "zero cycles", env: map[string]string{"MAX_PHASE_CYCLES": "0"}, wantIn: "MAX_PHASE_CYCLES=0: must be a whole number of 1 or more"},
		{name: "budget not a number", env: map[string]string{"MAX_DUPLICATE_ATTEMPTS": "three"}, wantIn: "MAX_DUPLICATE_ATTEMPTS=three: must be a whole number"},
		{name: "more than one tool per phase", env: map[string]string{"MAX_TOOLS_PER_TOOL_PHASE": "2"}, wantIn: "MAX_TOOLS_PER_TOOL_PHASE=2: must be 1"},
		{name: "negative body limit", env: map[string]string{"MAX_BODY_BYTES": "-1"}, wantIn: "MAX_BODY_BYTES=-1: must be"},
		{name: "bad duration", env: map[string]string{"UPSTREAM_IDLE_TIMEOUT": "soon"}, wantIn: "UPSTREAM_IDLE_TIMEOUT=soon: must be a duration"},
		{name: "negative duration", args: []string{"--upstream-first-byte-timeout", "-1s"}, wantIn: "--upstream-first-byte-timeout=-1s: must be a duration of 0 or more"},
		{name: "negative drain delay", env: map[string]string{"SHUTDOWN_DRAIN_DELAY": "-5s"}, wantIn: "SHUTDOWN_DRAIN_DELAY=-5s"},
		{name: "metrics behind no admin key", env: map[string]string{"METRICS_REQUIRE_ADMIN_KEY": "true"}, wantIn: "METRICS_REQUIRE_ADMIN_KEY=true: needs ADMIN_API_KEY"},
		{name: "admin address not an address", env: map[string]string{"ADMIN_LISTEN_ADDR": "localhost"}, wantIn: "ADMIN_LISTEN_ADDR=localhost: must be host:port"},
		{name: "negative retries", env: map[string]string{"UPSTREAM_RETRIES": "-1"}, wantIn: "UPSTREAM_RETRIES=-1"},
		{name: "a fallback without its model", env: map[string]string{"MODEL_FALLBACKS": "deepseek-v4-pro"}, wantIn: "MODEL_FALLBACKS=deepseek-v4-pro: must be MODEL=FALLBACK items"},
		{name: "drain delay without a unit in the file", file: "shutdown_drain_delay: 5\n", wantIn: ":2: shutdown_drain_delay: 5: must be a duration of 0 or more, with a unit: 500ms, 30s, 2m, 1h (5s for seconds)"},
		{name: "bad bool", env: map[string]string{"TWO_STAGE_ENABLED": "maybe"}, wantIn: "TWO_STAGE_ENABLED=maybe: must be true or false"},
		{name: "bad bool in the file", file: "show_notices: maybe\n", wantIn: ":2: show_notices: maybe: must be true or false"},
		{name: "bad log level", env: map[string]string{"LOG_LEVEL": "loud"}, wantIn: "LOG_LEVEL=loud: must be debug, info, warn or error"},
		{name: "bad protocol", env: map[string]string{"DEFAULT_PROTOCOL": "fancy"}, wantIn: "DEFAULT_PROTOCOL=fancy: must be two-stage or standard"},
		{name: "unknown provider", env: map[string]string{"PROVIDERS": "azure"}, wantIn: `PROVIDERS=azure: unknown provider "azure"`},
		{name: "route to an unknown provider", file: "routes:\n  - model: x\n    provider: azure\n", wantIn: ":3: routes: model x: provider azure is not a provider"},
		{name: "bad listen address", env: map[string]string{"LISTEN_ADDR": "localhost"}, wantIn: "LISTEN_ADDR=localhost: must be host:port or a port alone"},
		{name: "bad PORT", env: map[string]string{"PORT": "http"}, wantIn: "PORT=http: must be a port number"},
		{name: "unknown flag", args: []string{"--max-phase-cycle", "3"}, wantIn: "unknown flag --max-phase-cycle; did you mean --max-phase-cycles?"},
		{name: "flag without its value", args: []string{"--max-phase-cycles"}, wantIn: "--max-phase-cycles needs a value"},
		{name: "stray argument", args: []string{"serve"}, wantIn: `unexpected argument "serve"`},
		{name: "Redis URL of another scheme", env: map[string]string{"REDIS_URL": "http://:" + secretEnv + "@redis:6379"}, wantIn: "REDIS_URL=[redacted]: must be a redis:// or rediss:// URL"},
		{name: "Redis URL without host in the file", file: "redis_url: redis://\n", wantIn: ":2: redis_url: [redacted]: must be a redis://"},
		{name: "negative rate limit", env: map[string]string{"RATE_LIMIT_KEY_RPM": "-1"}, wantIn: "RATE_LIMIT_KEY_RPM=-1: must be a whole number of 0 or more"},
		{name: "rate limit in the file not a number", file: "rate_limit_project_tpm: lots\n", wantIn: ":2: rate_limit_project_tpm: lots: must be a whole number"},
		{name: "resume TTL without a unit", env: map[string]string{"RESUME_TTL": "600"}, wantIn: "RESUME_TTL=600: must be a duration"},
		{name: "zero resume bytes", env: map[string]string{"RESUME_MAX_BYTES": "0"}, wantIn: "RESUME_MAX_BYTES=0: must be a whole number of 1 or more"},
		{name: "bad fail-open", env: map[string]string{"RATE_LIMIT_FAIL_OPEN": "sometimes"}, wantIn: "RATE_LIMIT_FAIL_OPEN=sometimes: must be true or false"},
		{name: "bad envelope mode in the file", file: "envelopes:\n  models:\n    orch-*: always\n", wantIn: ":4: envelopes: models: orch-*: always: must be optional, required or off"},
		{name: "unknown envelopes key", file: "envelopes:\n  phase:\n    x: {}\n", wantIn: ":3: envelopes: unknown key phase; did you mean phases?"},
		{name: "bad phase schema", file: "envelopes:\n  phases:\n    review:\n      type: nosuchtype\n", wantIn: ":5: envelopes: phases: review: compile the schema of phase review"},
		{name: "empty envelope mode", file: "envelopes:\n  models:\n    orch-*:\n", wantIn: ":4: envelopes: models: orch-*: empty: must be optional, required or off"},
		{name: "envelope rule twice", file: "envelopes:\n  models:\n    orch: required\n    orch: optional\n", wantIn: ":5: envelopes: models: orch is set twice (first on line 4)"},
		{name: "negative envelope retries", env: map[string]string{"MAX_ENVELOPE_RETRIES": "-1"}, wantIn: "MAX_ENVELOPE_RETRIES=-1: must be a whole number of 0 or more"},
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
			_, err := parseOptions(serveCommand, args, env(e), &stderr)
			if err == nil {
				t.Fatal("parseOptions: got nil error")
			}
			if !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("error %q does not say %q", err, tt.wantIn)
			}
			// One problem, one line: no setting is reported twice, and no
			// Go type shows.
			if lines := strings.Split(err.Error(), "\n"); len(lines) != 1 {
				t.Errorf("error has %d lines, want 1:\n%s", len(lines), err)
			}
			for _, goTerm := range []string{"main.", "type ", "int64", "time.Duration", "strconv.", "yaml: unmarshal", "yaml: line"} {
				if strings.Contains(err.Error(), goTerm) {
					t.Errorf("error %q shows Go's terms (%q)", err, goTerm)
				}
			}
			for _, s := range secrets {
				if strings.Contains(err.Error(), s) || strings.Contains(stderr.String(), s) {
					t.Errorf("secret %q leaked: error %q, stderr %q", s, err, stderr.String())
				}
			}
		})
	}
}

// TestSharedSettings reads the settings of several replicas from the file
// and the environment into the proxy's config.
func TestSharedSettings(t *testing.T) {
	file := writeFile(t, "redis_url: redis://redis:6379/2\nrate_limit_key_rpm: 60\nrate_limit_key_tpm: 90000\nrate_limit_project_rpm: 600\n"+
		"rate_limit_project_tpm: 900000\nrate_limit_fail_open: false\nresumable_streams: true\nresume_ttl: 5m\nresume_max_bytes: 1048576\n")
	o, err := parseOptions(serveCommand, []string{"--config", file}, env(nil), &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if o.RedisURL.Reveal() != "redis://redis:6379/2" {
		t.Errorf("redis URL %q", o.RedisURL.Reveal())
	}
	want := proxy.RateLimits{KeyRequests: 60, KeyTokens: 90000, ProjectRequests: 600, ProjectTokens: 900000}
	if diff := cmp.Diff(want, o.Proxy.RateLimits); diff != "" {
		t.Errorf("rate limits (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(proxy.Resume{All: true, TTL: 5 * time.Minute, MaxBytes: 1 << 20, MemoryBytes: proxy.DefaultResumeMemoryBytes}, o.Proxy.Resume); diff != "" {
		t.Errorf("resume (-want +got):\n%s", diff)
	}
	d, err := parseOptions(serveCommand, nil, env(nil), &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if d.RedisURL != "" || !d.Proxy.RateLimits.FailOpen || d.Proxy.RateLimits != (proxy.RateLimits{FailOpen: true}) || d.Proxy.Resume.All {
		t.Errorf("defaults: redis %q, limits %+v, resume %+v; want no Redis, no limits (failing open), streams not resumable", d.RedisURL, d.Proxy.RateLimits, d.Proxy.Resume)
	}
}

// The envelopes section of the config file: rules per model, in the order
// written, and phases of the operator's own judged like the seed's.
func TestEnvelopesFromFile(t *testing.T) {
	file := writeFile(t, `max_envelope_retries: 1
envelopes:
  models:
    orchestrator-*: required
    planner: optional
  phases:
    review:
      type: object
      required: [verdict]
      properties:
        verdict: {enum: [approve, reject]}
        since: {const: 2024-01-01}
        score: {type: number, maximum: 1.5}
`)
	o, err := parseOptions(serveCommand, []string{"--config", file}, env(nil), &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	want := []proxy.EnvelopeRule{{Pattern: "orchestrator-*", Mode: protocol.EnvelopeRequired}, {Pattern: "planner", Mode: protocol.EnvelopeOptional}}
	if diff := cmp.Diff(want, o.Proxy.Envelopes); diff != "" {
		t.Errorf("envelope rules (-want +got):\n%s", diff)
	}
	if o.EnvelopeRetries != 1 {
		t.Errorf("envelope retries = %d, want 1", o.EnvelopeRetries)
	}
	if o.Envelopes == nil {
		t.Fatal("no phases read")
	}
	if r := o.Envelopes.Judge(`{"phase":"review","data":{"verdict":"approve","since":"2024-01-01","score":1.5}}`); !r.Valid {
		t.Errorf("a review envelope judged %+v, want valid (an unquoted YAML date is the string it reads as)", r)
	}
	if r := o.Envelopes.Judge(`{"phase":"review","data":{"verdict":"approve","score":2}}`); r.Valid {
		t.Error("a score over the schema's maximum judged valid")
	}
	if r := o.Envelopes.Judge(`{"phase":"review","data":{"verdict":"later"}}`); r.Valid {
		t.Error("a review envelope with a bad verdict judged valid")
	}
	if r := o.Envelopes.Judge(`{"phase":"analysis","data":{"summary":"s","recommended_splits":1}}`); !r.Valid {
		t.Errorf("the seed's phases are gone: %+v", r)
	}
}

// TestGuardModesFromFile: GUARD_MODE, and the guard mode per model and per
// project from the config file.
func TestGuardModesFromFile(t *testing.T) {
	file := writeFile(t, `guard_mode: observe
guard:
  models:
    deepseek-*: agent
  modes:
    deepseek-reasoner: enforce
    gpt-*: observe
  projects:
    payments: enforce
    search: observe
`)
	o, err := parseOptions(serveCommand, []string{"--config", file}, env(nil), &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if o.Proxy.GuardMode != protocol.ModeObserve {
		t.Errorf("guard mode %q, want observe", o.Proxy.GuardMode)
	}
	want := []proxy.ModeRule{{Pattern: "deepseek-reasoner", Mode: protocol.ModeEnforce}, {Pattern: "gpt-*", Mode: protocol.ModeObserve}}
	if diff := cmp.Diff(want, o.Proxy.GuardModes); diff != "" {
		t.Errorf("mode rules (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]protocol.Mode{"payments": protocol.ModeEnforce, "search": protocol.ModeObserve}, o.Proxy.GuardProjectModes); diff != "" {
		t.Errorf("project modes (-want +got):\n%s", diff)
	}
	d, err := parseOptions(serveCommand, nil, env(nil), &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Proxy.GuardMode != protocol.ModeEnforce || d.Proxy.GuardModes != nil || d.Proxy.GuardProjectModes != nil {
		t.Errorf("defaults: mode %q, rules %v, projects %v; want enforce and no rules", d.Proxy.GuardMode, d.Proxy.GuardModes, d.Proxy.GuardProjectModes)
	}
}

// TestHelp checks --help lists every setting with its type, environment
// name and file key, on stdout, and shows no secret, wherever the secrets
// were set.
func TestHelp(t *testing.T) {
	path := writeFile(t, "openai_api_key: "+secretFile+"\n")
	e := env(map[string]string{"DEEPSEEK_API_KEY": secretEnv, "CONFIG": path})
	var stdout strings.Builder
	_, err := parseOptions(serveCommand, []string{"--openai-api-key", secretFlag, "--help"}, e, &stdout)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseOptions(--help) = %v, want flag.ErrHelp", err)
	}
	help := stdout.String()
	for _, s := range secrets {
		if strings.Contains(help, s) {
			t.Errorf("help shows secret %q", s)
		}
	}
	for _, s := range settings.All() {
		if !strings.Contains(help, "environment "+s.Env()+", file key "+s.Key()) {
			t.Errorf("help does not name %s and %s", s.Env(), s.Key())
		}
	}
	for _, want := range []string{
		"\n  --max-phase-cycles int\n",
		"\n  --upstream-idle-timeout duration\n",
		"\n  --show-notices\n", // a boolean flag takes no value
		"\n  --listen-addr addr\n",
		"\n  --deepseek-base-url url\n",
		"\n  --plan-tools list\n",
		"\n  --log-level string\n",
		"\n  --version\n",
		"(default 3)",
		"(default 2m0s)",
		`(default "two-stage")`,
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// TestHelpCommands checks every way of asking for help answers on stdout
// and ends without an error (the process exits 0), and that the demo has
// help of its own.
func TestHelpCommands(t *testing.T) {
	tests := []struct {
		args   []string
		wantIn string
	}{
		{args: []string{"--help"}, wantIn: "Usage:\n  phasegate [flags]"},
		{args: []string{"-h"}, wantIn: "Usage:\n  phasegate [flags]"},
		{args: []string{"help"}, wantIn: "Usage:\n  phasegate [flags]"},
		{args: []string{"demo", "--help"}, wantIn: "Usage:\n  phasegate demo [flags]"},
		{args: []string{"help", "demo"}, wantIn: "Usage:\n  phasegate demo [flags]"},
		{args: []string{"--version"}, wantIn: "phasegate "},
		{args: []string{"version"}, wantIn: "phasegate "},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr strings.Builder
			if err := dispatch(t.Context(), tt.args, env(nil), &stdout, &stderr); err != nil {
				t.Fatalf("dispatch(%q) = %v, want nil", tt.args, err)
			}
			if !strings.Contains(stdout.String(), tt.wantIn) {
				t.Errorf("stdout lacks %q:\n%s", tt.wantIn, stdout.String())
			}
			if stderr.Len() != 0 {
				t.Errorf("stderr = %q, want nothing", stderr.String())
			}
		})
	}
}

// TestVersion checks --version reports the version, commit and Go
// version from the build information, and `phasegate version` the same.
func TestVersion(t *testing.T) {
	var stdout strings.Builder
	if _, err := parseOptions(serveCommand, []string{"--version"}, env(nil), &stdout); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseOptions(--version) = %v, want flag.ErrHelp", err)
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build information")
	}
	got := strings.TrimSpace(stdout.String())
	want := regexp.MustCompile(`^phasegate \S+, commit \S+( \(modified\))?, built with ` + regexp.QuoteMeta(bi.GoVersion) + `$`)
	if !want.MatchString(got) {
		t.Errorf("--version = %q, want it to match %s", got, want)
	}
	var sub strings.Builder
	if err := dispatch(t.Context(), []string{"version"}, env(nil), &sub, io.Discard); err != nil || sub.String() != stdout.String() {
		t.Errorf("phasegate version = %q, %v; want %q as --version prints", sub.String(), err, stdout.String())
	}
}

// TestErrorsOnce checks several bad settings are all reported, each once,
// whichever way they came.
func TestErrorsOnce(t *testing.T) {
	path := writeFile(t, "max_phase_cycles: -1\nshow_notices: no\nlog_leve: debug\nupstream_idle_timeout: 5\n")
	e := env(map[string]string{"MAX_DUPLICATE_ATTEMPTS": "-1"})
	_, err := parseOptions(serveCommand, []string{"--config", path, "--request-timeout=forever"}, e, &strings.Builder{})
	if err == nil {
		t.Fatal("parseOptions: got nil error")
	}
	got := strings.Split(err.Error(), "\n")
	want := []string{
		path + ":3: unknown key log_leve; did you mean log_level?",
		"--request-timeout=forever: must be a duration of 0 or more, with a unit: 500ms, 30s, 2m, 1h",
		path + ":1: max_phase_cycles: -1: must be a whole number of 1 or more",
		"MAX_DUPLICATE_ATTEMPTS=-1: must be a whole number of 1 or more",
		path + ":4: upstream_idle_timeout: 5: must be a duration of 0 or more, with a unit: 500ms, 30s, 2m, 1h (5s for seconds)",
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
}

// TestListenAddr checks LISTEN_ADDR takes a bare port, and PORT stands in
// for it when it is not set.
func TestListenAddr(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{name: "default", want: ":8080"},
		{name: "host and port", env: map[string]string{"LISTEN_ADDR": "127.0.0.1:9090"}, want: "127.0.0.1:9090"},
		{name: "a bare port", env: map[string]string{"LISTEN_ADDR": "9090"}, want: ":9090"},
		{name: "a bare port by flag", args: []string{"--listen-addr=9091"}, want: ":9091"},
		{name: "PORT", env: map[string]string{"PORT": "3000"}, want: ":3000"},
		{name: "LISTEN_ADDR over PORT", env: map[string]string{"PORT": "3000", "LISTEN_ADDR": "127.0.0.1:9090"}, want: "127.0.0.1:9090"},
		{name: "the flag over PORT", env: map[string]string{"PORT": "3000"}, args: []string{"--listen-addr=:9092"}, want: ":9092"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOptions(serveCommand, tt.args, env(tt.env), &strings.Builder{})
			if err != nil {
				t.Fatalf("parseOptions: %v", err)
			}
			if o.ListenAddr != tt.want {
				t.Errorf("listen address = %q, want %q", o.ListenAddr, tt.want)
			}
		})
	}
}

// TestProxyFieldErrorsAsWritten checks a problem only the proxy finds in
// its configuration is reported under the setting as the user wrote it:
// the variable, the flag, or the file key and its line.
func TestProxyFieldErrorsAsWritten(t *testing.T) {
	tests := []struct {
		name, file string
		env        map[string]string
		args       []string
		want       string
	}{
		{name: "trusted proxy from the environment", env: map[string]string{"TRUSTED_PROXIES": "10.0.0.0/33"}, want: `TRUSTED_PROXIES=10.0.0.0/33: "10.0.0.0/33" is neither`},
		{name: "trusted proxy from the file", file: "trusted_proxies: [10.0.0.1, 10.0.0.0/33]\n", want: `:1: trusted_proxies: 10.0.0.1,10.0.0.0/33: "10.0.0.0/33" is neither`},
		{name: "in-flight bound from the environment", env: map[string]string{"MAX_INFLIGHT_BYTES": "100"}, want: "MAX_INFLIGHT_BYTES=100: must be at least 8 times the largest body"},
		{name: "in-flight bound from the file", file: "max_inflight_bytes: 100\n", want: ":1: max_inflight_bytes: 100: must be at least 8 times the largest body"},
		{name: "in-flight bound from a flag", args: []string{"--max-inflight-bytes=100"}, want: "--max-inflight-bytes=100: must be at least 8 times"},
		{name: "pass-through rule from the file", file: "\npassthrough_endpoints: FETCH /models\n", want: `:2: passthrough_endpoints: "FETCH /models": `},
		{name: "forwarded header from the environment", env: map[string]string{"FORWARD_HEADERS": "Cookie"}, want: `FORWARD_HEADERS=Cookie: "Cookie" would forward Cookie`},
		{name: "client key bound to a kept name, from the file", file: "phasegate_api_keys: k1,k2:key-1\ndeepseek_api_key: sk-x\n", want: ":1: phasegate_api_keys: [redacted]: client key 2 is bound"},
		{name: "reasoning key too short, from the environment", env: map[string]string{"REASONING_KEY": "c2hvcnQta2V5"}, want: "REASONING_KEY=[redacted]: must be 32 bytes in base64 (openssl rand -base64 32), got 9 bytes"},
		{name: "reasoning key not base64, from the file", file: "reasoning_key: not*base64\n", want: ":1: reasoning_key: [redacted]: must be base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", writeFile(t, tt.file)}, args...)
			}
			_, err := parseOptions(serveCommand, args, env(tt.env), &strings.Builder{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to say %q", err, tt.want)
			}
			for _, goTerm := range []string{"invalid configuration", "TrustedProxies", "MaxInflightBytes", "PassThrough", "ForwardHeaders", "ClientKeys", "ReasoningKey", "c2hvcnQta2V5", "not*base64"} {
				if strings.Contains(err.Error(), goTerm) {
					t.Errorf("error %q names the proxy's field (%q), not the setting", err, goTerm)
				}
			}
		})
	}
}

// TestFileWrongTypes checks a file key given a value of the wrong kind is
// reported at its line, in the file's terms.
func TestFileWrongTypes(t *testing.T) {
	for _, tt := range []struct{ file, want string }{
		{file: "models:\n  m:\n    context_window: [1]\n", want: ":3: models: m: context_window must be a single value"},
		{file: "models:\n  m:\n    context_window: 1.5\n", want: ":3: models: m: context_window: 1.5: must be a whole number of 0 or more"},
		{file: "routes:\n  - model: {a: b}\n    provider: openai\n", want: ":2: routes[0]: model must be a single value"},
		{file: "guard: [models]\n", want: ":1: guard must be a mapping with keys models, modes, projects"},
		{file: "guard:\n  models:\n    gpt-*: 3\n", want: ":3: guard: models: gpt-*: 3: must be strict or agent"},
		{file: "envelopes:\n  phases:\n    review: [a]\n", want: ":3: envelopes: phases: review: [a]: must be a JSON Schema (a mapping)"},
		{file: "plan_tools: [read, {x: 1}]\n", want: ":1: plan_tools: each item of the list must be one name"},
		{file: "log_level: {warn: true}\n", want: ":1: log_level must be a single value, not a list or a mapping"},
	} {
		path := writeFile(t, tt.file)
		_, err := parseOptions(serveCommand, []string{"--config", path}, env(nil), &strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), path+tt.want) {
			t.Errorf("%q: error %v, want %q", tt.file, err, path+tt.want)
		}
	}
}

// TestFileErrorsInLineOrder: every problem of a config file is reported in
// the order of its lines, after those of the environment, each echoing
// the value at fault, the rules of guard: and envelopes: included.
func TestFileErrorsInLineOrder(t *testing.T) {
	path := writeFile(t, `guard:
  modes:
    gpt-*: obsrve
  models:
    deepseek-*: [agent]
max_phase_cycles: -1
show_notices: maybe
routes:
  - model: x
    provider: nope
log_leve: debug
envelopes:
  models:
    a: sometimes
guard_mode: loud
models:
  m:
    safety_margin: 2
`)
	_, err := parseOptions(serveCommand, []string{"--config", path}, env(map[string]string{"MAX_DUPLICATE_ATTEMPTS": "0"}), io.Discard)
	if err == nil {
		t.Fatal("parseOptions accepted the file")
	}
	var got []string
	for _, line := range strings.Split(err.Error(), "\n") {
		got = append(got, strings.TrimPrefix(line, path))
	}
	want := []string{
		"MAX_DUPLICATE_ATTEMPTS=0: must be a whole number of 1 or more",
		":3: guard: modes: gpt-*: obsrve: must be enforce or observe",
		":5: guard: models: deepseek-*: [agent]: must be strict or agent",
		":6: max_phase_cycles: -1: must be a whole number of 1 or more",
		":7: show_notices: maybe: must be true or false",
		":9: routes: model x: provider nope is not a provider: the providers are deepseek and openai",
		":11: unknown key log_leve; did you mean log_level?",
		":14: envelopes: models: a: sometimes: must be optional, required or off",
		":15: guard_mode: loud: must be enforce or observe",
	}
	if diff := cmp.Diff(want, got[:min(len(got), len(want))]); diff != "" || len(got) != len(want)+1 {
		t.Errorf("errors (-want +got):\n%s\nall:\n%s", diff, strings.Join(got, "\n"))
	}
	if last := got[len(got)-1]; last != ":18: models: m: safety_margin: 2: must be a fraction from 0 up to (not including) 1, such as 0.05" {
		t.Errorf("the last error %q, want line 18 echoing its value 2 once", last)
	}
}
