package metrics

import (
	"context"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the gateway's Prometheus collectors. Every label takes values
// from a fixed set the gateway defines (protocols, verdicts, budgets,
// configured provider names); no label ever carries user input. The zero
// value is not usable; build one with New. It is safe for concurrent use.
type Metrics struct {
	requests        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	inFlight        *prometheus.GaugeVec
	upstreamLatency *prometheus.HistogramVec
	upstreamErrors  *prometheus.CounterVec
	toolCalls       *prometheus.CounterVec
	budgets         *prometheus.CounterVec
	fallbacks       prometheus.Counter
	cycles          *prometheus.HistogramVec
	tokens          *prometheus.CounterVec
	truncations     *prometheus.CounterVec
	repairs         *prometheus.CounterVec
	transient       *prometheus.CounterVec
	retries         *prometheus.CounterVec
	modelFallbacks  prometheus.Counter
	leaked          *prometheus.CounterVec
	firstToken      *prometheus.HistogramVec
	overhead        *prometheus.HistogramVec
	modelTokens     *prometheus.CounterVec
	shared          sharedMetrics
	bounded         *prometheus.CounterVec
	inflightBytes   prometheus.Gauge
	rulesNotices    prometheus.Counter
	envelopes       *prometheus.CounterVec
	observed        *prometheus.CounterVec
	dropped         *prometheus.CounterVec
	sessions        sessionMetrics // metrics/sessions.go
	degenerate      *prometheus.CounterVec
	// models are the configured model names, the values of the model
	// label besides OtherModel.
	models []string
}

// Label values.
var (
	// Protocols are the values of the protocol label.
	Protocols = []string{"standard", "two-stage"}
	// Doors are the values of the door label: the API a request came by.
	Doors = []string{DoorChat, DoorResponses, DoorMessages}
	// Outcomes are the values of the outcome label of requests.
	Outcomes = []Outcome{OutcomeOK, OutcomeClientError, OutcomeUpstreamError, OutcomeGatewayError, OutcomeClientClosed}
	// Verdicts are the values of the verdict label of tool calls.
	Verdicts = []string{"forward", "duplicate", "malformed", "undeclared", "schema_invalid", "not_allowed", "no_progress", "cycle", "failing_streak", "dropped"}
	// ObservedVerdicts are the values of the verdict label of tool calls
	// judged in observe mode: the guard's verdicts, and over_cycle_budget
	// for a call made once the turn had spent its cycle budget.
	ObservedVerdicts = []string{"forward", "duplicate", "malformed", "undeclared", "schema_invalid", "not_allowed", "no_progress", "cycle", "failing_streak", "over_cycle_budget"}
	// Budgets are the values of the budget label: the turn's
	// (AGENT_MAX_PHASE_CYCLES is the agent profile's cycle budget), and the
	// session's (SessionCaps).
	Budgets = append([]string{"MAX_PHASE_CYCLES", "AGENT_MAX_PHASE_CYCLES", "MAX_DUPLICATE_ATTEMPTS"}, SessionCaps...)
	// TurnCycleBuckets are the buckets of phasegate_turn_cycles: the
	// strict profile's few executions one by one, then up to and past the
	// agent profile's budget (60 by default; the longest successful
	// public run makes 124 calls in a turn).
	TurnCycleBuckets = []float64{0, 1, 2, 3, 4, 5, 8, 13, 21, 34, 60, 100, 150}
	// DegenerateFields are the values of the field label of degenerate
	// text, and DegenerateOutcomes of its outcome label.
	DegenerateFields   = []string{"content", "reasoning_content"}
	DegenerateOutcomes = []string{"reasked", "finished"}
	// UpstreamErrorKinds are the values of the kind label of upstream errors.
	UpstreamErrorKinds = []string{UpstreamStatus4xx, UpstreamStatus5xx, UpstreamTimeout, UpstreamUnreachable, UpstreamTruncated, UpstreamInvalid}
	// TokenKinds are the values of the kind label of tokens.
	TokenKinds = []string{"prompt", "completion"}
	// TokenSources are the values of the source label of tokens: reported
	// by the upstream, or estimated by the gateway for a call it closed
	// before the upstream reported usage.
	TokenSources = []string{"reported", "estimated"}
	// RepairKinds are the values of the kind label of thinking-mode repairs.
	RepairKinds = []string{"reasoning_restored", "reasoning_emptied", "tool_choice_downgraded"}
	// TransientOutcomes are the values of the outcome label of transient
	// finishes: retried before any byte reached the client, or passed on.
	TransientOutcomes = []string{"retried", "passed_on"}
	// LeakOutcomes are the values of the outcome label of leaked tool calls.
	LeakOutcomes = []string{"recovered", "malformed"}
	// EnvelopeOutcomes are the values of the outcome label of orchestrator
	// envelopes: forwarded as written, forwarded repaired, asked again,
	// given up with the keyword fallback matching, given up with nothing
	// matching, not written where optional.
	EnvelopeOutcomes = []string{"valid", "repaired", "retried", "fallback", "invalid", "missing"}
	// EnvelopePhases are the phase label values every gateway has: the
	// orchestrator protocol's five phases, and none for an envelope with no
	// known phase. Phases added in the config file are label values too.
	EnvelopePhases = []string{"analysis", "task_list", "progress", "completion", "aggregation", "none"}
	// TruncationKinds are the values of the kind label of truncations.
	TruncationKinds = []string{"messages", "tokens", "shortened_results"}

	// FirstTokenBuckets are the buckets of
	// phasegate_time_to_first_token_seconds: 5 ms to 60 s, fine below a
	// second, where a simulated or cached answer lands, and coarse above,
	// where a model that thinks first does.
	FirstTokenBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60}
	// OverheadBuckets are the buckets of phasegate_gateway_overhead_seconds:
	// 100 µs to 1 s. The gateway's own time is a fraction of a millisecond
	// for a small request and tens of milliseconds for a long history it
	// must count and fit.
	OverheadBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
)

