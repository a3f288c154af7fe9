package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Label values of the session metrics (package session spells the same).
var (
	// SessionStates are the values of the state label of phasegate_sessions.
	SessionStates = []string{"active", "capped"}
	// SessionDecisions are the values of the decision label of
	// phasegate_session_requests_total: served as asked (open), made the
	// session's forced final answer, refused with 429 (SESSION_ON_CAP=reject),
	// served unchecked or refused with 503 because the store failed.
	SessionDecisions = []string{"open", "forced_final", "rejected", "failed_open", "failed_closed"}
	// SessionCaps are the values of the budget label of
	// phasegate_session_caps_total: the session budgets and an operator's
	// stop. They are values of the budget label of
	// phasegate_budget_exhaustions_total too.
	SessionCaps = []string{"SESSION_MAX_TOOL_CALLS", "SESSION_MAX_TOKENS", "SESSION_MAX_USD", "SESSION_STOPPED"}
	// SessionOutcomes are the values of the outcome label of
	// phasegate_session_spend_usd: how a session ended.
	SessionOutcomes = []string{"idle", "capped_tool_calls", "capped_tokens", "capped_usd", "stopped", "reset", "evicted"}

	// SessionSpendBuckets are the buckets of phasegate_session_spend_usd,
	// US dollars: a tenth of a cent to a hundred dollars.
	SessionSpendBuckets = []float64{.001, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 25, 50, 100}
	// SessionRateBuckets are the buckets of
	// phasegate_session_spend_rate_usd_per_hour, US dollars an hour.
	SessionRateBuckets = []float64{.01, .1, .5, 1, 2, 5, 10, 25, 50, 100}
)

// sessionMetrics are the collectors of sessions and of what the guard
// saved ("loop economics").
type sessionMetrics struct {
	sessions    *prometheus.GaugeVec
	decisions   *prometheus.CounterVec
	caps        *prometheus.CounterVec
	spend       *prometheus.HistogramVec
	usd         *prometheus.CounterVec
	rate        prometheus.Histogram
	savedTokens *prometheus.CounterVec
	savedUSD    *prometheus.CounterVec
}

func newSessionMetrics() sessionMetrics {
	return sessionMetrics{
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "phasegate_sessions",
			Help: "Agent sessions the session store holds (active), and those of them whose budget is spent (capped), as of this replica's last charge; replicas on one Redis report the same shared count."}, []string{"state"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_session_requests_total",
			Help: "Requests that named a session, by what the session decided: open, forced_final, rejected (SESSION_ON_CAP=reject), failed_open or failed_closed (the store failed)."}, []string{"decision"}),
		caps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_session_caps_total",
			Help: "Sessions that spent a budget (or an operator stopped), by budget; each session counts once."}, []string{"budget"}),
		spend: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "phasegate_session_spend_usd",
			Help:    "What each session cost by the price table, in US dollars, observed when it ended, by how it ended.",
			Buckets: SessionSpendBuckets}, []string{"outcome"}),
		usd: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_session_usd_total",
			Help: "US dollars charged to sessions by the price table, by configured model name (other: any other)."}, []string{"model"}),
		rate: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "phasegate_session_spend_rate_usd_per_hour",
			Help:    "The spend rate of a session at each of its requests, US dollars an hour over about the last ten minutes.",
			Buckets: SessionRateBuckets}),
		savedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_guard_saved_tokens_total",
			Help: "Estimate of the tokens the guard saved: for each tool call it refused, the prompt the loop would have sent once more; by configured model name and the refusal's kind (its verdict)."}, []string{"model", "kind"}),
		savedUSD: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "phasegate_guard_saved_usd_total",
			Help: "phasegate_guard_saved_tokens_total priced by the price table (at the cache-hit share of the request), US dollars."}, []string{"model", "kind"}),
	}
}

func (s sessionMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.sessions, s.decisions, s.caps, s.spend, s.usd, s.rate, s.savedTokens, s.savedUSD}
}

// RefusalKinds are the kinds of refusal the saved estimates count: every
// verdict but forward.
func RefusalKinds() []string {
	return slices.DeleteFunc(slices.Clone(Verdicts), func(v string) bool { return v == "forward" })
}

func (s sessionMetrics) zero(models []string) {
	for _, v := range SessionStates {
		s.sessions.WithLabelValues(v)
	}
	for _, v := range SessionDecisions {
		s.decisions.WithLabelValues(v)
	}
	for _, v := range SessionCaps {
		s.caps.WithLabelValues(v)
	}
	for _, v := range SessionOutcomes {
		s.spend.WithLabelValues(v)
	}
	for _, m := range append(slices.Clone(models), OtherModel) {
		s.usd.WithLabelValues(m)
		for _, k := range RefusalKinds() {
			s.savedTokens.WithLabelValues(m, k)
			s.savedUSD.WithLabelValues(m, k)
		}
	}
}

// SessionDecision counts a request of a session by decision (one of
// SessionDecisions).
func (m *Metrics) SessionDecision(decision string) {
	if m != nil && slices.Contains(SessionDecisions, decision) {
		m.sessions.decisions.WithLabelValues(decision).Inc()
	}
}

// SessionCharged records a charge: usd charged to model (a ModelLabel
// result), the session's spend rate, and the sessions the store holds and
// has capped.
func (m *Metrics) SessionCharged(model string, usd, ratePerHour float64, active, capped int) {
	if m == nil {
		return
	}
	m.sessions.usd.WithLabelValues(model).Add(max(usd, 0))
	m.sessions.rate.Observe(ratePerHour)
	m.sessions.sessions.WithLabelValues("active").Set(float64(active))
	m.sessions.sessions.WithLabelValues("capped").Set(float64(capped))
}

// SessionCapped counts a session that spent budget (one of SessionCaps).
func (m *Metrics) SessionCapped(budget string) {
	if m != nil && slices.Contains(SessionCaps, budget) {
		m.sessions.caps.WithLabelValues(budget).Inc()
	}
}

// SessionEnded records what a session cost once it ended (outcome one of
// SessionOutcomes).
func (m *Metrics) SessionEnded(outcome string, usd float64) {
	if m != nil && slices.Contains(SessionOutcomes, outcome) {
		m.sessions.spend.WithLabelValues(outcome).Observe(usd)
	}
}

// Saved adds the estimate of what one refusal of kind (a verdict other
// than forward) saved on model (a ModelLabel result).
func (m *Metrics) Saved(model, kind string, tokens int, usd float64) {
	if m != nil && kind != "forward" && slices.Contains(Verdicts, kind) {
		m.sessions.savedTokens.WithLabelValues(model, kind).Add(float64(max(tokens, 0)))
		m.sessions.savedUSD.WithLabelValues(model, kind).Add(max(usd, 0))
	}
}
