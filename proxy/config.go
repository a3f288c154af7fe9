package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/phasegate/phasegate/pricing"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/responses"
)

// Secret is a credential. It prints, formats and logs as "[redacted]", so a
// config dump or a log line never carries it.
type Secret string

// String redacts.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString redacts.
func (s Secret) GoString() string { return s.String() }

// LogValue redacts.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText redacts.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Reveal returns the credential itself, for the one place that sends it.
func (s Secret) Reveal() string { return string(s) }

// Provider is one upstream: an OpenAI-compatible base URL and the key the
// gateway holds for it. With no key, the client's own Authorization header
// is passed through.
type Provider struct {
	// Name identifies the provider in routes, logs and metrics labels.
	Name string
	// BaseURL is the API root, e.g. https://api.deepseek.com; request paths
	// such as /chat/completions are appended to it.
	BaseURL string
	// APIKey is sent as a bearer token when set.
	APIKey Secret
	// Simulated marks the built-in simulated model.
	Simulated bool
}

// Route sends the models that match Pattern to Provider. Pattern is a model
// name, or a prefix ending in "*".
type Route struct {
	Pattern  string
	Provider string
}

// EnvelopeRule sets the envelope rule of the models that match Pattern (a
// name, or a prefix ending in "*").
type EnvelopeRule struct {
	Pattern string
	Mode    protocol.EnvelopeMode
}

// Fallback sends the models that match Pattern (a name, or a prefix
// ending in "*") to Model once their retries are spent.
type Fallback struct {
	Pattern string
	Model   string
}

// Timeouts bound the waits on an upstream. Zero disables a bound.
type Timeouts struct {
	// Connect bounds dialling and the TLS handshake. Default 10s.
	Connect time.Duration
	// FirstByte bounds the wait for the response headers and, on a stream,
	// for its first event. DeepSeek may hold a request for minutes, sending
	// ": keep-alive" comments, before inference starts. Default 10m.
	FirstByte time.Duration
	// Idle bounds the gap between two events of a stream once it has
	// started. Keep-alive comments do not reset it. Default 2m.
	Idle time.Duration
	// Request bounds one whole client request. Default 30m.
	Request time.Duration
	// Body bounds the read of a request body, from its first read to its
	// end, and never reaches past Request: a body that trickles in is
	// answered 408 (BODY_READ_TIMEOUT). It bounds the reads of the body
	// only, never a response stream. Default 30s.
	Body time.Duration
}

