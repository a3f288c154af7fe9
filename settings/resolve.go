package settings

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/phasegate/phasegate/envelope"
	"github.com/phasegate/phasegate/internal/redact"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/sim"
	"github.com/phasegate/phasegate/tokens"
)

// Settings is the resolved configuration of one run, every value typed
// and checked.
type Settings struct {
	ListenAddr string
	// AdminAddr, when set, is the listener of the admin routes alone.
	AdminAddr string
	// DrainDelay is how long /readyz answers 503, with the listener still
	// open, before the shutdown starts.
	DrainDelay time.Duration
	// ShutdownTimeout bounds the wait for in-flight requests once the
	// listener is closed.
	ShutdownTimeout time.Duration
	LogLevel        string
	Proxy           proxy.Config
	// Simulated is set when no provider is configured: the built-in
	// simulated model serves every model name.
	Simulated       bool
	TwoStage        bool
	ShowNotices     bool
	PlanTools       []string
	RepeatableTools []string
	// Profile is the guard's rules where guard: models: sets none.
	Profile              protocol.Profile
	RulesNotice          bool
	WholeAnswers         bool
	DefaultProtocol      string
	MaxPhaseCycles       int
	MaxDuplicateAttempts int
	AgentMaxPhaseCycles  int
	// StrictDuplicates is how the strict profile judges an exact repeat.
	StrictDuplicates protocol.Duplicates
	// MaxFailingStreak bounds a tool's failures in a row under the agent
	// profile.
	MaxFailingStreak int
	Tokens           tokens.Config
	ThinkingRepair   bool
	ThinkingBytes    int64
	ThinkingTTL      time.Duration
	// Envelopes are the phases envelopes are judged by; nil is the
	// orchestrator protocol's five.
	Envelopes       *envelope.Set
	EnvelopeRetries int
	// RedisURL, when set, is the Redis the replicas share.
	RedisURL proxy.Secret
	// Redactor removes every secret above from what leaves the gateway.
	Redactor *redact.Redactor
	// RedisTimeout and RedisCooldown bound the calls to it (see
	// store.RedisOptions).
	RedisTimeout, RedisCooldown time.Duration
	// SessionMemoryBytes bounds the sessions kept without Redis.
	SessionMemoryBytes int64

	// values are the settings' values and where each came from.
	values map[*Setting]Value
	// port is PORT's value, when it gave the address.
	port *Value
}

// Source returns the value of s as written and where it came from.
func (o Settings) Source(s *Setting) Value { return o.values[s] }

// Port returns the value of PORT when it gave the listen address.
func (o Settings) Port() (string, bool) {
	if o.port == nil {
		return "", false
	}
	return o.port.Raw, true
}

// Written returns s with its value as the user wrote it: the flag, the
// variable, or the file key and its line (PORT=8080 when PORT gave the
// listen address). A secret's value never shows.
func (o Settings) Written(s *Setting) string {
	if s == ListenAddr && o.port != nil {
		return "PORT=" + o.port.Raw
	}
	return s.written(o.values[s])
}

// Input is what Load reads the settings from, besides the defaults.
type Input struct {
	// Flags are the flags given, each as typed.
	Flags map[*Setting]string
	// ConfigPath is the YAML file, "" for none.
	ConfigPath string
	// Getenv reads the environment.
	Getenv func(string) string
}

// Load resolves every setting, flag over environment over file over
// default, and checks them once: each error names the setting as the
// user wrote it, and every problem is reported at once.
func Load(in Input) (Settings, error) {
	fc := fileConfig{scalars: map[string]Value{}}
	var fileErr error
	if in.ConfigPath != "" {
		if fc, fileErr = loadFile(in.ConfigPath); fc.scalars == nil {
			return Settings{}, fileErr
		}
	}
	values := map[*Setting]Value{}
	for _, s := range all {
		v := Value{Raw: s.def}
		if fv, in := fc.scalars[s.Key()]; in {
			v = fv
		}
		if av, ok := aliasValue(s, fc, in.Getenv, v); ok {
			v = av
		}
		if ev := in.Getenv(s.env); ev != "" {
			v = Value{Raw: ev, Source: Source{From: FromEnv}}
		}
		if raw, ok := in.Flags[s]; ok {
			v = Value{Raw: raw, Source: Source{From: FromFlag}}
		}
		values[s] = v
	}
	if err := aliasConflicts(fc, in.Getenv); err != nil {
		return Settings{}, err
	}
	r := &resolver{v: values}
	if values[ListenAddr].From == FromDefault {
		if port := in.Getenv("PORT"); port != "" {
			r.port = &Value{Raw: port, Source: Source{From: FromEnv}}
		}
	}
	o, err := r.resolve(fc)
	return o, inLineOrder(fc.path, errors.Join(fileErr, err))
}

