// Package settings owns every setting of the gateway: its environment
// name, flag and config-file key, its default, how it is parsed and
// checked, and the typed value the command runs with. Values come from
// flags, the environment, a YAML file and the defaults, in that order of
// precedence; an error names the setting as the user wrote it.
package settings

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/store"
	"github.com/phasegate/phasegate/tokens"
	"github.com/phasegate/phasegate/tools"
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
	kindDecimal
)

// Setting is one scalar setting: its environment name, which is also its
// flag (lower case, dashes) and its config-file key (lower case,
// underscores). The settings are the package's variables, so a setting
// that does not exist cannot be named.
type Setting struct {
	env  string
	def  string
	help string
	kind kind
	// min is the smallest whole number a kindInt setting takes.
	min int
	// choices are the values a kindChoice or kindList setting takes.
	choices []string
}

// Env is the setting's environment variable.
func (s *Setting) Env() string { return s.env }

// Flag is the setting's flag, without its dashes.
func (s *Setting) Flag() string { return strings.ToLower(strings.ReplaceAll(s.env, "_", "-")) }

// Key is the setting's config-file key.
func (s *Setting) Key() string { return strings.ToLower(s.env) }

// Help is what --help says of the setting.
func (s *Setting) Help() string { return s.help }

// IsBool reports whether the setting is a boolean, a flag without a value.
func (s *Setting) IsBool() bool { return s.kind == kindBool }

// TypeName is the flag's type as --help shows it, after the flag package's
// own convention ("" for a boolean flag, which takes no value).
func (s *Setting) TypeName() string {
	switch s.kind {
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
	case kindDecimal:
		return "number"
	}
	return "string"
}

// HelpDefault is the default as --help shows it: quoted as
// flag.PrintDefaults quotes a string's, numbers, durations and booleans
// bare, a secret's never.
func (s *Setting) HelpDefault() string {
	switch s.kind {
	case kindSecret:
		return ""
	case kindString, kindURL, kindAddr, kindChoice:
		if s.def != "" {
			return strconv.Quote(s.def)
		}
	}
	return s.def
}

// all lists every setting, in the order --help shows them.
var all []*Setting

func add(s Setting) *Setting {
	all = append(all, &s)
	return &s
}

// All returns every setting, in the order --help shows them.
func All() []*Setting { return append([]*Setting(nil), all...) }