// Config is what the proxy needs; cmd/phasegate builds it from flags, the
// environment and the config file, and Validate checks it once.
type Config struct {
	// Providers are the upstreams, in order of preference.
	Providers []Provider
	// Routes map models to providers, first match wins. Models no route
	// names go to "deepseek" when they start with "deepseek-", else to
	// "openai", else to the first provider.
	Routes []Route
	// MaxBodyBytes bounds a request body. Default 16 MiB.
	MaxBodyBytes int64
	// MaxEventBytes bounds one upstream SSE event; large tool arguments
	// arrive in one event from some providers. Default 8 MiB.
	MaxEventBytes int
	// MaxResponseBytes bounds a non-streaming upstream body. Default 64 MiB.
	MaxResponseBytes int64
	// MaxInflightBytes bounds the memory all requests in flight may hold
	// together, counted as InflightFactor times the bytes of their bodies
	// (the Content-Length when sent, else as they are read); a request
	// past it is answered 503 with Retry-After (MAX_INFLIGHT_BYTES).
	// Default 1 GiB.
	MaxInflightBytes int64
	Timeouts         Timeouts
	// Limits bound the shape of a chat request; zero fields take
	// DefaultLimits.
	Limits Limits
	// PassThrough lists the other /v1 endpoints passed through to a
	// provider for which the gateway holds a key (PASSTHROUGH_ENDPOINTS),
	// each a method and a path prefix below /v1 ("POST /embeddings",
	// "DELETE /models"), or a bare path for GET, HEAD and POST; "*" as the
	// path allows any path, as the method any method. Nil means
	// DefaultPassThrough. A client calling with its own key may reach any
	// endpoint: it spends its own account.
	PassThrough []string
	// ClientKeys, when any, are the keys a client must present (as a
	// bearer token) to use the gateway (PHASEGATE_API_KEYS); they are
	// never sent upstream, so every provider needs a key of its own.
	ClientKeys []ClientKey
	// Fallbacks map a model (a name, or a prefix ending in "*") to the
	// model a request falls back to once its retries are spent before any
	// byte reached the client (MODEL_FALLBACKS). The fallback is routed
	// like any model; one on another provider is used only when the
	// gateway holds that provider's key, so a client's own key never goes
	// to a provider its model does not route to.
	Fallbacks []Fallback
	// Envelopes set the orchestrator envelope rule of the guard's answers
	// per model (a name, or a prefix ending in "*"), first match wins; the
	// X-Phasegate-Envelope header of a request overrides it.
	Envelopes []EnvelopeRule
	// GuardProfile is the guard's rules for a request no GuardProfiles
	// rule matches (GUARD_PROFILE); "" is protocol.ProfileStrict.
	GuardProfile protocol.Profile
	// GuardProfiles set the profile per model (a name, or a prefix ending
	// in "*"), first match wins; the X-Phasegate-Guard-Profile header of a
	// request may only tighten it.
	GuardProfiles []ProfileRule
	// GuardMode is whether the guard acts on its verdicts for a request
	// no GuardProjectModes or GuardModes rule matches (GUARD_MODE); "" is
	// protocol.ModeEnforce.
	GuardMode protocol.Mode
	// GuardModes set the mode per model (a name, or a prefix ending in
	// "*"), first match wins.
	GuardModes []ModeRule
	// GuardProjectModes set the mode per project (X-Project-Id, or the
	// client key's project); they take precedence over GuardModes, so
	// enforcement can be rolled out project by project.
	GuardProjectModes map[string]protocol.Mode
	// Retry bounds the new attempts of an upstream call that failed in a
	// way safe to retry before any byte reached the client
	// (UPSTREAM_RETRIES, UPSTREAM_RETRY_MAX_WAIT). The zero value retries
	// nothing; DefaultRetry is what phasegate starts with.
	Retry protocol.Retry
	// AdminAPIKey, when set, opens the admin routes (GET
	// /debug/requests/{request_id}) to a client that presents it as a
	// bearer token; empty keeps them closed (404).
	AdminAPIKey Secret
	// MetricsNeedAdminKey puts GET /metrics behind AdminAPIKey too
	// (METRICS_REQUIRE_ADMIN_KEY=true). Left false, /metrics is open, as
	// Prometheus scrapes expect, unless the gateway has client keys and
	// serves /metrics beside the client routes: then it needs the admin
	// key all the same, unless MetricsOpen.
	MetricsNeedAdminKey bool
	// MetricsOpen keeps GET /metrics open beside the client routes even
	// with client keys (METRICS_REQUIRE_ADMIN_KEY=false).
	MetricsOpen bool
	// TrustedProxies are the addresses and CIDR ranges (TRUSTED_PROXIES)
	// whose X-Forwarded-For is believed for the client address of the
	// address limits; empty believes none, and the address is the peer's.
	TrustedProxies []string
	// ForwardHeaders names client request headers passed upstream beside
	// the built-in allowlist (FORWARD_HEADERS), such as a tracing or
	// routing header of the operator's own; a name ending in "-" is a
	// prefix. Credentials, billing selectors and framing headers cannot be
	// named.
	ForwardHeaders []string
	// RateLimits are the budgets per minute of each client key and each
	// project; zero limits nothing.
	RateLimits RateLimits
	// Resume is how resumable streams are kept.
	Resume Resume
	// ResponsesTTL is how long a stored response of the Responses API is
	// kept (RESPONSES_TTL). Default DefaultResponsesTTL.
	ResponsesTTL time.Duration
	// HostedTools is what the Responses API does with a tool a chat
	// upstream cannot run (web search, file search, ...; HOSTED_TOOLS):
	// HostedDrop ("" too) drops it and names it in X-Phasegate-Dropped,
	// HostedRefuse answers 400.
	HostedTools string
	// ReasoningKey seals the reasoning of answers into the
	// encrypted_content of the Responses API's reasoning items, for a
	// client that asks for it (include: reasoning.encrypted_content) and
	// sends them back (REASONING_KEY): 32 bytes in base64. Empty is a key
	// generated at start, which only this process can open: replicas must
	// share one.
	ReasoningKey Secret
	// SeparateAdmin serves /metrics and /debug/ only through
	// Handler.Admin, for a listener of their own (ADMIN_LISTEN_ADDR); the
	// client routes then answer 404 for them.
	SeparateAdmin bool
	// Sessions are the budgets of agent sessions (proxy/session.go).
	Sessions Sessions
	// Prices price the models, before the built-in prices (pricing.New).
	Prices []pricing.Rule
}