// OtherModel is the model label of a request whose model is not one of
// the configured names: the label never carries a client's string.
const OtherModel = "other"

// Front doors, the door label of requests: chat completions, OpenAI's
// Responses API, Anthropic's Messages API.
const (
	DoorChat      = "chat"
	DoorResponses = "responses"
	DoorMessages  = "messages"
)

// Outcome is the outcome label of a request.
type Outcome string

// Outcomes of a request.
const (
	OutcomeOK            Outcome = "ok"
	OutcomeClientError   Outcome = "client_error"
	OutcomeUpstreamError Outcome = "upstream_error"
	OutcomeGatewayError  Outcome = "gateway_error"
	OutcomeClientClosed  Outcome = "client_closed"
)

// Kinds of upstream errors, the kind label of phasegate_upstream_errors_total.
const (
	UpstreamStatus4xx   = "status_4xx"
	UpstreamStatus5xx   = "status_5xx"
	UpstreamTimeout     = "timeout"
	UpstreamUnreachable = "unreachable"
	UpstreamTruncated   = "truncated"
	// UpstreamInvalid: the upstream answered 200 with something that is
	// not a chat completion.
	UpstreamInvalid = "invalid_response"
)

// New registers the collectors on reg and returns them. providers are the
// configured provider names, the only values the provider label takes;
// models are the configured model names, the only values the model label
// takes besides OtherModel. Every label combination starts at 0 so rates
// exist before the first event.
func New(reg prometheus.Registerer, providers []string, models ...string) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_requests_total",
			Help: "Requests served through a front door (chat completions, Responses, Messages), by door, protocol and outcome."}, []string{"door", "protocol", "outcome"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "phasegate_request_duration_seconds",
			Help:    "Time to serve a request through a front door, stream included, by door and protocol.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}}, []string{"door", "protocol"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "phasegate_requests_in_flight",
			Help: "Requests being served through a front door, streams included, by door and protocol."}, []string{"door", "protocol"}),
		upstreamLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "phasegate_upstream_first_byte_seconds",
			Help:    "Time from sending an upstream call to its response headers.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}}, []string{"provider"}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_upstream_errors_total",
			Help: "Upstream calls that failed, by the door of their request, provider and kind."}, []string{"door", "provider", "kind"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_tool_calls_total",
			Help: "Tool calls the guard judged, by verdict (forward: sent to the client)."}, []string{"verdict"}),
		budgets: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_budget_exhaustions_total",
			Help: "Requests whose final answer a budget forced, by budget."}, []string{"budget"}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{Name: "phasegate_fallbacks_total",
			Help: "Requests the guard failed before the first byte, served by the standard protocol instead."}),
		cycles: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "phasegate_turn_cycles",
			Help:    "Tool executions the turn held when a guarded request ended with a final answer, by the guard's profile.",
			Buckets: TurnCycleBuckets}, []string{"profile"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_upstream_tokens_total",
			Help: "Tokens of upstream calls, by provider, kind and source: reported by the upstream, or estimated by the gateway for a call it closed before the upstream reported usage."}, []string{"provider", "kind", "source"}),
		truncations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_truncated_total",
			Help: "What history truncation removed to fit the context window: messages, tokens, tool results shortened."}, []string{"kind"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_thinking_repairs_total",
			Help: "Requests repaired for DeepSeek's thinking mode: reasoning_content restored or emptied, forced tool_choice downgraded."}, []string{"kind"}),
		transient: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_transient_finishes_total",
			Help: "Upstream answers that ended transiently (insufficient_system_resource, or no finish): retried before the first byte, or passed on."}, []string{"outcome"}),
		modelFallbacks: prometheus.NewCounter(prometheus.CounterOpts{Name: "phasegate_model_fallbacks_total",
			Help: "Requests sent to their fallback model once the retries of their first were spent, before any byte reached the client."}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_upstream_retries_total",
			Help: "Upstream calls made again after a failure safe to retry, before any byte reached the client, by the failure's kind."}, []string{"kind"}),
		leaked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_leaked_tool_calls_total",
			Help: "Tool calls a model wrote into its content as text, recovered into tool_calls or refused as malformed."}, []string{"outcome"}),
		firstToken: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "phasegate_time_to_first_token_seconds",
			Help:    "Time from the start of a request to the first content, reasoning or tool-call byte written to the client (a whole answer's write when not streaming), by door, protocol and provider.",
			Buckets: FirstTokenBuckets}, []string{"door", "protocol", "provider"}),
		overhead: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "phasegate_gateway_overhead_seconds",
			Help:    "Time a request spent in the gateway: its duration minus the time spent waiting on upstream calls (for their headers, body and every stream event), by door, protocol and provider.",
			Buckets: OverheadBuckets}, []string{"door", "protocol", "provider"}),
		modelTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_model_tokens_total",
			Help: "Tokens in (prompt) and out (completion) of upstream calls, reported or estimated, by configured model name (other: any other)."}, []string{"model", "kind"}),
		envelopes:     newEnvelopes(),
		observed:      newObserved(),
		degenerate:    newDegenerate(),
		models:        slices.Clone(models),
		shared:        newSharedMetrics(),
		bounded:       newBounded(),
		inflightBytes: newInflightBytes(),
		dropped:       newDropped(),
		rulesNotices:  newRulesNotices(),
	}
	m.register(reg)
	m.zero(providers, models)
	return m
}

