package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/tokens"
)

// setting is one scalar setting: its environment name, which is also its
// flag (lower case, dashes) and its config-file key (lower case,
// underscores).
type setting struct {
	env    string
	def    string
	help   string
	secret bool
}

func (s setting) flag() string { return strings.ToLower(strings.ReplaceAll(s.env, "_", "-")) }
func (s setting) key() string  { return strings.ToLower(s.env) }

// settings lists every scalar setting, in the order --help shows them.
var settings = []setting{
	{env: "LISTEN_ADDR", def: ":8080", help: "address the gateway listens on"},
	{env: "PROVIDERS", def: "", help: "providers to enable, comma-separated (deepseek, openai); empty enables each provider whose key or base URL is set, and the built-in simulated model when none is"},
	{env: "DEEPSEEK_API_KEY", help: "DeepSeek key the gateway sends; empty passes the client's own Authorization through", secret: true},
	{env: "DEEPSEEK_BASE_URL", def: "https://api.deepseek.com", help: "DeepSeek API root"},
	{env: "OPENAI_API_KEY", help: "OpenAI key the gateway sends; empty passes the client's own Authorization through", secret: true},
	{env: "OPENAI_BASE_URL", def: "https://api.openai.com/v1", help: "OpenAI (or any OpenAI-compatible) API root"},
	{env: "ADMIN_API_KEY", help: "key that opens the admin routes (GET /debug/requests/{request_id}: a recent request's trace events) to a client presenting it as a bearer token; empty keeps them closed", secret: true},
	{env: "TWO_STAGE_ENABLED", def: "true", help: "enable the two-stage tool-loop guard; false makes /two-stage/... answer 501 and every route pass through"},
	{env: "DEFAULT_PROTOCOL", def: "two-stage", help: "protocol of /v1/chat/completions: two-stage or standard"},
	{env: "MAX_PHASE_CYCLES", def: "3", help: "tool executions allowed per user turn before the final answer is forced"},
	{env: "MAX_DUPLICATE_ATTEMPTS", def: "3", help: "refused tool calls (duplicates, malformed, undeclared, ...) allowed per request before the final answer is forced"},
	{env: "MAX_TOOLS_PER_TOOL_PHASE", def: "1", help: "tool calls forwarded per response (only 1 is supported)"},
	{env: "SHOW_NOTICES", def: "true", help: "show the guard's notices to the client as \"**System Notice**\" content (the model gets them either way)"},
	{env: "REPEATABLE_TOOLS", def: "", help: "tools exempt from the duplicate rule while their results change (e.g. run_tests,git_status), comma-separated; an identical call whose last two identical calls returned the same result is refused as no progress"},
	{env: "PLAN_TOOLS", def: "", help: "read-only tools of plan mode, comma-separated; requests with X-Phasegate-Mode: plan only see and may only call these"},
	{env: "THINKING_REPAIR", def: "true", help: "repair requests to DeepSeek for its thinking mode: restore the reasoning_content clients drop from tool-call messages, downgrade a forced tool_choice to auto"},
	{env: "THINKING_MEMORY_BYTES", def: strconv.Itoa(16 << 20), help: "memory bound of the reasoning_content remembered by tool call id, in bytes"},
	{env: "THINKING_MEMORY_TTL", def: "1h", help: "how long a remembered reasoning_content is kept"},
	{env: "CONTEXT_WINDOW", def: "0", help: "context window in tokens of every model, overriding the built-in and configured windows; 0 keeps them"},
	{env: "HISTORY_WINDOW", def: "0", help: "keep at most the last N non-system messages of every history (whole tool-call units); 0 keeps all that fit"},
	{env: "TOOL_RESULT_MAX_TOKENS", def: "16384", help: "when a history does not fit, tool results longer than this are shortened in the middle first; 0 never shortens"},
	{env: "TOKEN_CACHE_BYTES", def: strconv.Itoa(tokens.DefaultCacheBytes), help: "memory bound of the token-count cache, in bytes"},
	{env: "MAX_BODY_BYTES", def: strconv.Itoa(proxy.DefaultMaxBodyBytes), help: "largest request body accepted, in bytes"},
	{env: "MAX_EVENT_BYTES", def: strconv.Itoa(proxy.DefaultMaxEventBytes), help: "largest upstream SSE event accepted, in bytes"},
	{env: "UPSTREAM_CONNECT_TIMEOUT", def: proxy.DefaultTimeouts.Connect.String(), help: "bound on dialling an upstream and its TLS handshake"},
	{env: "UPSTREAM_FIRST_BYTE_TIMEOUT", def: proxy.DefaultTimeouts.FirstByte.String(), help: "bound on the wait for an upstream's headers and first event (keep-alive comments do not count)"},
	{env: "UPSTREAM_IDLE_TIMEOUT", def: proxy.DefaultTimeouts.Idle.String(), help: "bound on the gap between two events of an upstream stream (keep-alive comments do not reset it)"},
	{env: "REQUEST_TIMEOUT", def: proxy.DefaultTimeouts.Request.String(), help: "bound on one whole client request"},
	{env: "SHUTDOWN_DRAIN_DELAY", def: "5s", help: "on SIGTERM or SIGINT, how long /readyz answers 503 while the gateway still accepts and serves, so a load balancer stops sending before the listener closes; 0 closes it at once"},
	{env: "SHUTDOWN_TIMEOUT", def: "30s", help: "how long a shutdown waits for in-flight streams, once the drain delay is over"},
	{env: "LOG_LEVEL", def: "info", help: "debug, info, warn or error"},
}