// inLineOrder is err with the problems of the config file at path in the
// order of their lines, after those of the flags and the environment:
// the file is read section by section and checked value by value, and a
// reader fixes it from the top.
func inLineOrder(path string, err error) error {
	if err == nil || path == "" {
		return err
	}
	var all []error
	var flatten func(error)
	flatten = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				flatten(x)
			}
			return
		}
		all = append(all, e)
	}
	flatten(err)
	line := func(e error) int {
		rest, ok := strings.CutPrefix(e.Error(), path+":")
		if !ok {
			return 0
		}
		n, _ := strconv.Atoi(rest[:strings.IndexFunc(rest+":", func(r rune) bool { return r < '0' || r > '9' })])
		return n
	}
	slices.SortStableFunc(all, func(a, b error) int { return line(a) - line(b) })
	return errors.Join(all...)
}

// aliasValue is the value setting s was given under an alias, in the
// file or the environment, when it outranks v (the value from the file
// under the setting's own name, or the default): the environment outranks
// the file, and the setting's own name outranks its alias in the same
// place.
func aliasValue(s *Setting, fc fileConfig, getenv func(string) string, v Value) (Value, bool) {
	for alias, target := range aliases {
		if target != s {
			continue
		}
		if ev := getenv(alias); ev != "" {
			return Value{Raw: ev, Source: Source{From: FromEnv, alias: alias}}, true
		}
		if fv, in := fc.scalars[strings.ToLower(alias)]; in && v.From == FromDefault {
			fv.alias = alias
			return fv, true
		}
	}
	return Value{}, false
}

// aliasConflicts reports a setting given under its own name and an alias
// with different values, in the environment or in the file.
func aliasConflicts(fc fileConfig, getenv func(string) string) error {
	var errs []error
	for _, alias := range slices.Sorted(maps.Keys(aliases)) {
		name := aliases[alias].env
		if a, n := getenv(alias), getenv(name); a != "" && n != "" && a != n {
			errs = append(errs, fmt.Errorf("%s=%s and %s=%s name the same setting (%s is the older name of %s): set one", alias, a, name, n, alias, name))
		}
		a, aok := fc.scalars[strings.ToLower(alias)]
		n, nok := fc.scalars[strings.ToLower(name)]
		if aok && nok && a.Raw != n.Raw {
			errs = append(errs, fmt.Errorf("%s:%d: %s and %s name the same setting (%s is the older name of %s): set one", fc.path, a.Line,
				strings.ToLower(alias), strings.ToLower(name), strings.ToLower(alias), strings.ToLower(name)))
		}
	}
	return errors.Join(errs...)
}

// resolve checks every value, each error naming the setting as it was
// written and what it allows, and builds the settings.
func (r *resolver) resolve(fc fileConfig) (Settings, error) {
	o := r.gateway()
	o.Proxy = r.proxyConfig(o.AdminAddr != "")
	r.providers(&o, fc)
	o.Tokens = tokens.DefaultConfig()
	o.Tokens.ContextWindow = r.num(ContextWindow)
	o.Tokens.HistoryWindow = r.num(HistoryWindow)
	o.Tokens.ToolResultMaxTokens = r.num(ToolResultMaxTokens)
	o.Tokens.CacheBytes = int64(r.num(TokenCacheBytes))
	maps.Copy(o.Tokens.Models, fc.models)
	o.Proxy.Envelopes = fc.envelopes.rules
	o.Proxy.GuardProfile, o.Proxy.GuardProfiles = o.Profile, fc.guard.profiles
	o.Proxy.GuardModes, o.Proxy.GuardProjectModes = fc.guard.modes, fc.guard.projects
	o.Proxy.Sessions, o.Proxy.Prices = r.sessions(fc.sessions), fc.prices
	o.SessionMemoryBytes = int64(r.num(SessionMemoryBytes))
	if len(fc.envelopes.phases) > 0 {
		set, err := envelope.NewSet(fc.envelopes.phases)
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("%s: envelopes: phases: %w", fc.path, err))
		}
		o.Envelopes = set
	}
	if len(r.errs) > 0 {
		return o, errors.Join(r.errs...)
	}
	// Every value was checked above; what is left to fail here is what
	// the proxy alone knows, reported under the settings that gave it.
	if err := o.Proxy.WithDefaults().Validate(); err != nil {
		return o, r.proxyErrors(err)
	}
	o.Redactor = redact.New(secretValues(o.Proxy, o.RedisURL)...)
	return o, nil
}