func newEnvelopes() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_envelopes_total",
		Help: "Orchestrator envelopes judged, by phase and outcome (valid, repaired, retried, fallback, invalid, missing)."}, []string{"phase", "outcome"})
}

func newObserved() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_observed_tool_calls_total",
		Help: "Tool calls the client executed under GUARD_MODE=observe, by the verdict the guard would have given them (forward: it would have let them through); each was forwarded unchanged."}, []string{"verdict"})
}

func newRulesNotices() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "phasegate_rules_notices_total",
		Help: "Upstream calls of the guard that stated its rules to the model up front (GUARD_RULES_NOTICE)."})
}

// register registers every collector on reg, the session metrics' first
// built (metrics/sessions.go).
func (m *Metrics) register(reg prometheus.Registerer) {
	m.sessions = newSessionMetrics()
	for _, c := range []prometheus.Collector{m.requests, m.requestDuration, m.inFlight, m.upstreamLatency, m.upstreamErrors,
		m.toolCalls, m.budgets, m.fallbacks, m.cycles, m.tokens, m.truncations, m.repairs, m.transient, m.retries, m.modelFallbacks, m.leaked, m.firstToken, m.overhead, m.modelTokens, m.envelopes, m.observed, m.bounded, m.inflightBytes, m.rulesNotices, m.dropped, m.degenerate} {
		reg.MustRegister(c)
	}
	for _, c := range append(m.shared.collectors(), m.sessions.collectors()...) {
		reg.MustRegister(c)
	}
}