// RateLimits are budgets per minute, each 0 for none. A key's budget is
// per client key (PHASEGATE_API_KEYS; without client keys, per bearer
// token the client sends, or one budget for requests with none); a
// project's is per project id (with client keys, the key's project, see
// ClientKey; without, X-Project-Id); an address's per client address.
// Tokens are the prompt estimate taken before the call, corrected with
// the reported usage after.
type RateLimits struct {
	// KeyRequests, KeyTokens: RATE_LIMIT_KEY_RPM, RATE_LIMIT_KEY_TPM.
	KeyRequests, KeyTokens int
	// ProjectRequests, ProjectTokens: RATE_LIMIT_PROJECT_RPM,
	// RATE_LIMIT_PROJECT_TPM.
	ProjectRequests, ProjectTokens int
	// AddressRequests, AddressTokens: RATE_LIMIT_ADDRESS_RPM,
	// RATE_LIMIT_ADDRESS_TPM, per client address (an IPv6 address counts
	// as its /64); see Config.TrustedProxies for when X-Forwarded-For
	// names it.
	AddressRequests, AddressTokens int
	// FailOpen lets requests through when the store of the limits fails
	// (RATE_LIMIT_FAIL_OPEN, default true); false answers 503.
	FailOpen bool
}

// any reports whether any limit is set.
func (l RateLimits) any() bool {
	return l.KeyRequests+l.KeyTokens+l.ProjectRequests+l.ProjectTokens+l.AddressRequests+l.AddressTokens > 0
}

// Resume says how resumable streams are kept.
type Resume struct {
	// All makes every stream resumable (RESUMABLE_STREAMS); otherwise a
	// stream opts in with X-Phasegate-Resumable: true.
	All bool
	// TTL is how long the events of a stream are kept after its last
	// (RESUME_TTL). Default 10m.
	TTL time.Duration
	// MaxBytes bounds the events kept of one stream; a stream whose
	// client left is ended there (RESUME_MAX_BYTES). Default 16 MiB.
	MaxBytes int64
	// MemoryBytes bounds the events kept of all streams together when
	// they are kept in this process (RESUME_MEMORY_BYTES): past it, the
	// logs of streams that ended are forgotten first, then a stream is
	// served without resume, or its later events are not kept. Default
	// 256 MiB.
	MemoryBytes int64
}

// Defaults of Resume.
const (
	DefaultResumeTTL         = 10 * time.Minute
	DefaultResumeMaxBytes    = 16 << 20
	DefaultResumeMemoryBytes = 256 << 20
)

// Retry is DefaultRetry with attempts new calls and waits of at most
// maxWait.
func Retry(attempts int, maxWait time.Duration) protocol.Retry {
	r := DefaultRetry()
	r.Attempts, r.MaxWait = attempts, maxWait
	return r
}

// DefaultPassThrough returns the endpoints passed through with the gateway's
// own keys by default: read-only and inference ones (GET /models holds
// GET /models/{id}). Files, batches, fine-tunes and deletions (DELETE
// /models/{id} deletes a fine-tuned model) would open the operator's
// account to anyone who can reach the gateway.
func DefaultPassThrough() []string {
	return []string{"GET /models", "POST /embeddings", "POST /moderations"}
}

// DefaultRetry returns the retries phasegate starts with: a failed upstream call is retried twice, after a jittered
// 250 ms then 500 ms, or the upstream's Retry-After up to 10 s.
func DefaultRetry() protocol.Retry {
	return protocol.Retry{Attempts: 2, Base: 250 * time.Millisecond, MaxWait: 10 * time.Second}
}

// Defaults for Config fields left zero.
const (
	DefaultMaxBodyBytes     = 16 << 20
	DefaultMaxEventBytes    = 8 << 20
	DefaultMaxResponseBytes = 64 << 20
	DefaultMaxInflightBytes = 1 << 30
)

// InflightFactor is what a request in flight is charged per byte of its
// body: reading and decoding an agent's request allocate about 8.4 times
// its bytes (BenchmarkCheckBody, scan+parse: 347 KB for 41 KB), which
// bounds what it holds.
const InflightFactor = 8