// The settings, in the order --help shows them.
var (
	ListenAddr               = add(Setting{env: "LISTEN_ADDR", def: ":8080", kind: kindAddr, help: "address the gateway listens on: host:port, or a port alone; when unset, PORT (set by most container platforms) gives the port"})
	Providers                = add(Setting{env: "PROVIDERS", kind: kindList, choices: []string{"deepseek", "openai"}, help: "providers to enable, comma-separated (deepseek, openai); empty enables each provider whose key or base URL is set, and the built-in simulated model when none is"})
	DeepseekAPIKey           = add(Setting{env: "DEEPSEEK_API_KEY", kind: kindSecret, help: "DeepSeek key the gateway sends; empty passes the client's own Authorization through"})
	DeepseekBaseURL          = add(Setting{env: "DEEPSEEK_BASE_URL", def: "https://api.deepseek.com", kind: kindURL, help: "DeepSeek API root"})
	OpenaiAPIKey             = add(Setting{env: "OPENAI_API_KEY", kind: kindSecret, help: "OpenAI key the gateway sends; empty passes the client's own Authorization through"})
	OpenaiBaseURL            = add(Setting{env: "OPENAI_BASE_URL", def: "https://api.openai.com/v1", kind: kindURL, help: "OpenAI (or any OpenAI-compatible) API root"})
	AdminListenAddr          = add(Setting{env: "ADMIN_LISTEN_ADDR", kind: kindAddr, help: "address of a listener of its own for /metrics, /debug/ and the health routes (host:port or a port alone); empty serves them beside the client routes"})
	MetricsRequireAdminKey   = add(Setting{env: "METRICS_REQUIRE_ADMIN_KEY", def: "auto", kind: kindChoice, choices: []string{"auto", "true", "false"}, help: "serve /metrics only to a client presenting ADMIN_API_KEY as a bearer token: true, false, or auto (true when PHASEGATE_API_KEYS is set and ADMIN_LISTEN_ADDR is not)"})
	AdminAPIKey              = add(Setting{env: "ADMIN_API_KEY", kind: kindSecret, help: "key that opens the admin routes (GET /debug/requests/{request_id}: a recent request's trace events) to a client presenting it as a bearer token; empty keeps them closed"})
	TwoStageEnabled          = add(Setting{env: "TWO_STAGE_ENABLED", def: "true", kind: kindBool, help: "enable the two-stage tool-loop guard; false makes /two-stage/... answer 501 and every route pass through"})
	DefaultProtocol          = add(Setting{env: "DEFAULT_PROTOCOL", def: "two-stage", kind: kindChoice, choices: []string{"two-stage", "standard"}, help: "protocol of /v1/chat/completions: two-stage or standard"})
	MaxPhaseCycles           = add(Setting{env: "MAX_PHASE_CYCLES", def: "3", kind: kindInt, min: 1, help: "tool executions allowed per user turn before the final answer is forced"})
	MaxDuplicateAttempts     = add(Setting{env: "MAX_DUPLICATE_ATTEMPTS", def: "3", kind: kindInt, min: 1, help: "refused tool calls (duplicates, malformed, undeclared, ...) allowed per request before the final answer is forced"})
	MaxToolsPerToolPhase     = add(Setting{env: "MAX_TOOLS_PER_TOOL_PHASE", def: "1", kind: kindChoice, choices: []string{"1"}, help: "tool calls forwarded per response (only 1 is supported)"})
	MaxEnvelopeRetries       = add(Setting{env: "MAX_ENVELOPE_RETRIES", def: strconv.Itoa(protocol.DefaultMaxEnvelopeRetries), kind: kindInt, help: "re-asks of an answer whose orchestrator envelope is invalid, or missing when required (X-Phasegate-Envelope, or envelopes: models: in the config file); 0 asks none again"})
	ShowNotices              = add(Setting{env: "SHOW_NOTICES", def: "true", kind: kindBool, help: "show the client one line per guard decision, as \"**System Notice**\" content (the model gets the full notice either way)"})
	GuardProfile             = add(Setting{env: "GUARD_PROFILE", def: string(protocol.ProfileStrict), kind: kindChoice, choices: []string{string(protocol.ProfileStrict), string(protocol.ProfileAgent)}, help: "the guard's rules: strict (MAX_PHASE_CYCLES executions per turn, exact repeats refused) or agent (for coding agents: any call may repeat while its result changes; loops are refused once they wasted their calls: repeats up to form, cycles of 2 to 4 calls, a tool failing in a row with the same error; AGENT_MAX_PHASE_CYCLES counts only executions that brought nothing new); per model with guard: models: in the config file; a request's X-Phasegate-Guard-Profile may only tighten it"})
	GuardMode                = add(Setting{env: "GUARD_MODE", def: string(protocol.ModeEnforce), kind: kindChoice, choices: []string{string(protocol.ModeEnforce), string(protocol.ModeObserve)}, help: "enforce (the guard refuses, re-asks and forces final answers) or observe (every request passes through unchanged; the guard judges the calls the client ran and counts what it would have done in phasegate_observed_tool_calls_total); per model with guard: modes: and per project with guard: projects: in the config file"})
	GuardRulesNotice         = add(Setting{env: "GUARD_RULES_NOTICE", def: "false", kind: kindBool, help: "state the guard's rules and budgets to the model in a system message at the start of every guarded upstream request, before any violation (it never enters the client's history); a request's X-Phasegate-Rules-Notice: true turns it on for that request"})
	GuardWholeAnswers        = add(Setting{env: "GUARD_WHOLE_ANSWERS", def: "false", kind: kindBool, help: "for a client that did not ask to stream, ask the upstream for a whole answer rather than a stream and apply every guard rule to the whole answer: less CPU per small answer, but the guard can no longer stop the model at its first complete tool call or cut a degenerate answer early, so the upstream generates (and bills) the whole answer"})
	AgentMaxPhaseCycles      = add(Setting{env: "AGENT_MAX_PHASE_CYCLES", def: strconv.Itoa(protocol.DefaultAgentMaxPhaseCycles), kind: kindInt, min: 1, help: "under GUARD_PROFILE=agent, tool executions per user turn that brought nothing new (their call and result were seen in the turn already) before the final answer is forced; executions that bring something new are not counted"})
	StrictDuplicates         = add(Setting{env: "STRICT_DUPLICATES", def: string(protocol.DuplicatesExact), kind: kindChoice, choices: []string{string(protocol.DuplicatesExact), string(protocol.DuplicatesResults)}, help: "how the strict profile judges a call identical to one executed in the turn: exact (always a duplicate, the protocol's rule) or results (progress when its result may have changed since: its last two runs differ, or a call since brought something new, such as an edit between two reads)"})
	MaxFailingStreak         = add(Setting{env: "MAX_FAILING_STREAK", def: strconv.Itoa(tools.DefaultMaxFailingStreak), kind: kindInt, min: 1, help: "under GUARD_PROFILE=agent, calls of one tool in a row that may fail with the same error before the next call of that tool is refused (failing_streak), whatever its arguments"})
	RepeatableTools          = add(Setting{env: "REPEATABLE_TOOLS", kind: kindList, help: "tools exempt from the duplicate rule while their results change (e.g. run_tests,git_status), comma-separated; an identical call whose last two identical calls returned the same result is refused as no progress"})
	PlanTools                = add(Setting{env: "PLAN_TOOLS", kind: kindList, help: "read-only tools of plan mode, comma-separated; requests with X-Phasegate-Mode: plan only see and may only call these"})
	ThinkingRepair           = add(Setting{env: "THINKING_REPAIR", def: "true", kind: kindBool, help: "repair requests to DeepSeek for its thinking mode: restore the reasoning_content clients drop from tool-call messages, downgrade a forced tool_choice to auto"})
	ThinkingMemoryBytes      = add(Setting{env: "THINKING_MEMORY_BYTES", def: strconv.Itoa(16 << 20), kind: kindInt, help: "memory bound of the reasoning_content remembered by tool call id, in bytes"})
	ThinkingMemoryTTL        = add(Setting{env: "THINKING_MEMORY_TTL", def: "1h", kind: kindDuration, help: "how long a remembered reasoning_content is kept"})
	RedisURL                 = add(Setting{env: "REDIS_URL", kind: kindSecret, help: "Redis the replicas share (redis://[user:password@]host:port/db, rediss:// for TLS): remembered reasoning, rate limits and resumable streams; empty keeps them in this process"})
	RedisTimeout             = add(Setting{env: "REDIS_TIMEOUT", def: store.DefaultTimeout.String(), kind: kindDuration, help: "bound on each read and write of a call to Redis a request waits for (a call is retried once); more than 0"})
	RedisBreakerCooldown     = add(Setting{env: "REDIS_BREAKER_COOLDOWN", def: store.DefaultBreakerCooldown.String(), kind: kindDuration, help: "after " + strconv.Itoa(store.DefaultBreakerFailures) + " calls in a row that Redis does not answer, how long every call skips Redis (the documented degradation at once) before one call probes it; more than 0"})
	RateLimitKeyRPM          = add(Setting{env: "RATE_LIMIT_KEY_RPM", def: "0", kind: kindInt, help: "requests per minute of each client key (PHASEGATE_API_KEYS; without client keys, of each bearer token); 0 for no limit"})
	RateLimitKeyTPM          = add(Setting{env: "RATE_LIMIT_KEY_TPM", def: "0", kind: kindInt, help: "tokens per minute of each client key (the prompt estimate before the call, corrected with the reported usage after); 0 for no limit"})
	RateLimitProjectRPM      = add(Setting{env: "RATE_LIMIT_PROJECT_RPM", def: "0", kind: kindInt, help: "requests per minute of each project (with client keys, the key's project; without, X-Project-Id); 0 for no limit"})
	RateLimitProjectTPM      = add(Setting{env: "RATE_LIMIT_PROJECT_TPM", def: "0", kind: kindInt, help: "tokens per minute of each project; 0 for no limit"})
	RateLimitAddressRPM      = add(Setting{env: "RATE_LIMIT_ADDRESS_RPM", def: "0", kind: kindInt, help: "requests per minute of each client address (an IPv6 address counts as its /64; see TRUSTED_PROXIES); 0 for no limit"})
	RateLimitAddressTPM      = add(Setting{env: "RATE_LIMIT_ADDRESS_TPM", def: "0", kind: kindInt, help: "tokens per minute of each client address; 0 for no limit"})
	ForwardHeaders           = add(Setting{env: "FORWARD_HEADERS", kind: kindList, help: "client request headers passed upstream beside the built-in allowlist, comma-separated (a name ending in - is a prefix); credentials, billing selectors, framing headers and content codings (Accept-Encoding, Content-Encoding, Range) cannot be named"})
	TrustedProxies           = add(Setting{env: "TRUSTED_PROXIES", kind: kindList, help: "addresses and CIDR ranges of the proxies whose X-Forwarded-For names the client for the address limits, comma-separated; empty believes no X-Forwarded-For"})
	RateLimitFailOpen        = add(Setting{env: "RATE_LIMIT_FAIL_OPEN", def: "true", kind: kindBool, help: "when Redis fails, let requests through unlimited (true) or refuse them with 503 (false)"})
	ResumableStreams         = add(Setting{env: "RESUMABLE_STREAMS", def: "false", kind: kindBool, help: "make every stream resumable, as if it sent X-Phasegate-Resumable: true"})
	ResumeTTL                = add(Setting{env: "RESUME_TTL", def: proxy.DefaultResumeTTL.String(), kind: kindDuration, help: "how long the events of a resumable stream are kept after its last"})
	ResumeMaxBytes           = add(Setting{env: "RESUME_MAX_BYTES", def: strconv.Itoa(proxy.DefaultResumeMaxBytes), kind: kindInt, min: 1, help: "bound on the events kept of one resumable stream, in bytes; a stream whose client left is ended there"})
	ResumeMemoryBytes        = add(Setting{env: "RESUME_MEMORY_BYTES", def: strconv.Itoa(proxy.DefaultResumeMemoryBytes), kind: kindInt, min: 1, help: "bound on the events kept of all resumable streams together without Redis, in bytes; past it the logs of ended streams are forgotten first, then streams are served without resume"})
	SessionMaxToolCalls      = add(Setting{env: "SESSION_MAX_TOOL_CALLS", def: "0", kind: kindInt, help: "tool calls forwarded to the client that one agent session (X-Session-Id, X-Claude-Code-Session-Id, or SESSION_FROM) may make before its next request is its forced final answer; per model and project with sessions: in the config file, lowered by X-Phasegate-Session-Max-Tool-Calls; 0 for no limit"})
	SessionMaxTokens         = add(Setting{env: "SESSION_MAX_TOKENS", def: "0", kind: kindInt, help: "prompt tokens the provider's cache did not hold plus completion tokens one session may spend (cache reads count apart, in SESSION_MAX_USD); 0 for no limit"})
	SessionMaxUSD            = add(Setting{env: "SESSION_MAX_USD", def: "0", kind: kindDecimal, help: "US dollars one session may spend, by the price table (prices: in the config file; DeepSeek's published prices built in); 0 for no limit"})
	SessionIdleTTL           = add(Setting{env: "SESSION_IDLE_TTL", def: proxy.DefaultSessionIdleTTL.String(), kind: kindDuration, help: "how long a session is kept after its last request; its counters and any spent budget go with it; more than 0"})
	SessionOnCap             = add(Setting{env: "SESSION_ON_CAP", def: "answer", kind: kindChoice, choices: []string{"answer", "reject"}, help: "what a request of a session whose budget is spent gets: answer (the guard's forced final answer: no tools, a notice to sum up) or reject (429 with Retry-After)"})
	SessionFrom              = add(Setting{env: "SESSION_FROM", kind: kindList, choices: sessionSources(), help: "body fields that name a session when no X-Session-Id or X-Claude-Code-Session-Id header does, comma-separated in order of preference: " + strings.Join(sessionSources(), ", ")})
	SessionFailOpen          = add(Setting{env: "SESSION_FAIL_OPEN", def: "true", kind: kindBool, help: "when the store of sessions (Redis) fails, serve a session's requests unchecked (true) or refuse them with 503 (false)"})
	SessionMemoryBytes       = add(Setting{env: "SESSION_MEMORY_BYTES", def: strconv.Itoa(store.DefaultSessionMemoryBytes), kind: kindInt, min: 1, help: "bound on the sessions kept without Redis, in bytes (and at most " + strconv.Itoa(store.DefaultMaxSessions) + " sessions); past it the least recently used go first"})
	ResponsesTTL             = add(Setting{env: "RESPONSES_TTL", def: proxy.DefaultResponsesTTL.String(), kind: kindDuration, help: "how long a stored response of the Responses API (store: true, the default) is kept for previous_response_id, item_reference and GET /v1/responses/{id}"})
	HostedTools              = add(Setting{env: "HOSTED_TOOLS", def: proxy.HostedDrop, kind: kindChoice, choices: []string{proxy.HostedDrop, proxy.HostedRefuse}, help: "what the Responses API does with a tool a chat upstream cannot run (web_search, file_search, code_interpreter, computer use, image_generation, local_shell, mcp, ...): drop (left out of the upstream request and named in X-Phasegate-Dropped) or refuse (a 400 naming it)"})
	ReasoningKey             = add(Setting{env: "REASONING_KEY", kind: kindSecret, help: "32 bytes in base64 (openssl rand -base64 32) that seal the reasoning of answers into the encrypted_content of the Responses API's reasoning items (include: reasoning.encrypted_content) and open them when a client sends them back; every replica must share one; empty makes one at start that only this process can open"})
	ContextWindow            = add(Setting{env: "CONTEXT_WINDOW", def: "0", kind: kindInt, help: "context window in tokens of every model, overriding the built-in and configured windows; 0 keeps them"})
	HistoryWindow            = add(Setting{env: "HISTORY_WINDOW", def: "0", kind: kindInt, help: "keep at most the last N non-system messages of every history (whole tool-call units); 0 keeps all that fit"})
	ToolResultMaxTokens      = add(Setting{env: "TOOL_RESULT_MAX_TOKENS", def: "16384", kind: kindInt, help: "when a history does not fit, tool results longer than this are shortened in the middle first; 0 never shortens"})
	TokenCacheBytes          = add(Setting{env: "TOKEN_CACHE_BYTES", def: strconv.Itoa(tokens.DefaultCacheBytes), kind: kindInt, help: "memory bound of the token-count cache, in bytes"})
	MaxBodyBytes             = add(Setting{env: "MAX_BODY_BYTES", def: strconv.Itoa(proxy.DefaultMaxBodyBytes), kind: kindInt, help: "largest request body accepted, in bytes"})
	MaxInflightBytes         = add(Setting{env: "MAX_INFLIGHT_BYTES", def: strconv.Itoa(proxy.DefaultMaxInflightBytes), kind: kindInt, min: 1, help: "memory bound of all requests in flight together, in bytes, counted as 8 times their body bytes; a request past it is answered 503 with Retry-After"})
	MaxInflightShare         = add(Setting{env: "MAX_INFLIGHT_SHARE", def: strconv.Itoa(proxy.DefaultMaxInflightShare), kind: kindInt, min: 1, help: "percentage of MAX_INFLIGHT_BYTES the bodies in flight of one client key (of one client address without client keys) may hold, never less than one body of MAX_BODY_BYTES; past it that client's next body is answered 429 while others are served; 100 shares nothing"})
	MinBodyRate              = add(Setting{env: "MIN_BODY_RATE", def: strconv.FormatInt(proxy.DefaultMinBodyRate().BytesPerSecond, 10), kind: kindInt, help: "least average rate of a request body, in bytes per second, once MIN_BODY_RATE_GRACE has passed since its first byte; a slower body is answered 408 before BODY_READ_TIMEOUT; 0 sets no least rate"})
	MinBodyRateGrace         = add(Setting{env: "MIN_BODY_RATE_GRACE", def: proxy.DefaultMinBodyRate().Grace.String(), kind: kindDuration, help: "how long a request body may arrive slower than MIN_BODY_RATE from its first byte before the rate applies"})
	MaxEventBytes            = add(Setting{env: "MAX_EVENT_BYTES", def: strconv.Itoa(proxy.DefaultMaxEventBytes), kind: kindInt, help: "largest upstream SSE event accepted, in bytes"})
	UpstreamConnectTimeout   = add(Setting{env: "UPSTREAM_CONNECT_TIMEOUT", def: proxy.DefaultTimeouts().Connect.String(), kind: kindDuration, help: "bound on dialling an upstream and its TLS handshake"})
	UpstreamFirstByteTimeout = add(Setting{env: "UPSTREAM_FIRST_BYTE_TIMEOUT", def: proxy.DefaultTimeouts().FirstByte.String(), kind: kindDuration, help: "bound on the wait for an upstream's headers and first event (keep-alive comments do not count)"})
	UpstreamIdleTimeout      = add(Setting{env: "UPSTREAM_IDLE_TIMEOUT", def: proxy.DefaultTimeouts().Idle.String(), kind: kindDuration, help: "bound on the gap between two events of an upstream stream (keep-alive comments do not reset it)"})
	RequestTimeout           = add(Setting{env: "REQUEST_TIMEOUT", def: proxy.DefaultTimeouts().Request.String(), kind: kindDuration, help: "bound on one whole client request"})
	BodyReadTimeout          = add(Setting{env: "BODY_READ_TIMEOUT", def: proxy.DefaultTimeouts().Body.String(), kind: kindDuration, help: "bound on reading a request body, from its first byte to its last (never on the response); a slower body is answered 408"})
	UpstreamRetries          = add(Setting{env: "UPSTREAM_RETRIES", def: strconv.Itoa(proxy.DefaultRetry().Attempts), kind: kindInt, help: "new attempts of an upstream call that failed before any byte reached the client in a way safe to retry (connect failure, first-byte timeout, 429, 5xx), with jittered exponential backoff; 0 retries nothing"})
	UpstreamRetryMaxWait     = add(Setting{env: "UPSTREAM_RETRY_MAX_WAIT", def: proxy.DefaultRetry().MaxWait.String(), kind: kindDuration, help: "longest wait before a retry; an upstream's Retry-After longer than this is not waited for"})
	ModelFallbacks           = add(Setting{env: "MODEL_FALLBACKS", kind: kindList, help: "fallback models, comma-separated, each MODEL=FALLBACK (MODEL may end in * for a prefix), e.g. deepseek-v4-pro=deepseek-v4-flash: a request whose retries are spent before any byte reached the client goes to FALLBACK, routed like any model"})
	PhasegateAPIKeys         = add(Setting{env: "PHASEGATE_API_KEYS", kind: kindSecret, help: "client keys, comma-separated, each KEY or KEY:PROJECT; when set, a request must present one as a bearer token (never sent upstream), and its project is the key's, whatever X-Project-Id says (key-N for the Nth key when it names none)"})
	PassthroughEndpoints     = add(Setting{env: "PASSTHROUGH_ENDPOINTS", def: strings.Join(trimSlashes(proxy.DefaultPassThrough()), ","), kind: kindList, help: "other /v1 endpoints passed through with the gateway's own key, comma-separated, each METHOD PATH (a path prefix such as /embeddings; * as the method allows any) or a bare PATH for GET, HEAD and POST; * as the path allows any; a client calling with its own key reaches any"})
	ShutdownDrainDelay       = add(Setting{env: "SHUTDOWN_DRAIN_DELAY", def: "5s", kind: kindDuration, help: "on SIGTERM or SIGINT, how long /readyz answers 503 while the gateway still accepts and serves, so a load balancer stops sending before the listener closes; 0 closes it at once"})
	ShutdownTimeout          = add(Setting{env: "SHUTDOWN_TIMEOUT", def: "30s", kind: kindDuration, help: "how long a shutdown waits for in-flight streams, once the drain delay is over"})
	LogLevel                 = add(Setting{env: "LOG_LEVEL", def: "info", kind: kindChoice, choices: []string{"debug", "info", "warn", "error"}, help: "debug, info, warn or error"})
)

