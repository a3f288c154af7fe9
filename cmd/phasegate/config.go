package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/phasegate/phasegate/envelope"
	"github.com/phasegate/phasegate/internal/redact"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/store"
	"github.com/phasegate/phasegate/tokens"
)

// kind is what a setting's value must be; it decides the flag's type in
// --help and how the value is checked.
type kind int

const (
	kindString kind = iota
	kindSecret
	kindInt
	kindDuration
	kindBool
	kindURL
	kindAddr
	kindList
	kindChoice
)

// typeName is the flag's type as --help shows it, after the flag package's
// own convention ("" for a boolean flag, which takes no value).
func (k kind) typeName() string {
	switch k {
	case kindInt:
		return "int"
	case kindDuration:
		return "duration"
	case kindBool:
		return ""
	case kindURL:
		return "url"
	case kindAddr:
		return "addr"
	case kindList:
		return "list"
	}
	return "string"
}

// setting is one scalar setting: its environment name, which is also its
// flag (lower case, dashes) and its config-file key (lower case,
// underscores).
type setting struct {
	env  string
	def  string
	help string
	kind kind
	// min is the smallest whole number a kindInt setting takes.
	min int
	// choices are the values a kindChoice or kindList setting takes.
	choices []string
}

func (s setting) flag() string { return strings.ToLower(strings.ReplaceAll(s.env, "_", "-")) }
func (s setting) key() string  { return strings.ToLower(s.env) }