// gateway reads the gateway's own settings and the guard's.
func (r *resolver) gateway() Settings {
	return Settings{
		ListenAddr:           r.listenAddr(),
		AdminAddr:            r.adminAddr(),
		DrainDelay:           r.dur(ShutdownDrainDelay),
		ShutdownTimeout:      r.dur(ShutdownTimeout),
		LogLevel:             r.choice(LogLevel),
		TwoStage:             r.boolean(TwoStageEnabled),
		ShowNotices:          r.boolean(ShowNotices),
		RulesNotice:          r.boolean(GuardRulesNotice),
		WholeAnswers:         r.boolean(GuardWholeAnswers),
		ThinkingRepair:       r.boolean(ThinkingRepair),
		ThinkingBytes:        int64(r.num(ThinkingMemoryBytes)),
		ThinkingTTL:          r.dur(ThinkingMemoryTTL),
		RedisURL:             r.redisURL(),
		RedisTimeout:         r.positiveDur(RedisTimeout),
		RedisCooldown:        r.positiveDur(RedisBreakerCooldown),
		DefaultProtocol:      r.choice(DefaultProtocol),
		PlanTools:            list(r.v[PlanTools].Raw),
		RepeatableTools:      list(r.v[RepeatableTools].Raw),
		Profile:              protocol.Profile(r.choice(GuardProfile)),
		MaxPhaseCycles:       r.num(MaxPhaseCycles),
		MaxDuplicateAttempts: r.num(MaxDuplicateAttempts),
		AgentMaxPhaseCycles:  r.num(AgentMaxPhaseCycles),
		StrictDuplicates:     protocol.Duplicates(r.choice(StrictDuplicates)),
		MaxFailingStreak:     r.num(MaxFailingStreak),
		EnvelopeRetries:      r.num(MaxEnvelopeRetries),
		values:               r.v,
		port:                 r.port,
	}
}

// proxyConfig reads the settings of the proxy but for its providers and
// routes.
func (r *resolver) proxyConfig(separateAdmin bool) proxy.Config {
	r.oneToolPerPhase()
	pc := proxy.Config{
		MaxBodyBytes:     int64(r.num(MaxBodyBytes)),
		MaxEventBytes:    r.num(MaxEventBytes),
		MaxInflightBytes: int64(r.num(MaxInflightBytes)),
		MaxInflightShare: r.num(MaxInflightShare),
		MinBodyRate:      proxy.BodyRate{BytesPerSecond: int64(r.num(MinBodyRate)), Grace: r.dur(MinBodyRateGrace)},
		Retry:            proxy.Retry(r.num(UpstreamRetries), r.dur(UpstreamRetryMaxWait)),
		ClientKeys:       clientKeys(r.v[PhasegateAPIKeys].Raw),
		PassThrough:      list(r.v[PassthroughEndpoints].Raw),
		Fallbacks:        r.fallbacks(),
		Timeouts: proxy.Timeouts{
			Connect:   r.dur(UpstreamConnectTimeout),
			FirstByte: r.dur(UpstreamFirstByteTimeout),
			Idle:      r.dur(UpstreamIdleTimeout),
			Request:   r.dur(RequestTimeout),
			Body:      r.dur(BodyReadTimeout),
		},
		AdminAPIKey:    proxy.Secret(r.v[AdminAPIKey].Raw),
		SeparateAdmin:  separateAdmin,
		RateLimits:     r.rateLimits(),
		Resume:         proxy.Resume{All: r.boolean(ResumableStreams), TTL: r.dur(ResumeTTL), MaxBytes: int64(r.num(ResumeMaxBytes)), MemoryBytes: int64(r.num(ResumeMemoryBytes))},
		ResponsesTTL:   r.dur(ResponsesTTL),
		HostedTools:    r.choice(HostedTools),
		ReasoningKey:   proxy.Secret(strings.TrimSpace(r.v[ReasoningKey].Raw)),
		TrustedProxies: list(r.v[TrustedProxies].Raw),
		ForwardHeaders: list(r.v[ForwardHeaders].Raw),
		GuardMode:      protocol.Mode(r.choice(GuardMode)),
	}
	metricsKey := r.choice(MetricsRequireAdminKey)
	pc.MetricsOpen = metricsKey == "false"
	if pc.MetricsNeedAdminKey = metricsKey == "true"; pc.MetricsNeedAdminKey && pc.AdminAPIKey == "" {
		r.bad(MetricsRequireAdminKey, "needs ADMIN_API_KEY: with no admin key, nobody could read /metrics")
	}
	return pc
}