// zero starts every label combination at 0, so that rates exist before
// the first event.
func (m *Metrics) zero(providers, models []string) {
	for _, d := range Doors {
		m.zeroDoor(d, providers)
	}
	for _, prov := range providers {
		m.upstreamLatency.WithLabelValues(prov)
		for _, k := range TokenKinds {
			for _, src := range TokenSources {
				m.tokens.WithLabelValues(prov, k, src)
			}
		}
	}
	for _, name := range append(slices.Clone(models), OtherModel) {
		for _, k := range TokenKinds {
			m.modelTokens.WithLabelValues(name, k)
		}
	}
	for _, one := range []struct {
		vec    *prometheus.CounterVec
		values []string
	}{
		{m.toolCalls, Verdicts}, {m.observed, ObservedVerdicts}, {m.retries, UpstreamErrorKinds},
		{m.budgets, Budgets}, {m.truncations, TruncationKinds}, {m.repairs, RepairKinds},
		{m.transient, TransientOutcomes}, {m.leaked, LeakOutcomes}, {m.bounded, Bounds},
	} {
		for _, v := range one.values {
			one.vec.WithLabelValues(v)
		}
	}
	for _, p := range Profiles {
		m.cycles.WithLabelValues(p)
	}
	for _, f := range DegenerateFields {
		for _, o := range DegenerateOutcomes {
			m.degenerate.WithLabelValues(f, o)
		}
	}
	m.shared.zero()
	m.zeroDropped()
	m.sessions.zero(models)
	for _, p := range EnvelopePhases {
		for _, o := range EnvelopeOutcomes {
			m.envelopes.WithLabelValues(p, o)
		}
	}
}

// zeroDoor starts at 0 every series of door d: its requests by protocol
// and outcome, its latencies and upstream errors by provider.
func (m *Metrics) zeroDoor(d string, providers []string) {
	for _, p := range Protocols {
		m.requestDuration.WithLabelValues(d, p)
		m.inFlight.WithLabelValues(d, p)
		for _, o := range Outcomes {
			m.requests.WithLabelValues(d, p, string(o))
		}
		for _, prov := range providers {
			m.firstToken.WithLabelValues(d, p, prov)
			m.overhead.WithLabelValues(d, p, prov)
		}
	}
	for _, prov := range providers {
		for _, k := range UpstreamErrorKinds {
			m.upstreamErrors.WithLabelValues(d, prov, k)
		}
	}
}

// RequestStarted counts a request that came by door in flight; call the
// returned func once when it ends, with its outcome.
func (m *Metrics) RequestStarted(door, protocol string) func(Outcome) {
	start := time.Now()
	g := m.inFlight.WithLabelValues(door, protocol)
	g.Inc()
	return func(o Outcome) {
		g.Dec()
		m.requests.WithLabelValues(door, protocol, string(o)).Inc()
		m.requestDuration.WithLabelValues(door, protocol).Observe(time.Since(start).Seconds())
	}
}