// settings lists every scalar setting, in the order --help shows them.
var settings = []setting{
	{env: "LISTEN_ADDR", def: ":8080", kind: kindAddr, help: "address the gateway listens on: host:port, or a port alone; when unset, PORT (set by most container platforms) gives the port"},
	{env: "PROVIDERS", kind: kindList, choices: []string{"deepseek", "openai"}, help: "providers to enable, comma-separated (deepseek, openai); empty enables each provider whose key or base URL is set, and the built-in simulated model when none is"},
	{env: "DEEPSEEK_API_KEY", kind: kindSecret, help: "DeepSeek key the gateway sends; empty passes the client's own Authorization through"},
	{env: "DEEPSEEK_BASE_URL", def: "https://api.deepseek.com", kind: kindURL, help: "DeepSeek API root"},
	{env: "OPENAI_API_KEY", kind: kindSecret, help: "OpenAI key the gateway sends; empty passes the client's own Authorization through"},
	{env: "OPENAI_BASE_URL", def: "https://api.openai.com/v1", kind: kindURL, help: "OpenAI (or any OpenAI-compatible) API root"},
	{env: "ADMIN_LISTEN_ADDR", kind: kindAddr, help: "address of a listener of its own for /metrics, /debug/ and the health routes (host:port or a port alone); empty serves them beside the client routes"},
	{env: "METRICS_REQUIRE_ADMIN_KEY", def: "auto", kind: kindChoice, choices: []string{"auto", "true", "false"}, help: "serve /metrics only to a client presenting ADMIN_API_KEY as a bearer token: true, false, or auto (true when PHASEGATE_API_KEYS is set and ADMIN_LISTEN_ADDR is not)"},
	{env: "ADMIN_API_KEY", kind: kindSecret, help: "key that opens the admin routes (GET /debug/requests/{request_id}: a recent request's trace events) to a client presenting it as a bearer token; empty keeps them closed"},
	{env: "TWO_STAGE_ENABLED", def: "true", kind: kindBool, help: "enable the two-stage tool-loop guard; false makes /two-stage/... answer 501 and every route pass through"},
	{env: "DEFAULT_PROTOCOL", def: "two-stage", kind: kindChoice, choices: []string{"two-stage", "standard"}, help: "protocol of /v1/chat/completions: two-stage or standard"},
	{env: "MAX_PHASE_CYCLES", def: "3", kind: kindInt, min: 1, help: "tool executions allowed per user turn before the final answer is forced"},
	{env: "MAX_DUPLICATE_ATTEMPTS", def: "3", kind: kindInt, min: 1, help: "refused tool calls (duplicates, malformed, undeclared, ...) allowed per request before the final answer is forced"},
	{env: "MAX_TOOLS_PER_TOOL_PHASE", def: "1", kind: kindChoice, choices: []string{"1"}, help: "tool calls forwarded per response (only 1 is supported)"},
	{env: "MAX_ENVELOPE_RETRIES", def: strconv.Itoa(protocol.DefaultMaxEnvelopeRetries), kind: kindInt, help: "re-asks of an answer whose orchestrator envelope is invalid, or missing when required (X-Phasegate-Envelope, or envelopes: models: in the config file); 0 asks none again"},
	{env: "SHOW_NOTICES", def: "true", kind: kindBool, help: "show the client one line per guard decision, as \"**System Notice**\" content (the model gets the full notice either way)"},
	{env: "GUARD_PROFILE", def: string(protocol.ProfileStrict), kind: kindChoice, choices: []string{string(protocol.ProfileStrict), string(protocol.ProfileAgent)}, help: "the guard's rules: strict (MAX_PHASE_CYCLES executions per turn, exact repeats refused) or agent (for coding agents: AGENT_MAX_PHASE_CYCLES executions, any call may repeat while its result changes, repeats without progress refused, even when they differ in form); per model with guard: models: in the config file; a request's X-Phasegate-Guard-Profile may only tighten it"},
	{env: "GUARD_MODE", def: string(protocol.ModeEnforce), kind: kindChoice, choices: []string{string(protocol.ModeEnforce), string(protocol.ModeObserve)}, help: "enforce (the guard refuses, re-asks and forces final answers) or observe (every request passes through unchanged; the guard judges the calls the client ran and counts what it would have done in phasegate_observed_tool_calls_total); per model with guard: modes: and per project with guard: projects: in the config file"},
	{env: "GUARD_RULES_NOTICE", def: "false", kind: kindBool, help: "state the guard's rules and budgets to the model in a system message at the start of every guarded upstream request, before any violation (it never enters the client's history); a request's X-Phasegate-Rules-Notice: true turns it on for that request"},
	{env: "AGENT_MAX_PHASE_CYCLES", def: strconv.Itoa(protocol.DefaultAgentMaxPhaseCycles), kind: kindInt, min: 1, help: "tool executions allowed per user turn under GUARD_PROFILE=agent"},
	{env: "REPEATABLE_TOOLS", kind: kindList, help: "tools exempt from the duplicate rule while their results change (e.g. run_tests,git_status), comma-separated; an identical call whose last two identical calls returned the same result is refused as no progress"},
	{env: "PLAN_TOOLS", kind: kindList, help: "read-only tools of plan mode, comma-separated; requests with X-Phasegate-Mode: plan only see and may only call these"},
	{env: "THINKING_REPAIR", def: "true", kind: kindBool, help: "repair requests to DeepSeek for its thinking mode: restore the reasoning_content clients drop from tool-call messages, downgrade a forced tool_choice to auto"},
	{env: "THINKING_MEMORY_BYTES", def: strconv.Itoa(16 << 20), kind: kindInt, help: "memory bound of the reasoning_content remembered by tool call id, in bytes"},
	{env: "THINKING_MEMORY_TTL", def: "1h", kind: kindDuration, help: "how long a remembered reasoning_content is kept"},
	{env: "REDIS_URL", kind: kindSecret, help: "Redis the replicas share (redis://[user:password@]host:port/db, rediss:// for TLS): remembered reasoning, rate limits and resumable streams; empty keeps them in this process"},
	{env: "REDIS_TIMEOUT", def: store.DefaultTimeout.String(), kind: kindDuration, help: "bound on each read and write of a call to Redis a request waits for (a call is retried once); more than 0"},
	{env: "REDIS_BREAKER_COOLDOWN", def: store.DefaultBreakerCooldown.String(), kind: kindDuration, help: "after " + strconv.Itoa(store.DefaultBreakerFailures) + " calls in a row that Redis does not answer, how long every call skips Redis (the documented degradation at once) before one call probes it; more than 0"},
	{env: "RATE_LIMIT_KEY_RPM", def: "0", kind: kindInt, help: "requests per minute of each client key (PHASEGATE_API_KEYS; without client keys, of each bearer token); 0 for no limit"},
	{env: "RATE_LIMIT_KEY_TPM", def: "0", kind: kindInt, help: "tokens per minute of each client key (the prompt estimate before the call, corrected with the reported usage after); 0 for no limit"},
	{env: "RATE_LIMIT_PROJECT_RPM", def: "0", kind: kindInt, help: "requests per minute of each project (with client keys, the key's project; without, X-Project-Id); 0 for no limit"},
	{env: "RATE_LIMIT_PROJECT_TPM", def: "0", kind: kindInt, help: "tokens per minute of each project; 0 for no limit"},
	{env: "RATE_LIMIT_ADDRESS_RPM", def: "0", kind: kindInt, help: "requests per minute of each client address (an IPv6 address counts as its /64; see TRUSTED_PROXIES); 0 for no limit"},
	{env: "RATE_LIMIT_ADDRESS_TPM", def: "0", kind: kindInt, help: "tokens per minute of each client address; 0 for no limit"},
	{env: "FORWARD_HEADERS", kind: kindList, help: "client request headers passed upstream beside the built-in allowlist, comma-separated (a name ending in - is a prefix); credentials, billing selectors and framing headers cannot be named"},
	{env: "TRUSTED_PROXIES", kind: kindList, help: "addresses and CIDR ranges of the proxies whose X-Forwarded-For names the client for the address limits, comma-separated; empty believes no X-Forwarded-For"},
	{env: "RATE_LIMIT_FAIL_OPEN", def: "true", kind: kindBool, help: "when Redis fails, let requests through unlimited (true) or refuse them with 503 (false)"},
	{env: "RESUMABLE_STREAMS", def: "false", kind: kindBool, help: "make every stream resumable, as if it sent X-Phasegate-Resumable: true"},
	{env: "RESUME_TTL", def: proxy.DefaultResumeTTL.String(), kind: kindDuration, help: "how long the events of a resumable stream are kept after its last"},
	{env: "RESUME_MAX_BYTES", def: strconv.Itoa(proxy.DefaultResumeMaxBytes), kind: kindInt, min: 1, help: "bound on the events kept of one resumable stream, in bytes; a stream whose client left is ended there"},
	{env: "RESUME_MEMORY_BYTES", def: strconv.Itoa(proxy.DefaultResumeMemoryBytes), kind: kindInt, min: 1, help: "bound on the events kept of all resumable streams together without Redis, in bytes; past it the logs of ended streams are forgotten first, then streams are served without resume"},
	{env: "RESPONSES_TTL", def: proxy.DefaultResponsesTTL.String(), kind: kindDuration, help: "how long a stored response of the Responses API (store: true, the default) is kept for previous_response_id, item_reference and GET /v1/responses/{id}"},
	{env: "CONTEXT_WINDOW", def: "0", kind: kindInt, help: "context window in tokens of every model, overriding the built-in and configured windows; 0 keeps them"},
	{env: "HISTORY_WINDOW", def: "0", kind: kindInt, help: "keep at most the last N non-system messages of every history (whole tool-call units); 0 keeps all that fit"},
	{env: "TOOL_RESULT_MAX_TOKENS", def: "16384", kind: kindInt, help: "when a history does not fit, tool results longer than this are shortened in the middle first; 0 never shortens"},
	{env: "TOKEN_CACHE_BYTES", def: strconv.Itoa(tokens.DefaultCacheBytes), kind: kindInt, help: "memory bound of the token-count cache, in bytes"},
	{env: "MAX_BODY_BYTES", def: strconv.Itoa(proxy.DefaultMaxBodyBytes), kind: kindInt, help: "largest request body accepted, in bytes"},
	{env: "MAX_INFLIGHT_BYTES", def: strconv.Itoa(proxy.DefaultMaxInflightBytes), kind: kindInt, min: 1, help: "memory bound of all requests in flight together, in bytes, counted as 8 times their body bytes; a request past it is answered 503 with Retry-After"},
	{env: "MAX_EVENT_BYTES", def: strconv.Itoa(proxy.DefaultMaxEventBytes), kind: kindInt, help: "largest upstream SSE event accepted, in bytes"},
	{env: "UPSTREAM_CONNECT_TIMEOUT", def: proxy.DefaultTimeouts.Connect.String(), kind: kindDuration, help: "bound on dialling an upstream and its TLS handshake"},
	{env: "UPSTREAM_FIRST_BYTE_TIMEOUT", def: proxy.DefaultTimeouts.FirstByte.String(), kind: kindDuration, help: "bound on the wait for an upstream's headers and first event (keep-alive comments do not count)"},
	{env: "UPSTREAM_IDLE_TIMEOUT", def: proxy.DefaultTimeouts.Idle.String(), kind: kindDuration, help: "bound on the gap between two events of an upstream stream (keep-alive comments do not reset it)"},
	{env: "REQUEST_TIMEOUT", def: proxy.DefaultTimeouts.Request.String(), kind: kindDuration, help: "bound on one whole client request"},
	{env: "BODY_READ_TIMEOUT", def: proxy.DefaultTimeouts.Body.String(), kind: kindDuration, help: "bound on reading a request body, from its first byte to its last (never on the response); a slower body is answered 408"},
	{env: "UPSTREAM_RETRIES", def: strconv.Itoa(proxy.DefaultRetry.Attempts), kind: kindInt, help: "new attempts of an upstream call that failed before any byte reached the client in a way safe to retry (connect failure, first-byte timeout, 429, 5xx), with jittered exponential backoff; 0 retries nothing"},
	{env: "UPSTREAM_RETRY_MAX_WAIT", def: proxy.DefaultRetry.MaxWait.String(), kind: kindDuration, help: "longest wait before a retry; an upstream's Retry-After longer than this is not waited for"},
	{env: "MODEL_FALLBACKS", kind: kindList, help: "fallback models, comma-separated, each MODEL=FALLBACK (MODEL may end in * for a prefix), e.g. deepseek-v4-pro=deepseek-v4-flash: a request whose retries are spent before any byte reached the client goes to FALLBACK, routed like any model"},
	{env: "PHASEGATE_API_KEYS", kind: kindSecret, help: "client keys, comma-separated, each KEY or KEY:PROJECT; when set, a request must present one as a bearer token (never sent upstream), and its project is the key's, whatever X-Project-Id says (key-N for the Nth key when it names none)"},
	{env: "PASSTHROUGH_ENDPOINTS", def: strings.Join(trimSlashes(proxy.DefaultPassThrough), ","), kind: kindList, help: "other /v1 endpoints passed through with the gateway's own key, comma-separated, each METHOD PATH (a path prefix such as /embeddings; * as the method allows any) or a bare PATH for GET, HEAD and POST; * as the path allows any; a client calling with its own key reaches any"},
	{env: "SHUTDOWN_DRAIN_DELAY", def: "5s", kind: kindDuration, help: "on SIGTERM or SIGINT, how long /readyz answers 503 while the gateway still accepts and serves, so a load balancer stops sending before the listener closes; 0 closes it at once"},
	{env: "SHUTDOWN_TIMEOUT", def: "30s", kind: kindDuration, help: "how long a shutdown waits for in-flight streams, once the drain delay is over"},
	{env: "LOG_LEVEL", def: "info", kind: kindChoice, choices: []string{"debug", "info", "warn", "error"}, help: "debug, info, warn or error"},
}