// fileConfig is the config file: every scalar setting under its key, plus
// the structured settings.
type fileConfig struct {
	Scalars map[string]string
	Routes  []fileRoute
	Models  map[string]fileModel
}

// fileModel is the token limits of one model in the config file; absent
// fields keep the built-in values.
type fileModel struct {
	ContextWindow     int     `yaml:"context_window"`
	CompletionReserve int     `yaml:"completion_reserve"`
	SafetyMargin      float64 `yaml:"safety_margin"`
	Encoding          string  `yaml:"encoding"`
}

type fileRoute struct {
	Model    string `yaml:"model"`
	Provider string `yaml:"provider"`
}

// loadFile reads a YAML config file; an unknown key is an error.
func loadFile(path string) (fileConfig, error) {
	fc := fileConfig{Scalars: map[string]string{}}
	b, err := os.ReadFile(path)
	if err != nil {
		return fc, fmt.Errorf("read config file: %w", err)
	}
	var doc map[string]yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return fc, fmt.Errorf("config file %s: %w", path, err)
	}
	known := map[string]bool{}
	for _, s := range settings {
		known[s.key()] = true
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		node := doc[k]
		switch {
		case k == "routes":
			if err := decodeStrict(node, &fc.Routes); err != nil {
				return fc, fmt.Errorf("config file %s: routes: %w", path, err)
			}
		case k == "models":
			if err := decodeStrict(node, &fc.Models); err != nil {
				return fc, fmt.Errorf("config file %s: models: %w", path, err)
			}
		case known[k]:
			if node.Kind != yaml.ScalarNode {
				return fc, fmt.Errorf("config file %s: %s: must be a single value", path, k)
			}
			fc.Scalars[k] = node.Value
		default:
			return fc, fmt.Errorf("config file %s: unknown setting %q", path, k)
		}
	}
	return fc, nil
}

// decodeStrict decodes a node of the config file, refusing unknown keys
// as the top level does (yaml.Node.Decode alone ignores them).
func decodeStrict(n yaml.Node, v any) error {
	b, err := yaml.Marshal(&n)
	if err != nil {
		return err
	}
	d := yaml.NewDecoder(bytes.NewReader(b))
	d.KnownFields(true)
	return d.Decode(v)
}