// UpstreamAnswered records the time an upstream call took to answer.
func (m *Metrics) UpstreamAnswered(provider string, d time.Duration) {
	m.upstreamLatency.WithLabelValues(provider).Observe(d.Seconds())
}

// UpstreamFailed counts a failed upstream call of a request that came by
// door; kind is one of UpstreamErrorKinds.
func (m *Metrics) UpstreamFailed(door, provider, kind string) {
	m.upstreamErrors.WithLabelValues(door, provider, kind).Inc()
}

// Tokens adds the token counts of one upstream call; estimated tells
// that the gateway estimated them for a call it closed early.
func (m *Metrics) Tokens(provider string, prompt, completion int, estimated bool) {
	src := "reported"
	if estimated {
		src = "estimated"
	}
	m.tokens.WithLabelValues(provider, "prompt", src).Add(float64(prompt))
	m.tokens.WithLabelValues(provider, "completion", src).Add(float64(completion))
}

// ModelLabel returns the model label of a request for model: the name
// itself when it is configured, OtherModel otherwise.
func (m *Metrics) ModelLabel(model string) string {
	if slices.Contains(m.models, model) {
		return model
	}
	return OtherModel
}

// ModelTokens adds the tokens in (prompt) and out (completion) of one
// upstream call to its model's count; label is a ModelLabel result.
func (m *Metrics) ModelTokens(label string, prompt, completion int) {
	m.modelTokens.WithLabelValues(label, "prompt").Add(float64(prompt))
	m.modelTokens.WithLabelValues(label, "completion").Add(float64(completion))
}

// FirstToken records the time to its first token of a request that came
// by door.
func (m *Metrics) FirstToken(door, protocol, provider string, d time.Duration) {
	m.firstToken.WithLabelValues(door, protocol, provider).Observe(d.Seconds())
}

// Overhead records the time a request spent in the gateway, not waiting
// on an upstream.
func (m *Metrics) Overhead(door, protocol, provider string, d time.Duration) {
	m.overhead.WithLabelValues(door, protocol, provider).Observe(max(d, 0).Seconds())
}

// Truncated records what truncation removed from one request.
func (m *Metrics) Truncated(messages, tokens, shortened int) {
	m.truncations.WithLabelValues("messages").Add(float64(messages))
	m.truncations.WithLabelValues("tokens").Add(float64(tokens))
	m.truncations.WithLabelValues("shortened_results").Add(float64(shortened))
}

// Repaired counts thinking-mode repairs of one request.
func (m *Metrics) Repaired(restored, emptied int, toolChoice bool) {
	m.repairs.WithLabelValues("reasoning_restored").Add(float64(restored))
	m.repairs.WithLabelValues("reasoning_emptied").Add(float64(emptied))
	if toolChoice {
		m.repairs.WithLabelValues("tool_choice_downgraded").Inc()
	}
}

// The guard's decisions. Every method is safe on a nil *Metrics, which
// counts nothing, so a strategy built without metrics needs no checks.

// ToolCallJudged counts a tool call the guard judged, by verdict (one of
// Verdicts; other values are not counted, so the label stays bounded).
func (m *Metrics) ToolCallJudged(verdict string) {
	if m != nil && slices.Contains(Verdicts, verdict) {
		m.toolCalls.WithLabelValues(verdict).Inc()
	}
}

// ObservedToolCall counts the would-be verdict of a call executed under
// GUARD_MODE=observe (one of ObservedVerdicts).
func (m *Metrics) ObservedToolCall(verdict string) {
	if m != nil && slices.Contains(ObservedVerdicts, verdict) {
		m.observed.WithLabelValues(verdict).Inc()
	}
}

// BudgetExhausted counts a final answer a budget forced (one of Budgets).
func (m *Metrics) BudgetExhausted(budget string) {
	if m != nil && slices.Contains(Budgets, budget) {
		m.budgets.WithLabelValues(budget).Inc()
	}
}