// aliases are other names of settings, as the protocol's first write-up
// spelt them: each is read from the environment and the config file like
// the setting itself. Both names set to different values in the same
// place is an error.
var aliases = map[string]string{
	"TWO_STAGE_MAX_CYCLES":     "MAX_PHASE_CYCLES",
	"TWO_STAGE_MAX_DUPLICATES": "MAX_DUPLICATE_ATTEMPTS",
}

// settingNamed returns the setting of an environment name.
func settingNamed(env string) setting {
	for _, s := range settings {
		if s.env == env {
			return s
		}
	}
	panic("no setting " + env) // a typo in this file
}

// source is where a value came from, so that an error names the setting as
// the user wrote it: the flag, the variable, or the file key and its line.
type source struct {
	from from
	file string
	line int
	// alias is the other name the value was given under, "" for the
	// setting's own.
	alias string
}

type from int

const (
	fromDefault from = iota
	fromFile
	fromEnv
	fromFlag
)

// value is one setting's value and where it came from.
type value struct {
	raw string
	src source
}

// written returns a setting with its value as the user wrote it:
// --max-phase-cycles=-1, MAX_PHASE_CYCLES=-1, or
// phasegate.yaml:2: max_phase_cycles: -1. A secret's value never shows.
func (s setting) written(v value) string {
	if v.src.alias != "" {
		s.env = v.src.alias
	}
	raw := v.raw
	if s.kind == kindSecret {
		raw = "[redacted]"
	} else if raw == "" || strings.ContainsAny(raw, " \t\"'") {
		raw = strconv.Quote(raw)
	}
	switch v.src.from {
	case fromFlag:
		return "--" + s.flag() + "=" + raw
	case fromEnv:
		return s.env + "=" + raw
	case fromFile:
		return fmt.Sprintf("%s:%d: %s: %s", v.src.file, v.src.line, s.key(), raw)
	}
	return fmt.Sprintf("%s (default %s)", s.env, raw)
}

// rawValue is a flag's value as given, checked later with the others so
// that every error has the same form. It implements flag.Value.
type rawValue struct {
	s   setting
	raw string
}

func (v *rawValue) String() string {
	if v == nil {
		return ""
	}
	return v.raw
}
func (v *rawValue) Set(s string) error { v.raw = s; return nil }

// IsBoolFlag makes a boolean setting a flag without a value, after the
// flag package's convention: --show-notices, --show-notices=false.
func (v *rawValue) IsBoolFlag() bool { return v.s.kind == kindBool }

// fileConfig is the config file: every scalar setting under its key, plus
// the structured settings, each with the line it is on.
type fileConfig struct {
	path    string
	scalars map[string]value
	routes  []fileRoute
	models  map[string]fileModel
	// envelopes are the envelope rules per model and the added phases.
	envelopes fileEnvelopes
	guard     fileGuard
}

// fileEnvelopes is the envelopes section of the config file.
type fileEnvelopes struct {
	rules  []proxy.EnvelopeRule
	phases map[envelope.Phase][]byte // JSON Schema of each added phase
}

// fileModel is the token limits of one model in the config file; absent
// fields keep the built-in values.
type fileModel struct {
	limits tokens.Limits
	line   int
}

type fileRoute struct {
	model, provider string
	line            int
}