// options is the resolved configuration of one run.
type options struct {
	listenAddr string
	// drainDelay is how long /readyz answers 503, with the listener still
	// open, before the shutdown starts (default 5s).
	drainDelay time.Duration
	// shutdownTimeout bounds the wait for in-flight requests once the
	// listener is closed (default 30s).
	shutdownTimeout time.Duration
	logLevel        string
	proxy           proxy.Config
	simulated       bool
	twoStage        bool
	showNotices     bool
	planTools       []string
	repeatableTools []string
	defaultProtocol string
	budgets         budgets
	tokens          tokens.Config
	thinkingRepair  bool
	thinkingBytes   int64
	thinkingTTL     time.Duration
}

type budgets struct {
	maxPhaseCycles, maxDuplicateAttempts, maxToolsPerToolPhase int
}

// parseOptions resolves every setting: flag over environment over file
// over default. It returns flag.ErrHelp after printing help.
func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("phasegate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", getenv("CONFIG"), "YAML config file (environment: CONFIG)")
	flags := map[string]*string{}
	for _, s := range settings {
		def := s.def
		if s.secret {
			def = ""
		}
		flags[s.env] = fs.String(s.flag(), def, fmt.Sprintf("%s (environment: %s, file: %s)", s.help, s.env, s.key()))
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "phasegate: an OpenAI-compatible gateway that guards agent tool loops.\n\n")
		fmt.Fprintf(stderr, "Usage:\n  phasegate [flags]        serve\n  phasegate demo [flags]   show the guard at work on the simulated model\n  phasegate healthcheck    exit 0 when the gateway at LISTEN_ADDR is ready (--url, --timeout)\n\n")
		fmt.Fprintf(stderr, "Every setting is a flag, an environment variable and a config-file key;\na flag wins over the environment, which wins over the file.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var fc fileConfig
	if *configPath != "" {
		var err error
		if fc, err = loadFile(*configPath); err != nil {
			return options{}, err
		}
	}
	values := map[string]string{}
	explicit := map[string]bool{} // set anywhere but by default
	for _, s := range settings {
		v, ok := s.def, false
		if fv, in := fc.Scalars[s.key()]; in {
			v, ok = fv, true
		}
		if ev := getenv(s.env); ev != "" {
			v, ok = ev, true
		}
		if set[s.flag()] {
			v, ok = *flags[s.env], true
		}
		values[s.env], explicit[s.env] = v, ok
	}
	return resolve(values, explicit, fc)
}