// DefaultTimeouts returns the timeouts phasegate starts with. A zero Timeouts
// disables every bound, which suits tests, not production.
func DefaultTimeouts() Timeouts {
	return Timeouts{Connect: 10 * time.Second, FirstByte: 10 * time.Minute, Idle: 2 * time.Minute, Request: 30 * time.Minute, Body: 30 * time.Second}
}

// Values of Config.HostedTools.
const (
	HostedDrop   = "drop"
	HostedRefuse = "refuse"
)

// ErrInvalidConfig wraps every configuration problem Validate finds.
var ErrInvalidConfig = errors.New("invalid configuration")

// WithDefaults fills zero fields with their defaults.
func (c Config) WithDefaults() Config {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxEventBytes == 0 {
		c.MaxEventBytes = DefaultMaxEventBytes
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = DefaultMaxInflightBytes
	}
	c.Limits = c.Limits.withDefaults()
	if c.Resume.TTL == 0 {
		c.Resume.TTL = DefaultResumeTTL
	}
	if c.Resume.MaxBytes == 0 {
		c.Resume.MaxBytes = DefaultResumeMaxBytes
	}
	if c.Resume.MemoryBytes == 0 {
		c.Resume.MemoryBytes = DefaultResumeMemoryBytes
	}
	if c.ResponsesTTL == 0 {
		c.ResponsesTTL = DefaultResponsesTTL
	}
	if c.Sessions.Rules.Global.IdleTTL == 0 {
		c.Sessions.Rules.Global.IdleTTL = DefaultSessionIdleTTL
	}
	return c
}

// FieldError is a problem of one field of Config, named as the Go field
// ("MaxInflightBytes", "RateLimits.KeyRequests"), so that a caller can
// name the setting that gave it in its own terms.
type FieldError struct {
	Field   string
	Problem string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// Is makes every FieldError an ErrInvalidConfig.
func (e *FieldError) Is(target error) bool { return target == ErrInvalidConfig }

// Validate reports every problem of c: a *FieldError for each field at
// fault, an error wrapping ErrInvalidConfig for a problem of several.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	field := func(name, format string, args ...any) {
		errs = append(errs, &FieldError{Field: name, Problem: fmt.Sprintf(format, args...)})
	}
	c.validateProviders(bad)
	c.validateKeys(field)
	c.validateAccess(field)
	c.validateBounds(field)
	return errors.Join(errs...)
}

// validateProviders checks the providers and the routes to them.
func (c Config) validateProviders(bad func(format string, args ...any)) {
	if len(c.Providers) == 0 {
		bad("no provider configured")
	}
	names := map[string]bool{}
	for _, p := range c.Providers {
		if p.Name == "" {
			bad("a provider has no name")
		}
		if names[p.Name] {
			bad("provider %q is configured twice", p.Name)
		}
		names[p.Name] = true
		if err := checkBaseURL(p.BaseURL); err != nil {
			bad("provider %q: base URL: %v", p.Name, err)
		}
	}
	for _, r := range c.Routes {
		if r.Pattern == "" {
			bad("a route has no model pattern")
		}
		if !names[r.Provider] {
			bad("route %q names provider %q, which is not configured", r.Pattern, r.Provider)
		}
	}
}

// validateKeys checks the client keys, and that with them every provider
// has a key of the gateway's.
func (c Config) validateKeys(field func(name, format string, args ...any)) {
	seen := map[Secret]bool{}
	for i, k := range c.ClientKeys {
		switch {
		case strings.TrimSpace(k.Key.Reveal()) == "":
			field("ClientKeys", "client key %d is empty", i+1)
		case seen[k.Key]:
			field("ClientKeys", "client key %d is given twice", i+1)
		}
		seen[k.Key] = true
	}
	if len(c.ClientKeys) > 0 {
		for _, p := range c.Providers {
			if p.APIKey == "" && !p.Simulated {
				field("ClientKeys", "provider %q has no API key: with client keys the client's Authorization is the gateway's and is never passed upstream", p.Name)
			}
		}
	}
}