// loadFile reads a YAML config file. An unknown key is an error, with the
// nearest known key as a suggestion.
func loadFile(path string) (fileConfig, error) {
	fc := fileConfig{path: path, models: map[string]fileModel{}}
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is said once, below
		}
		return fc, fmt.Errorf("config file %s: %w", path, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fc, yamlSyntaxError(path, b, err)
	}
	fc.scalars = map[string]value{}
	if len(doc.Content) == 0 {
		return fc, nil // an empty file
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		fc.scalars = nil
		return fc, fmt.Errorf("%s:%d: the config file must be a mapping of settings (key: value), one a line", path, root.Line)
	}
	known := []string{"routes", "models", "envelopes", "guard"}
	for _, s := range settings {
		known = append(known, s.key())
	}
	for alias := range aliases {
		known = append(known, strings.ToLower(alias))
	}
	var errs []error
	bad := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", path, line, fmt.Sprintf(format, args...)))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if first, dup := seen[k.Value]; dup {
			bad(k.Line, "%s is set twice (first on line %d)", k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		switch {
		case k.Value == "routes":
			fc.routes = fileRoutes(v, bad)
		case k.Value == "models":
			fc.models = fileModels(v, bad)
		case k.Value == "envelopes":
			fc.envelopes = readEnvelopes(v, bad)
		case k.Value == "guard":
			fc.guard = readGuard(v, bad)
		case slices.Contains(known, k.Value):
			if v.Kind == yaml.SequenceNode {
				if raw, ok := fileList(k.Value, v, bad); ok {
					fc.scalars[k.Value] = value{raw: raw, src: source{from: fromFile, file: path, line: v.Line}}
				}
				continue
			}
			if v.Kind != yaml.ScalarNode {
				bad(v.Line, "%s must be a single value, not a list or a mapping", k.Value)
				continue
			}
			if v.Tag == "!!null" {
				continue // "key:" with no value: unset
			}
			fc.scalars[k.Value] = value{raw: v.Value, src: source{from: fromFile, file: path, line: v.Line}}
		default:
			bad(k.Line, "unknown key %s%s", k.Value, didYouMean(k.Value, known, ""))
		}
	}
	return fc, errors.Join(errs...)
}

// fileRoutes reads routes: a list of {model, provider}.
func fileRoutes(n *yaml.Node, bad func(int, string, ...any)) []fileRoute {
	if n.Kind != yaml.SequenceNode {
		bad(n.Line, "routes must be a list of entries with model and provider")
		return nil
	}
	var out []fileRoute
	for i, item := range n.Content {
		fields := fileFields(item, fmt.Sprintf("routes[%d]", i), []string{"model", "provider"}, bad)
		if fields == nil {
			continue
		}
		r := fileRoute{line: item.Line}
		for key, v := range fields {
			switch key {
			case "model":
				r.model = v.Value
			case "provider":
				r.provider = v.Value
			}
		}
		if r.model == "" || r.provider == "" {
			bad(item.Line, "routes[%d] needs both model (a name, or a prefix ending in *) and provider", i)
			continue
		}
		out = append(out, r)
	}
	return out
}

// fileModels reads models: a mapping of model name to token limits.
func fileModels(n *yaml.Node, bad func(int, string, ...any)) map[string]fileModel {
	out := map[string]fileModel{}
	if n.Kind != yaml.MappingNode {
		bad(n.Line, "models must be a mapping of model names to their limits")
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		name, item := n.Content[i].Value, n.Content[i+1]
		fields := fileFields(item, "models: "+name, []string{"context_window", "completion_reserve", "safety_margin", "encoding"}, bad)
		if fields == nil {
			continue
		}
		m := fileModel{line: item.Line}
		whole := func(key string, v *yaml.Node) int {
			n, err := strconv.Atoi(v.Value)
			if err != nil || n < 0 {
				bad(v.Line, "models: %s: %s: %s: must be a whole number of 0 or more", name, key, v.Value)
			}
			return n
		}
		for key, v := range fields {
			switch key {
			case "context_window":
				m.limits.ContextWindow = whole(key, v)
			case "completion_reserve":
				m.limits.CompletionReserve = whole(key, v)
			case "safety_margin":
				f, err := strconv.ParseFloat(v.Value, 64)
				if err != nil || f < 0 || f >= 1 {
					bad(v.Line, "models: %s: safety_margin: %s: must be a fraction from 0 up to (not including) 1, such as 0.05", name, v.Value)
				}
				m.limits.SafetyMargin = f
			case "encoding":
				if v.Value != tokens.EncodingO200K && v.Value != tokens.EncodingCL100K {
					bad(v.Line, "models: %s: encoding: %s: must be %s or %s", name, v.Value, tokens.EncodingO200K, tokens.EncodingCL100K)
				}
				m.limits.Encoding = v.Value
			}
		}
		out[name] = m
	}
	return out
}

// readEnvelopes reads envelopes: a mapping with models (model name or
// prefix* to optional, required or off, in the order written) and phases
// (phase name to the JSON Schema of its data, written in YAML).
func readEnvelopes(n *yaml.Node, bad func(int, string, ...any)) fileEnvelopes {
	var fe fileEnvelopes
	if n.Kind != yaml.MappingNode {
		bad(n.Line, "envelopes must be a mapping with keys models and phases")
		return fe
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.Value == "models" && v.Kind == yaml.MappingNode:
			fe.rules = readEnvelopeRules(v, bad)
		case k.Value == "phases" && v.Kind == yaml.MappingNode:
			fe.phases = readPhases(v, bad)
		case k.Value == "models" || k.Value == "phases":
			bad(v.Line, "envelopes: %s must be a mapping", k.Value)
		default:
			bad(k.Line, "envelopes: unknown key %s%s", k.Value, didYouMean(k.Value, []string{"models", "phases"}, ""))
		}
	}
	return fe
}

// readEnvelopeRules reads envelopes: models, in the order written.
func readEnvelopeRules(n *yaml.Node, bad func(int, string, ...any)) []proxy.EnvelopeRule {
	var out []proxy.EnvelopeRule
	for _, e := range readNamed("envelopes: models", "optional, required or off", n, bad, func(_, v *yaml.Node) (protocol.EnvelopeMode, bool) {
		m, err := protocol.ParseEnvelopeMode(v.Value)
		return m, err == nil && v.Kind == yaml.ScalarNode && v.Tag != "!!null"
	}) {
		out = append(out, proxy.EnvelopeRule{Pattern: e.name, Mode: e.value})
	}
	return out
}

// readPhases reads envelopes: phases, each schema checked by compiling it.
func readPhases(n *yaml.Node, bad func(int, string, ...any)) map[envelope.Phase][]byte {
	out := map[envelope.Phase][]byte{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		name, schema := n.Content[i], n.Content[i+1]
		if _, dup := out[envelope.Phase(name.Value)]; dup {
			bad(name.Line, "envelopes: phases: %s is set twice", name.Value)
			continue
		}
		if schema.Kind != yaml.MappingNode {
			bad(schema.Line, "envelopes: phases: %s: must be a JSON Schema (a mapping) for the phase's data", name.Value)
			continue
		}
		b, err := json.Marshal(yamlJSON(schema))
		if err == nil {
			_, err = envelope.NewSet(map[envelope.Phase][]byte{envelope.Phase(name.Value): b})
		}
		if err != nil {
			bad(schema.Line, "envelopes: phases: %s: %v", name.Value, err)
			continue
		}
		out[envelope.Phase(name.Value)] = b
	}
	return out
}

