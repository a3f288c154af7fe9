package metrics

import "github.com/prometheus/client_golang/prometheus"

// sharedMetrics count the state shared by replicas: the failures of its
// store, the rate limits' decisions and the resumable streams.
type sharedMetrics struct {
	storeErrors *prometheus.CounterVec
	rateLimits  *prometheus.CounterVec
	resumable   *prometheus.CounterVec
	// The circuit breaker on Redis: its state (1 on the current one),
	// the states it entered, and the calls it refused at once.
	breakerState       *prometheus.GaugeVec
	breakerTransitions *prometheus.CounterVec
	breakerRejected    prometheus.Counter
}

// Label values of the shared state.
var (
	// StoreFeatures are the values of the feature label of
	// phasegate_shared_store_errors_total.
	StoreFeatures = []string{StoreReasoning, StoreRateLimit, StoreResume, StoreSession}
	// RateLimits are the values of the limit label of
	// phasegate_rate_limit_decisions_total.
	RateLimits = []string{"key_requests", "key_tokens", "project_requests", "project_tokens", "address_requests", "address_tokens"}
	// RateLimitOutcomes are the values of its outcome label: allowed,
	// limited (a 429), or the store failed and the request was let
	// through (failed_open) or refused (failed_closed).
	RateLimitOutcomes = []string{RateAllowed, RateLimited, RateFailedOpen, RateFailedClosed}
	// ResumeEvents are the values of the event label of
	// phasegate_resumable_streams_total.
	ResumeEvents = []string{ResumeStarted, ResumeDegraded, ResumeClientGone, ResumeTooLarge, ResumeReplayed, ResumeCancelled, ResumeMemoryFull}
	// BreakerStates are the values of the state label of
	// phasegate_redis_breaker_state and phasegate_redis_breaker_transitions_total
	// (store.BreakerStates spells the same).
	BreakerStates = []string{"closed", "open", "half_open"}
)

// Features of the shared store.
const (
	StoreReasoning = "reasoning"
	StoreRateLimit = "rate_limit"
	StoreResume    = "resume"
	StoreSession   = "session"
)

// Outcomes of a rate limit.
const (
	RateAllowed      = "allowed"
	RateLimited      = "limited"
	RateFailedOpen   = "failed_open"
	RateFailedClosed = "failed_closed"
)

// Events of resumable streams.
const (
	// ResumeStarted: a stream opted in and its events are kept.
	ResumeStarted = "started"
	// ResumeDegraded: a stream opted in but the store failed; it was
	// served as a plain stream.
	ResumeDegraded = "degraded"
	// ResumeClientGone: its client left and the gateway read on.
	ResumeClientGone = "client_gone"
	// ResumeTooLarge: it outgrew RESUME_MAX_BYTES and was ended.
	ResumeTooLarge = "too_large"
	// ResumeReplayed: a client resumed a stream.
	ResumeReplayed = "replayed"
	// ResumeCancelled: a stream was cancelled.
	ResumeCancelled = "cancelled"
	// ResumeMemoryFull: the events of all streams kept in this process
	// reached RESUME_MEMORY_BYTES; the stream's later events (or all of
	// them) were not kept.
	ResumeMemoryFull = "memory_full"
)

func newSharedMetrics() sharedMetrics {
	return sharedMetrics{
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_shared_store_errors_total",
			Help: "Failures of the shared store (Redis), by the feature that degraded."}, []string{"feature"}),
		rateLimits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_rate_limit_decisions_total",
			Help: "Rate limit decisions, by limit and outcome."}, []string{"limit", "outcome"}),
		resumable: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_resumable_streams_total",
			Help: "Events of resumable streams: started, degraded to a plain stream, client gone, too large, replayed, cancelled, memory full."}, []string{"event"}),
		breakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "phasegate_redis_breaker_state",
			Help: "State of the circuit breaker on Redis: 1 on the current state (closed, open: Redis skipped, half_open: one call probes it)."}, []string{"state"}),
		breakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_redis_breaker_transitions_total",
			Help: "States the circuit breaker on Redis entered."}, []string{"state"}),
		breakerRejected: prometheus.NewCounter(prometheus.CounterOpts{Name: "phasegate_redis_breaker_rejected_total",
			Help: "Calls to Redis the open circuit breaker failed at once, without waiting on Redis."}),
	}
}

func (s sharedMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.storeErrors, s.rateLimits, s.resumable, s.breakerState, s.breakerTransitions, s.breakerRejected}
}

// RedisBreakerState records that the circuit breaker on Redis entered
// state (one of BreakerStates).
func (m *Metrics) RedisBreakerState(state string) {
	if m == nil {
		return
	}
	for _, s := range BreakerStates {
		v := 0.0
		if s == state {
			v = 1
		}
		m.shared.breakerState.WithLabelValues(s).Set(v)
	}
	m.shared.breakerTransitions.WithLabelValues(state).Inc()
}

// RedisBreakerRejected counts a call to Redis the open breaker refused.
func (m *Metrics) RedisBreakerRejected() {
	if m != nil {
		m.shared.breakerRejected.Inc()
	}
}

func (s sharedMetrics) zero() {
	for _, f := range StoreFeatures {
		s.storeErrors.WithLabelValues(f)
	}
	for _, l := range RateLimits {
		for _, o := range RateLimitOutcomes {
			s.rateLimits.WithLabelValues(l, o)
		}
	}
	for _, e := range ResumeEvents {
		s.resumable.WithLabelValues(e)
	}
	for _, st := range BreakerStates {
		s.breakerState.WithLabelValues(st)
		s.breakerTransitions.WithLabelValues(st)
	}
}

// StoreFailed counts a failure of the shared store by the feature it
// degraded.
func (m *Metrics) StoreFailed(feature string) {
	if m != nil {
		m.shared.storeErrors.WithLabelValues(feature).Inc()
	}
}

// RateLimit counts one decision of a limit.
func (m *Metrics) RateLimit(limit, outcome string) {
	if m != nil {
		m.shared.rateLimits.WithLabelValues(limit, outcome).Inc()
	}
}

// Resumable counts an event of a resumable stream.
func (m *Metrics) Resumable(event string) {
	if m != nil {
		m.shared.resumable.WithLabelValues(event).Inc()
	}
}