// Fallback counts a request the guard failed before the first byte,
// served by the standard protocol instead.
func (m *Metrics) Fallback() {
	if m != nil {
		m.fallbacks.Inc()
	}
}

// LeakedToolCall counts a tool call written into content (one of
// LeakOutcomes).
func (m *Metrics) LeakedToolCall(outcome string) {
	if m != nil && slices.Contains(LeakOutcomes, outcome) {
		m.leaked.WithLabelValues(outcome).Inc()
	}
}

// Envelope counts the verdict on one orchestrator envelope: phase is a
// phase the gateway knows (EnvelopePhases or one of its config file) or
// "none", outcome one of EnvelopeOutcomes.
func (m *Metrics) Envelope(phase, outcome string) {
	if m != nil && slices.Contains(EnvelopeOutcomes, outcome) {
		m.envelopes.WithLabelValues(phase, outcome).Inc()
	}
}

// TransientFinish counts an answer that ended transiently (one of
// TransientOutcomes).
func (m *Metrics) TransientFinish(outcome string) {
	if m != nil && slices.Contains(TransientOutcomes, outcome) {
		m.transient.WithLabelValues(outcome).Inc()
	}
}

// UpstreamRetried counts an upstream call made again after a failure of
// kind (one of UpstreamErrorKinds) safe to retry.
func (m *Metrics) UpstreamRetried(kind string) {
	if m != nil && slices.Contains(UpstreamErrorKinds, kind) {
		m.retries.WithLabelValues(kind).Inc()
	}
}

// ModelFallback counts a request sent to its fallback model.
func (m *Metrics) ModelFallback() {
	if m != nil {
		m.modelFallbacks.Inc()
	}
}

// Profiles are the guard's profiles, as the profile label spells them.
var Profiles = []string{"strict", "agent"}

// TurnEnded records the tool executions of a turn whose guarded response
// was an answer, not a tool call, under the guard's profile (one of
// Profiles): long turns are the agent profile's point, not the strict
// one's.
func (m *Metrics) TurnEnded(profile string, cycles int) {
	if m != nil && slices.Contains(Profiles, profile) {
		m.cycles.WithLabelValues(profile).Observe(float64(cycles))
	}
}

// Tracers fans trace events out to several tracers.
type Tracers []interface {
	Trace(context.Context, Trace)
}

// Trace passes ev to every tracer.
func (ts Tracers) Trace(ctx context.Context, ev Trace) {
	for _, t := range ts {
		t.Trace(ctx, ev)
	}
}

// RegisterTokenRatios exposes, for each configured model name, the learned
// ratio of the upstream's prompt token counts to the gateway's estimates
// (1: the estimate is right). Only configured names are exposed, so the
// label stays bounded.
func RegisterTokenRatios(reg prometheus.Registerer, models []string, ratio func(model string) float64) {
	for _, name := range models {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "phasegate_token_estimate_ratio",
			Help:        "Learned ratio of the prompt tokens upstreams report to the gateway's tiktoken estimate, by configured model.",
			ConstLabels: prometheus.Labels{"model": name},
		}, func() float64 { return ratio(name) }))
	}
}

func newDegenerate() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_degenerate_text_total",
		Help: "Upstream answers the guard cut because they repeated one phrase over and over, by field (content or reasoning_content) and outcome (reasked: the model was asked again; finished: the answer was finished with a notice)."}, []string{"field", "outcome"})
}

// DegenerateText counts an answer cut for repeating itself: field is
// one of DegenerateFields, outcome one of DegenerateOutcomes.
func (m *Metrics) DegenerateText(field, outcome string) {
	if m != nil && slices.Contains(DegenerateFields, field) && slices.Contains(DegenerateOutcomes, outcome) {
		m.degenerate.WithLabelValues(field, outcome).Inc()
	}
}

// RulesNotice counts an upstream call that stated the guard's rules to
// the model up front.
func (m *Metrics) RulesNotice() {
	if m != nil {
		m.rulesNotices.Inc()
	}
}