// yamlJSON turns a YAML node into the JSON value it spells. Scalars keep
// YAML's reading of numbers, booleans and null, and every other scalar is
// its text: an unquoted date stays the string it reads as, where decoding
// into any would make it a time. Aliases are followed.
func yamlJSON(n *yaml.Node) any {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) > 0 {
			return yamlJSON(n.Content[0])
		}
		return nil
	case yaml.AliasNode:
		return yamlJSON(n.Alias)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			m[n.Content[i].Value] = yamlJSON(n.Content[i+1])
		}
		return m
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, c := range n.Content {
			out[i] = yamlJSON(c)
		}
		return out
	}
	switch n.Tag {
	case "!!int", "!!float", "!!bool", "!!null":
		var v any
		if n.Decode(&v) == nil {
			return v
		}
	}
	return n.Value
}

// fileFields returns the scalar fields of a mapping node, reporting a node
// that is not a mapping, an unknown key and a value that is not a scalar.
func fileFields(n *yaml.Node, what string, known []string, bad func(int, string, ...any)) map[string]*yaml.Node {
	if n.Kind != yaml.MappingNode {
		bad(n.Line, "%s must be a mapping with keys %s", what, strings.Join(known, ", "))
		return nil
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case !slices.Contains(known, k.Value):
			bad(k.Line, "%s: unknown key %s%s", what, k.Value, didYouMean(k.Value, known, ""))
		case v.Kind != yaml.ScalarNode:
			bad(v.Line, "%s: %s must be a single value", what, k.Value)
		default:
			out[k.Value] = v
		}
	}
	return out
}