// aliases are other names of settings, as the protocol's first write-up
// spelt them: each is read from the environment and the config file like
// the setting itself. Both names set to different values in the same
// place is an error.
var aliases = map[string]*Setting{
	"TWO_STAGE_MAX_CYCLES":     MaxPhaseCycles,
	"TWO_STAGE_MAX_DUPLICATES": MaxDuplicateAttempts,
}

// From is where a value came from.
type From int

// The places a value comes from, in rising precedence.
const (
	FromDefault From = iota
	FromFile
	FromEnv
	FromFlag
)

// Source is where a value came from, so that an error names the setting
// as the user wrote it: the flag, the variable, or the file key and its
// line.
type Source struct {
	From From
	File string
	Line int
	// alias is the other name the value was given under, "" for the
	// setting's own.
	alias string
}

// Value is one setting's value as written and where it came from.
type Value struct {
	Raw string
	Source
}

// written returns a setting with its value as the user wrote it:
// --max-phase-cycles=-1, MAX_PHASE_CYCLES=-1, or
// phasegate.yaml:2: max_phase_cycles: -1. A secret's value never shows.
func (s *Setting) written(v Value) string {
	env, key := s.env, s.Key()
	if v.alias != "" {
		env, key = v.alias, strings.ToLower(v.alias)
	}
	raw := v.Raw
	if s.kind == kindSecret {
		raw = "[redacted]"
	} else if raw == "" || strings.ContainsAny(raw, " \t\"'") {
		raw = strconv.Quote(raw)
	}
	switch v.From {
	case FromFlag:
		return "--" + s.Flag() + "=" + raw
	case FromEnv:
		return env + "=" + raw
	case FromFile:
		return fmt.Sprintf("%s:%d: %s: %s", v.File, v.Line, key, raw)
	}
	return fmt.Sprintf("%s (default %s)", env, raw)
}

func trimSlashes(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = strings.Trim(p, "/")
	}
	return out
}