func resolve(v map[string]string, explicit map[string]bool, fc fileConfig) (options, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	num := func(name string) int {
		n, err := strconv.Atoi(v[name])
		if err != nil || n < 0 {
			bad("%s: %q is not a whole number of 0 or more", name, v[name])
		}
		return n
	}
	dur := func(name string) time.Duration {
		d, err := time.ParseDuration(v[name])
		if err != nil || d < 0 {
			bad("%s: %q is not a duration of 0 or more (e.g. 30s, 2m)", name, v[name])
		}
		return d
	}
	boolean := func(name string) bool {
		b, err := strconv.ParseBool(v[name])
		if err != nil {
			bad("%s: %q is not true or false", name, v[name])
		}
		return b
	}
	o := options{
		listenAddr:      v["LISTEN_ADDR"],
		drainDelay:      dur("SHUTDOWN_DRAIN_DELAY"),
		shutdownTimeout: dur("SHUTDOWN_TIMEOUT"),
		logLevel:        v["LOG_LEVEL"],
		twoStage:        boolean("TWO_STAGE_ENABLED"),
		showNotices:     boolean("SHOW_NOTICES"),
		thinkingRepair:  boolean("THINKING_REPAIR"),
		thinkingBytes:   int64(num("THINKING_MEMORY_BYTES")),
		thinkingTTL:     dur("THINKING_MEMORY_TTL"),
		defaultProtocol: v["DEFAULT_PROTOCOL"],
		budgets: budgets{
			maxPhaseCycles:       num("MAX_PHASE_CYCLES"),
			maxDuplicateAttempts: num("MAX_DUPLICATE_ATTEMPTS"),
			maxToolsPerToolPhase: num("MAX_TOOLS_PER_TOOL_PHASE"),
		},
	}
	o.planTools = list(v["PLAN_TOOLS"])
	o.repeatableTools = list(v["REPEATABLE_TOOLS"])
	switch o.logLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("LOG_LEVEL: %q is not debug, info, warn or error", o.logLevel)
	}
	switch o.defaultProtocol {
	case proxy.ProtocolTwoStage, proxy.ProtocolStandard:
	default:
		bad("DEFAULT_PROTOCOL: %q is not two-stage or standard", o.defaultProtocol)
	}
	if o.budgets.maxToolsPerToolPhase != 1 {
		bad("MAX_TOOLS_PER_TOOL_PHASE: only 1 is supported (got %d)", o.budgets.maxToolsPerToolPhase)
	}
	if o.budgets.maxPhaseCycles < 1 {
		bad("MAX_PHASE_CYCLES: must be at least 1")
	}
	pc := proxy.Config{
		MaxBodyBytes:  int64(num("MAX_BODY_BYTES")),
		MaxEventBytes: num("MAX_EVENT_BYTES"),
		Timeouts: proxy.Timeouts{
			Connect:   dur("UPSTREAM_CONNECT_TIMEOUT"),
			FirstByte: dur("UPSTREAM_FIRST_BYTE_TIMEOUT"),
			Idle:      dur("UPSTREAM_IDLE_TIMEOUT"),
			Request:   dur("REQUEST_TIMEOUT"),
		},
	}
	pc.AdminAPIKey = proxy.Secret(v["ADMIN_API_KEY"])
	known := map[string]proxy.Provider{
		"deepseek": {Name: "deepseek", BaseURL: v["DEEPSEEK_BASE_URL"], APIKey: proxy.Secret(v["DEEPSEEK_API_KEY"])},
		"openai":   {Name: "openai", BaseURL: v["OPENAI_BASE_URL"], APIKey: proxy.Secret(v["OPENAI_API_KEY"])},
	}
	var enabled []string
	if v["PROVIDERS"] != "" {
		for _, name := range strings.Split(v["PROVIDERS"], ",") {
			name = strings.TrimSpace(name)
			if _, ok := known[name]; !ok {
				bad("PROVIDERS: unknown provider %q (known: deepseek, openai)", name)
				continue
			}
			enabled = append(enabled, name)
		}
	} else {
		for _, name := range []string{"deepseek", "openai"} {
			up := strings.ToUpper(name)
			if explicit[up+"_API_KEY"] || explicit[up+"_BASE_URL"] {
				enabled = append(enabled, name)
			}
		}
	}
	for _, name := range enabled {
		pc.Providers = append(pc.Providers, known[name])
	}
	o.simulated = len(pc.Providers) == 0
	for _, r := range fc.Routes {
		pc.Routes = append(pc.Routes, proxy.Route{Pattern: r.Model, Provider: r.Provider})
	}
	if o.simulated {
		pc.Providers = append(pc.Providers, proxy.Provider{Name: simProvider, BaseURL: simBaseURL, Simulated: true})
	}
	o.tokens = tokens.DefaultConfig()
	o.tokens.ContextWindow = num("CONTEXT_WINDOW")
	o.tokens.HistoryWindow = num("HISTORY_WINDOW")
	o.tokens.ToolResultMaxTokens = num("TOOL_RESULT_MAX_TOKENS")
	o.tokens.CacheBytes = int64(num("TOKEN_CACHE_BYTES"))
	for name, m := range fc.Models {
		if m.SafetyMargin < 0 || m.SafetyMargin >= 1 {
			bad("models: %s: safety_margin must be in [0, 1)", name)
		}
		if m.ContextWindow < 0 || m.CompletionReserve < 0 {
			bad("models: %s: context_window and completion_reserve must not be negative", name)
		}
		o.tokens.Models[name] = tokens.Limits{ContextWindow: m.ContextWindow, CompletionReserve: m.CompletionReserve,
			SafetyMargin: m.SafetyMargin, Encoding: m.Encoding}
	}
	o.proxy = pc
	if err := pc.WithDefaults().Validate(); err != nil {
		errs = append(errs, err)
	}
	return o, errors.Join(errs...)
}

// list splits a comma-separated setting, dropping empty items.
func list(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