// didYouMean returns `; did you mean X?` for the known name nearest to
// name (a different case counts as nearest), or "" when none is near.
func didYouMean(name string, known []string, prefix string) string {
	best, bestDist := "", len(name)/3+2
	for _, k := range known {
		if strings.EqualFold(strings.ReplaceAll(name, "-", "_"), strings.ReplaceAll(k, "-", "_")) {
			return "; did you mean " + prefix + k + "?"
		}
		if d := editDistance(name, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best == "" {
		return ""
	}
	return "; did you mean " + prefix + best + "?"
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// options is the resolved configuration of one run.
type options struct {
	listenAddr string
	// adminAddr, when set, is the listener of the admin routes alone.
	adminAddr string
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
	// profile is the guard's rules where guard: models: sets none.
	profile         protocol.Profile
	rulesNotice     bool
	defaultProtocol string
	budgets         budgets
	tokens          tokens.Config
	thinkingRepair  bool
	thinkingBytes   int64
	thinkingTTL     time.Duration
	// envelopes are the phases envelopes are judged by; nil is the
	// orchestrator protocol's five.
	envelopes       *envelope.Set
	envelopeRetries int
	// redisURL, when set, is the Redis the replicas share.
	redisURL proxy.Secret
	// redactor removes every secret above from what leaves the gateway.
	redactor *redact.Redactor
	// redisTimeout and redisCooldown bound the calls to it (see
	// store.RedisOptions).
	redisTimeout, redisCooldown time.Duration
	// sources are the settings' values and where each came from, by
	// environment name (PORT too, when it gave the address).
	sources map[string]value
}

type budgets struct {
	maxPhaseCycles, maxDuplicateAttempts, maxToolsPerToolPhase int
	agentMaxPhaseCycles                                        int
}

// command is what parseOptions parses the arguments of: the gateway, or
// the demo, each with its own help.
type command struct {
	name  string // as the user types it: "phasegate", "phasegate demo"
	intro string // the first paragraphs of --help
}

var serveCommand = command{name: "phasegate", intro: `phasegate: an OpenAI-compatible gateway that guards agent tool loops.

Usage:
  phasegate [flags]          serve (with no provider configured: the built-in simulated model)
  phasegate demo [flags]     show the guard at work on simulated models
  phasegate healthcheck      exit 0 if the gateway at LISTEN_ADDR is ready (a container's
                             health check; phasegate healthcheck --help says more)
  phasegate help             this help
  phasegate --version        version, commit and Go version

Every setting is a flag, an environment variable and a key of the YAML file
given with --config; a flag wins over the environment, which wins over the
file, which wins over the default.
`}

// parseOptions resolves every setting: flag over environment over file
// over default. It returns flag.ErrHelp after printing the help or the
// version to stdout: the request was answered, the process ends with 0.
func parseOptions(cmd command, args []string, getenv func(string) string, stdout io.Writer) (options, error) {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	// The flag package would print its errors and the whole help to the
	// output; errors are returned instead, once, and help goes to stdout.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	configPath := fs.String("config", "", "YAML config file (environment CONFIG)")
	version := fs.Bool("version", false, "print the version, commit and Go version, and exit")
	flags := map[string]*rawValue{}
	for _, s := range settings {
		flags[s.env] = &rawValue{s: s}
		fs.Var(flags[s.env], s.flag(), s.help)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(stdout, cmd, fs)
			return options{}, err
		}
		return options{}, flagError(cmd, err)
	}
	if *version {
		fmt.Fprintln(stdout, versionLine())
		return options{}, flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected argument %q (flags take --name=value; %s --help lists them)", fs.Arg(0), cmd.name)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	path := getenv("CONFIG")
	if set["config"] {
		path = *configPath
	}
	fc := fileConfig{scalars: map[string]value{}}
	var fileErr error
	if path != "" {
		// A file with bad keys is still read for the rest, so that every
		// problem is reported at once.
		if fc, fileErr = loadFile(path); fc.scalars == nil {
			return options{}, fileErr
		}
	}
	values := map[string]value{}
	for _, s := range settings {
		v := value{raw: s.def}
		if fv, in := fc.scalars[s.key()]; in {
			v = fv
		}
		if av, ok := aliasValue(s, fc, getenv, v); ok {
			v = av
		}
		if ev := getenv(s.env); ev != "" {
			v = value{raw: ev, src: source{from: fromEnv}}
		}
		if set[s.flag()] {
			v = value{raw: flags[s.env].raw, src: source{from: fromFlag}}
		}
		values[s.env] = v
	}
	if err := aliasConflicts(fc, getenv); err != nil {
		return options{}, err
	}
	if values["LISTEN_ADDR"].src.from == fromDefault {
		if port := getenv("PORT"); port != "" {
			values["LISTEN_ADDR"] = value{raw: port, src: source{from: fromEnv}}
			values["PORT"] = values["LISTEN_ADDR"]
		}
	}
	o, err := resolve(values, fc)
	return o, errors.Join(fileErr, err)
}

// aliasValue is the value setting s was given under an alias, in the
// file or the environment, when it outranks v (the value from the file
// under the setting's own name, or the default): the environment outranks
// the file, and the setting's own name outranks its alias in the same
// place.
func aliasValue(s setting, fc fileConfig, getenv func(string) string, v value) (value, bool) {
	for alias, name := range aliases {
		if name != s.env {
			continue
		}
		if ev := getenv(alias); ev != "" {
			return value{raw: ev, src: source{from: fromEnv, alias: alias}}, true
		}
		if fv, in := fc.scalars[strings.ToLower(alias)]; in && v.src.from == fromDefault {
			fv.src.alias = alias
			return fv, true
		}
	}
	return value{}, false
}

// aliasConflicts reports a setting given under its own name and an alias
// with different values, in the environment or in the file.
func aliasConflicts(fc fileConfig, getenv func(string) string) error {
	var errs []error
	for _, alias := range slices.Sorted(maps.Keys(aliases)) {
		name := aliases[alias]
		if a, n := getenv(alias), getenv(name); a != "" && n != "" && a != n {
			errs = append(errs, fmt.Errorf("%s=%s and %s=%s name the same setting (%s is the older name of %s): set one", alias, a, name, n, alias, name))
		}
		a, aok := fc.scalars[strings.ToLower(alias)]
		n, nok := fc.scalars[strings.ToLower(name)]
		if aok && nok && a.raw != n.raw {
			errs = append(errs, fmt.Errorf("%s:%d: %s and %s name the same setting (%s is the older name of %s): set one", fc.path, a.src.line,
				strings.ToLower(alias), strings.ToLower(name), strings.ToLower(alias), strings.ToLower(name)))
		}
	}
	return errors.Join(errs...)
}

// flagError rewords the flag package's errors with the flag as typed
// (--name) and a pointer to the help.
func flagError(cmd command, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		known := []string{"config", "version", "help"}
		for _, s := range settings {
			known = append(known, s.flag())
		}
		return fmt.Errorf("unknown flag --%s%s (%s --help lists every flag)", name, didYouMean(name, known, "--"), cmd.name)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Errorf("--%s needs a value: --%s=VALUE (%s --help says which)", name, name, cmd.name)
	}
	return fmt.Errorf("%s (%s --help lists every flag)", msg, cmd.name)
}

// printHelp writes the help: the command's introduction, then every flag
// with its type, default, environment variable and file key, in the
// layout of flag.PrintDefaults.
func printHelp(w io.Writer, cmd command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s\nFlags:\n", cmd.intro)
	line := func(name, typ, help, def, also string) {
		fmt.Fprintf(w, "  --%s", name)
		if typ != "" {
			fmt.Fprintf(w, " %s", typ)
		}
		fmt.Fprintf(w, "\n    \t%s", help)
		if def != "" {
			fmt.Fprintf(w, " (default %s)", def)
		}
		if also != "" {
			fmt.Fprintf(w, "\n    \t%s", also)
		}
		fmt.Fprintln(w)
	}
	line("config", "string", "YAML config file", "", "environment CONFIG")
	line("version", "", "print the version, commit and Go version, and exit", "", "")
	for _, s := range settings {
		def := s.def
		// Quoted as flag.PrintDefaults quotes a string's default; numbers,
		// durations and booleans bare.
		if s.kind == kindString || s.kind == kindURL || s.kind == kindAddr || s.kind == kindChoice {
			if def != "" {
				def = strconv.Quote(def)
			}
		}
		if s.kind == kindSecret {
			def = ""
		}
		line(s.flag(), s.kind.typeName(), s.help, def, "environment "+s.env+", file key "+s.key())
	}
	fmt.Fprintf(w, "\nDurations take a unit (30s, 2m, 1h); a boolean flag alone means true (--%s=false to turn one off).\n", "show-notices")
}

// versionLine returns the version, commit and Go version the binary was
// built with, from its build information.
func versionLine() string {
	version, commit, modified, goVersion := "(devel)", "unknown", false, runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if modified {
		commit += " (modified)"
	}
	if stampVersion != "" {
		version = stampVersion
	}
	if stampCommit != "" {
		commit = stampCommit
	}
	return fmt.Sprintf("phasegate %s, commit %s, built with %s", version, commit, goVersion)
}

// resolve checks every value, each error naming the setting as it was
// written and what it allows, and builds the options.
func resolve(v map[string]value, fc fileConfig) (options, error) {
	r := &resolver{v: v}
	o := r.options()
	o.proxy = r.proxyConfig(&o)
	o.proxy.GuardProfile = o.profile
	o.proxy.GuardMode = protocol.Mode(r.choice("GUARD_MODE"))
	r.providers(&o, fc)
	o.tokens = tokens.DefaultConfig()
	o.tokens.ContextWindow = r.num("CONTEXT_WINDOW")
	o.tokens.HistoryWindow = r.num("HISTORY_WINDOW")
	o.tokens.ToolResultMaxTokens = r.num("TOOL_RESULT_MAX_TOKENS")
	o.tokens.CacheBytes = int64(r.num("TOKEN_CACHE_BYTES"))
	for name, m := range fc.models {
		o.tokens.Models[name] = m.limits
	}
	o.envelopeRetries = r.num("MAX_ENVELOPE_RETRIES")
	o.proxy.Envelopes = fc.envelopes.rules
	o.proxy.GuardProfiles = fc.guard.profiles
	o.proxy.GuardModes, o.proxy.GuardProjectModes = fc.guard.modes, fc.guard.projects
	if len(fc.envelopes.phases) > 0 {
		set, err := envelope.NewSet(fc.envelopes.phases)
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("%s: envelopes: phases: %w", fc.path, err))
		}
		o.envelopes = set
	}
	if len(r.errs) > 0 {
		return o, errors.Join(r.errs...)
	}
	// Every setting was checked above; what is left to fail here is the
	// combination, reported as the proxy sees it.
	if err := o.proxy.WithDefaults().Validate(); err != nil {
		return o, err
	}
	o.redactor = redact.New(secretValues(o.proxy, o.redisURL)...)
	return o, nil
}

// resolver reads the values of the settings, collecting an error for each
// one that is not what its setting allows.
type resolver struct {
	v    map[string]value
	errs []error
}