// oneToolPerPhase checks MAX_TOOLS_PER_TOOL_PHASE: the guard forwards one
// tool call per response by design, so the setting takes 1 alone; it is
// kept so that configurations written with it still start.
func (r *resolver) oneToolPerPhase() {
	if strings.TrimSpace(r.v[MaxToolsPerToolPhase].Raw) != "1" {
		r.bad(MaxToolsPerToolPhase, "must be 1: the guard forwards one tool call per response, by design")
	}
}

func (r *resolver) rateLimits() proxy.RateLimits {
	return proxy.RateLimits{
		KeyRequests:     r.num(RateLimitKeyRPM),
		KeyTokens:       r.num(RateLimitKeyTPM),
		ProjectRequests: r.num(RateLimitProjectRPM),
		ProjectTokens:   r.num(RateLimitProjectTPM),
		AddressRequests: r.num(RateLimitAddressRPM),
		AddressTokens:   r.num(RateLimitAddressTPM),
		FailOpen:        r.boolean(RateLimitFailOpen),
	}
}

// simulated is the provider of the built-in simulated model.
var simulated = proxy.Provider{Name: "simulated", BaseURL: sim.BaseURL, Simulated: true}

// providers enables the providers (those named in PROVIDERS, else each
// whose key or base URL is set, else the simulated model) and the file's
// routes to them.
func (r *resolver) providers(o *Settings, fc fileConfig) {
	known := map[string]proxy.Provider{
		"deepseek": {Name: "deepseek", BaseURL: r.baseURL(DeepseekBaseURL), APIKey: proxy.Secret(r.v[DeepseekAPIKey].Raw)},
		"openai":   {Name: "openai", BaseURL: r.baseURL(OpenaiBaseURL), APIKey: proxy.Secret(r.v[OpenaiAPIKey].Raw)},
	}
	enabled := r.enabled(known)
	for _, name := range enabled {
		o.Proxy.Providers = append(o.Proxy.Providers, known[name])
	}
	o.Simulated = len(o.Proxy.Providers) == 0
	for _, rt := range fc.routes {
		if !slices.Contains(enabled, rt.provider) {
			rule := "is not enabled"
			if _, ok := known[rt.provider]; !ok {
				rule = "is not a provider: the providers are deepseek and openai"
			}
			r.errs = append(r.errs, fmt.Errorf("%s:%d: routes: model %s: provider %s %s", fc.path, rt.line, rt.model, rt.provider, rule))
			continue
		}
		o.Proxy.Routes = append(o.Proxy.Routes, rt.route())
	}
	if o.Simulated {
		o.Proxy.Providers = append(o.Proxy.Providers, simulated)
	}
}

// enabled returns the providers named in PROVIDERS, else each whose key
// or base URL is set.
func (r *resolver) enabled(known map[string]proxy.Provider) []string {
	var enabled []string
	names := list(r.v[Providers].Raw)
	for _, name := range names {
		if _, ok := known[name]; !ok {
			r.bad(Providers, fmt.Sprintf("unknown provider %q: the providers are deepseek and openai", name))
			continue
		}
		if !slices.Contains(enabled, name) {
			enabled = append(enabled, name)
		}
	}
	if len(names) > 0 {
		return enabled
	}
	for _, p := range []struct {
		name      string
		key, base *Setting
	}{{"deepseek", DeepseekAPIKey, DeepseekBaseURL}, {"openai", OpenaiAPIKey, OpenaiBaseURL}} {
		if r.v[p.key].From != FromDefault || r.v[p.base].From != FromDefault {
			enabled = append(enabled, p.name)
		}
	}
	return enabled
}

// secretValues lists every secret of a configuration, for the redactor:
// the keys, and the Redis URL with its password as written and as
// escaped.
func secretValues(pc proxy.Config, redisURL proxy.Secret) []string {
	var s []string
	for _, p := range pc.Providers {
		s = append(s, p.APIKey.Reveal())
	}
	for _, k := range pc.ClientKeys {
		s = append(s, k.Key.Reveal())
	}
	s = append(s, pc.AdminAPIKey.Reveal(), pc.ReasoningKey.Reveal())
	if raw := redisURL.Reveal(); raw != "" {
		s = append(s, raw)
		if u, err := url.Parse(raw); err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok {
				s = append(s, pw)
				if _, enc, ok := strings.Cut(u.User.String(), ":"); ok {
					s = append(s, enc)
				}
			}
		}
	}
	return s
}