// validateBounds checks the sizes, rates, retries and timeouts.
func (c Config) validateBounds(field func(name, format string, args ...any)) {
	for name, n := range map[string]int64{"MaxBodyBytes": c.MaxBodyBytes, "MaxEventBytes": int64(c.MaxEventBytes), "MaxInflightBytes": c.MaxInflightBytes,
		"RateLimits.KeyRequests": int64(c.RateLimits.KeyRequests), "RateLimits.KeyTokens": int64(c.RateLimits.KeyTokens),
		"RateLimits.ProjectRequests": int64(c.RateLimits.ProjectRequests), "RateLimits.ProjectTokens": int64(c.RateLimits.ProjectTokens),
		"RateLimits.AddressRequests": int64(c.RateLimits.AddressRequests), "RateLimits.AddressTokens": int64(c.RateLimits.AddressTokens),
		"Resume.MaxBytes": c.Resume.MaxBytes, "Resume.MemoryBytes": c.Resume.MemoryBytes, "Retry.Attempts": int64(c.Retry.Attempts)} {
		if n < 0 {
			field(name, "must not be negative")
		}
	}
	switch c.HostedTools {
	case "", HostedDrop, HostedRefuse:
	default:
		field("HostedTools", "must be %s or %s", HostedDrop, HostedRefuse)
	}
	if c.ReasoningKey != "" {
		if _, err := responses.ParseKey(c.ReasoningKey.Reveal()); err != nil {
			field("ReasoningKey", "%v", err)
		}
	}
	if c.MaxInflightBytes > 0 && c.MaxInflightBytes < InflightFactor*c.MaxBodyBytes {
		field("MaxInflightBytes", "must be at least %d times the largest body accepted (%d bytes): a body of the largest size could never be served", InflightFactor, c.MaxBodyBytes)
	}
	for name, d := range map[string]time.Duration{"Timeouts.Connect": c.Timeouts.Connect, "Timeouts.FirstByte": c.Timeouts.FirstByte, "Timeouts.Idle": c.Timeouts.Idle,
		"Timeouts.Request": c.Timeouts.Request, "Timeouts.Body": c.Timeouts.Body, "Resume.TTL": c.Resume.TTL, "ResponsesTTL": c.ResponsesTTL, "Retry.Base": c.Retry.Base, "Retry.MaxWait": c.Retry.MaxWait} {
		if d < 0 {
			field(name, "must not be negative")
		}
	}
}

// validateAccess checks the settings of who may reach what: the
// pass-through allowlist, the projects keys are bound to, the trusted
// proxies.
func (c Config) validateAccess(field func(name, format string, args ...any)) {
	for _, e := range c.PassThrough {
		if _, err := parsePassRule(e); err != nil {
			field("PassThrough", "%v", err)
		}
	}
	for i, k := range c.ClientKeys {
		if ownProjectForm(k.Project) {
			field("ClientKeys", "client key %d is bound to project %q: names key-N are kept for the projects of keys bound to none", i+1, k.Project)
		}
	}
	for _, name := range c.ForwardHeaders {
		if err := checkForwardable(name); err != nil {
			field("ForwardHeaders", "%v", err)
		}
	}
	for _, p := range c.TrustedProxies {
		if _, err := netip.ParsePrefix(p); err != nil {
			if _, err := netip.ParseAddr(p); err != nil {
				field("TrustedProxies", "%q is neither an IP address nor a CIDR range", p)
			}
		}
	}
}

func checkBaseURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: scheme must be http or https", s)
	}
	if u.Host == "" {
		return fmt.Errorf("%q: no host", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: must not have a query or fragment", s)
	}
	return nil
}

// provider picks the provider of a model.
func (c *Config) provider(model string) *Provider {
	for _, r := range c.Routes {
		if match(r.Pattern, model) {
			if p := c.byName(r.Provider); p != nil {
				return p
			}
		}
	}
	if strings.HasPrefix(model, "deepseek-") {
		if p := c.byName("deepseek"); p != nil {
			return p
		}
	}
	if p := c.byName("openai"); p != nil {
		return p
	}
	return &c.Providers[0]
}

func (c *Config) byName(name string) *Provider {
	for i := range c.Providers {
		if c.Providers[i].Name == name {
			return &c.Providers[i]
		}
	}
	return nil
}

func match(pattern, model string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(model, prefix)
	}
	return pattern == model
}

// endpoint joins a provider's base URL and an API path.
func endpoint(base, p string) string {
	u, _ := url.Parse(base) // validated at start
	u.Path = path.Join(u.Path, p)
	return u.String()
}