// bad records that name's value breaks rule, naming the setting as written.
func (r *resolver) bad(name, rule string) {
	s := setting{env: "PORT", kind: kindString}
	if name != "PORT" {
		s = settingNamed(name)
	}
	r.errs = append(r.errs, fmt.Errorf("%s: %s", s.written(r.v[name]), rule))
}

func (r *resolver) num(name string) int {
	s := settingNamed(name)
	n, err := strconv.Atoi(strings.TrimSpace(r.v[name].raw))
	if err != nil || n < s.min {
		r.bad(name, fmt.Sprintf("must be a whole number of %d or more", s.min))
	}
	return n
}

func (r *resolver) dur(name string) time.Duration {
	raw := strings.TrimSpace(r.v[name].raw)
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 {
		rule := "must be a duration of 0 or more, with a unit: 500ms, 30s, 2m, 1h"
		if _, nerr := strconv.Atoi(raw); nerr == nil {
			rule += " (" + raw + "s for seconds)"
		}
		r.bad(name, rule)
	}
	return d
}

// positiveDur reads a duration that must be more than 0.
func (r *resolver) positiveDur(name string) time.Duration {
	d := r.dur(name)
	if d == 0 {
		r.bad(name, "must be a duration of more than 0, with a unit: 50ms, 1s")
	}
	return d
}

func (r *resolver) boolean(name string) bool {
	switch strings.ToLower(strings.TrimSpace(r.v[name].raw)) {
	case "true", "1", "yes", "on":
		return true
	case "false", "0", "no", "off":
		return false
	}
	r.bad(name, "must be true or false")
	return false
}

func (r *resolver) choice(name string) string {
	s, raw := settingNamed(name), strings.TrimSpace(r.v[name].raw)
	if !slices.Contains(s.choices, raw) {
		r.bad(name, "must be "+orList(s.choices))
	}
	return raw
}

// redisURL reads REDIS_URL: empty, or a redis:// or rediss:// URL with a
// host. The value is a secret (it may hold a password) and never shown.
func (r *resolver) redisURL() proxy.Secret {
	raw := strings.TrimSpace(r.v["REDIS_URL"].raw)
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
		r.bad("REDIS_URL", "must be a redis:// or rediss:// URL with a host, such as redis://redis:6379/0")
	}
	return proxy.Secret(raw)
}

func (r *resolver) baseURL(name string) string {
	raw := strings.TrimSpace(r.v[name].raw)
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		r.bad(name, "must be an http:// or https:// URL with a host, such as "+settingNamed(name).def)
	case u.RawQuery != "" || u.Fragment != "":
		r.bad(name, "must be an API root without a query or fragment, such as "+settingNamed(name).def)
	}
	return raw
}

// options reads the gateway's own settings.
func (r *resolver) options() options {
	v := r.v
	o := options{
		listenAddr:      listenAddr(v, r.bad),
		adminAddr:       adminAddr(v["ADMIN_LISTEN_ADDR"].raw, r.bad),
		drainDelay:      r.dur("SHUTDOWN_DRAIN_DELAY"),
		shutdownTimeout: r.dur("SHUTDOWN_TIMEOUT"),
		logLevel:        r.choice("LOG_LEVEL"),
		twoStage:        r.boolean("TWO_STAGE_ENABLED"),
		showNotices:     r.boolean("SHOW_NOTICES"),
		rulesNotice:     r.boolean("GUARD_RULES_NOTICE"),
		thinkingRepair:  r.boolean("THINKING_REPAIR"),
		thinkingBytes:   int64(r.num("THINKING_MEMORY_BYTES")),
		thinkingTTL:     r.dur("THINKING_MEMORY_TTL"),
		redisURL:        r.redisURL(),
		redisTimeout:    r.positiveDur("REDIS_TIMEOUT"),
		redisCooldown:   r.positiveDur("REDIS_BREAKER_COOLDOWN"),
		defaultProtocol: r.choice("DEFAULT_PROTOCOL"),
		planTools:       list(v["PLAN_TOOLS"].raw),
		repeatableTools: list(v["REPEATABLE_TOOLS"].raw),
		profile:         protocol.Profile(r.choice("GUARD_PROFILE")),
		budgets: budgets{
			maxPhaseCycles:       r.num("MAX_PHASE_CYCLES"),
			maxDuplicateAttempts: r.num("MAX_DUPLICATE_ATTEMPTS"),
			agentMaxPhaseCycles:  r.num("AGENT_MAX_PHASE_CYCLES"),
		},
	}
	if r.choice("MAX_TOOLS_PER_TOOL_PHASE") == "1" {
		o.budgets.maxToolsPerToolPhase = 1
	}
	o.sources = map[string]value{}
	for name, val := range v {
		o.sources[name] = val
	}
	return o
}

// proxyConfig reads the settings of the proxy but for its providers and
// routes.
func (r *resolver) proxyConfig(o *options) proxy.Config {
	v := r.v
	pc := proxy.Config{
		MaxBodyBytes:     int64(r.num("MAX_BODY_BYTES")),
		MaxEventBytes:    r.num("MAX_EVENT_BYTES"),
		MaxInflightBytes: int64(r.num("MAX_INFLIGHT_BYTES")),
		Retry:            proxy.Retry(r.num("UPSTREAM_RETRIES"), r.dur("UPSTREAM_RETRY_MAX_WAIT")),
		ClientKeys:       clientKeys(v["PHASEGATE_API_KEYS"].raw),
		PassThrough:      list(v["PASSTHROUGH_ENDPOINTS"].raw),
		Fallbacks:        fallbacks(list(v["MODEL_FALLBACKS"].raw), r.bad),
		Timeouts: proxy.Timeouts{
			Connect:   r.dur("UPSTREAM_CONNECT_TIMEOUT"),
			FirstByte: r.dur("UPSTREAM_FIRST_BYTE_TIMEOUT"),
			Idle:      r.dur("UPSTREAM_IDLE_TIMEOUT"),
			Request:   r.dur("REQUEST_TIMEOUT"),
			Body:      r.dur("BODY_READ_TIMEOUT"),
		},
		AdminAPIKey:   proxy.Secret(v["ADMIN_API_KEY"].raw),
		SeparateAdmin: o.adminAddr != "",
		RateLimits: proxy.RateLimits{
			KeyRequests:     r.num("RATE_LIMIT_KEY_RPM"),
			KeyTokens:       r.num("RATE_LIMIT_KEY_TPM"),
			ProjectRequests: r.num("RATE_LIMIT_PROJECT_RPM"),
			ProjectTokens:   r.num("RATE_LIMIT_PROJECT_TPM"),
			AddressRequests: r.num("RATE_LIMIT_ADDRESS_RPM"),
			AddressTokens:   r.num("RATE_LIMIT_ADDRESS_TPM"),
			FailOpen:        r.boolean("RATE_LIMIT_FAIL_OPEN"),
		},
		Resume: proxy.Resume{All: r.boolean("RESUMABLE_STREAMS"), TTL: r.dur("RESUME_TTL"), MaxBytes: int64(r.num("RESUME_MAX_BYTES")),
			MemoryBytes: int64(r.num("RESUME_MEMORY_BYTES"))},
		ResponsesTTL: r.dur("RESPONSES_TTL"),
	}
	pc.TrustedProxies = list(v["TRUSTED_PROXIES"].raw)
	pc.ForwardHeaders = list(v["FORWARD_HEADERS"].raw)
	metricsKey := r.choice("METRICS_REQUIRE_ADMIN_KEY")
	pc.MetricsOpen = metricsKey == "false"
	if pc.MetricsNeedAdminKey = metricsKey == "true"; pc.MetricsNeedAdminKey && pc.AdminAPIKey == "" {
		r.bad("METRICS_REQUIRE_ADMIN_KEY", "needs ADMIN_API_KEY: with no admin key, nobody could read /metrics")
	}
	return pc
}

// providers enables the providers (those named in PROVIDERS, else each
// whose key or base URL is set, else the simulated model) and the file's
// routes to them.
func (r *resolver) providers(o *options, fc fileConfig) {
	v := r.v
	known := map[string]proxy.Provider{
		"deepseek": {Name: "deepseek", BaseURL: r.baseURL("DEEPSEEK_BASE_URL"), APIKey: proxy.Secret(v["DEEPSEEK_API_KEY"].raw)},
		"openai":   {Name: "openai", BaseURL: r.baseURL("OPENAI_BASE_URL"), APIKey: proxy.Secret(v["OPENAI_API_KEY"].raw)},
	}
	var enabled []string
	if names := list(v["PROVIDERS"].raw); len(names) > 0 {
		for _, name := range names {
			if _, ok := known[name]; !ok {
				r.bad("PROVIDERS", fmt.Sprintf("unknown provider %q: the providers are deepseek and openai", name))
				continue
			}
			if !slices.Contains(enabled, name) {
				enabled = append(enabled, name)
			}
		}
	} else {
		for _, name := range []string{"deepseek", "openai"} {
			up := strings.ToUpper(name)
			if v[up+"_API_KEY"].src.from != fromDefault || v[up+"_BASE_URL"].src.from != fromDefault {
				enabled = append(enabled, name)
			}
		}
	}
	for _, name := range enabled {
		o.proxy.Providers = append(o.proxy.Providers, known[name])
	}
	o.simulated = len(o.proxy.Providers) == 0
	for _, rt := range fc.routes {
		if !slices.Contains(enabled, rt.provider) {
			rule := "is not enabled"
			if _, ok := known[rt.provider]; !ok {
				rule = "is not a provider: the providers are deepseek and openai"
			}
			r.errs = append(r.errs, fmt.Errorf("%s:%d: routes: model %s: provider %s %s", fc.path, rt.line, rt.model, rt.provider, rule))
			continue
		}
		o.proxy.Routes = append(o.proxy.Routes, proxy.Route{Pattern: rt.model, Provider: rt.provider})
	}
	if o.simulated {
		o.proxy.Providers = append(o.proxy.Providers, proxy.Provider{Name: simProvider, BaseURL: simBaseURL, Simulated: true})
	}
}

// listenAddr returns the address to listen on: LISTEN_ADDR as host:port,
// a bare port taken as ":port"; PORT, when LISTEN_ADDR is unset, stands
// for it (parseOptions put it there).
func listenAddr(v map[string]value, bad func(name, rule string)) string {
	name := "LISTEN_ADDR"
	if _, ok := v["PORT"]; ok {
		name = "PORT"
	}
	raw := strings.TrimSpace(v[name].raw)
	if isPort(raw) {
		return ":" + raw
	}
	if name == "PORT" {
		bad(name, "must be a port number, 0 to 65535 (or set LISTEN_ADDR)")
		return ""
	}
	host, port, err := net.SplitHostPort(raw)
	if err != nil || !isPort(port) || strings.ContainsAny(host, " /") {
		bad(name, "must be host:port or a port alone, such as :8080, 127.0.0.1:8080 or 8080")
	}
	return raw
}

// adminAddr reads ADMIN_LISTEN_ADDR: empty, host:port, or a port alone.
func adminAddr(raw string, bad func(name, rule string)) string {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return ""
	}
	if isPort(raw) {
		return ":" + raw
	}
	host, port, err := net.SplitHostPort(raw)
	if err != nil || !isPort(port) || strings.ContainsAny(host, " /") {
		bad("ADMIN_LISTEN_ADDR", "must be host:port or a port alone, such as 127.0.0.1:9090 or 9090")
	}
	return raw
}

func isPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n <= 65535 && s[0] != '+' && s[0] != '-'
}

// orList joins choices as "a", "a or b", "a, b or c".
func orList(choices []string) string {
	if len(choices) <= 1 {
		return strings.Join(choices, "")
	}
	return strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
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

// clientKeys reads PHASEGATE_API_KEYS: comma-separated keys, each KEY or
// KEY:PROJECT.
func clientKeys(raw string) []proxy.ClientKey {
	var keys []proxy.ClientKey
	for _, item := range strings.Split(raw, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, project, _ := strings.Cut(item, ":")
		keys = append(keys, proxy.ClientKey{Key: proxy.Secret(strings.TrimSpace(key)), Project: strings.TrimSpace(project)})
	}
	return keys
}

func trimSlashes(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = strings.Trim(p, "/")
	}
	return out
}

// fallbacks reads MODEL_FALLBACKS: MODEL=FALLBACK items.
func fallbacks(items []string, bad func(name, rule string)) []proxy.Fallback {
	var out []proxy.Fallback
	for _, item := range items {
		pattern, model, ok := strings.Cut(item, "=")
		pattern, model = strings.TrimSpace(pattern), strings.TrimSpace(model)
		if !ok || pattern == "" || model == "" {
			bad("MODEL_FALLBACKS", "must be MODEL=FALLBACK items, comma-separated, such as deepseek-v4-pro=deepseek-v4-flash")
			continue
		}
		out = append(out, proxy.Fallback{Pattern: pattern, Model: model})
	}
	return out
}
