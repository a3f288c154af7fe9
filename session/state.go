package session

import (
	"math"
	"time"
)

// Counters are what a session spent.
type Counters struct {
	// Requests counts the requests charged.
	Requests int64 `json:"requests"`
	// ToolCalls counts the tool calls forwarded to the client.
	ToolCalls int64 `json:"tool_calls"`
	// PromptTokens counts every prompt token, cache reads included;
	// CacheReadTokens the part the provider's cache held.
	PromptTokens    int64 `json:"prompt_tokens"`
	CacheReadTokens int64 `json:"cache_read_tokens"`
	// CompletionTokens counts the completion tokens, reasoning included.
	CompletionTokens int64 `json:"completion_tokens"`
	// USD is what the session cost by the price table; calls of a model
	// with no price add nothing (UnpricedTokens counts their tokens).
	USD            float64 `json:"usd"`
	UnpricedTokens int64   `json:"unpriced_tokens"`
}

// Tokens is what SESSION_MAX_TOKENS counts: the prompt tokens the cache
// did not hold, and the completion tokens.
func (c Counters) Tokens() int64 {
	return max(c.PromptTokens-c.CacheReadTokens, 0) + c.CompletionTokens
}

// MissRatio is the share of the session's prompt tokens the cache did
// not hold so far: 1 before any.
func (c Counters) MissRatio() float64 {
	if c.PromptTokens <= 0 {
		return 1
	}
	return float64(max(c.PromptTokens-c.CacheReadTokens, 0)) / float64(c.PromptTokens)
}

func (c Counters) add(d Counters) Counters {
	c.Requests += d.Requests
	c.ToolCalls += d.ToolCalls
	c.PromptTokens += d.PromptTokens
	c.CacheReadTokens += d.CacheReadTokens
	c.CompletionTokens += d.CompletionTokens
	c.USD += d.USD
	c.UnpricedTokens += d.UnpricedTokens
	return c
}

// State is one session as the store holds it.
type State struct {
	Counters
	// Capped is the budget the session spent, "" while it has spent none.
	// Once set it stays until the session expires or is reset.
	Capped Cap
	// Started and Last are the times of its first and last charge.
	Started, Last time.Time
	// Decayed is what the session spent, each dollar fading with a time
	// constant of RateWindow since it was spent: Decayed/RateWindow is its
	// recent spend rate.
	Decayed float64
	// Budget is the budget of its last charge.
	Budget Budget
}

// RateWindow is the time constant of a session's spend rate.
const RateWindow = 10 * time.Minute

// RateUSDPerHour is the session's recent spend rate.
func (s State) RateUSDPerHour() float64 {
	return s.Decayed / RateWindow.Hours()
}

// Charge is what one request adds to its session.
type Charge struct {
	Counters
	// Cap, when set, is recorded as the session's spent budget: the
	// request was its forced final answer, or an operator stopped it.
	Cap Cap
	// Budget is the request's budget: a counter that reaches it caps the
	// session, and its IdleTTL is how long the session is kept.
	Budget Budget
	// ID, when set, names the charge: a store that retries a call whose
	// reply was lost applies it once.
	ID string
	// Reserve marks an opening's reservation (see State.Open): it records
	// Cap, never a budget a counter reached.
	Reserve bool
}

// Apply returns s after c, charged at now: the counters added, the cap
// recorded (c's, else the first budget a counter reached), the spend rate
// decayed and fed, Last moved to now (Started too for a new session).
func (s State) Apply(c Charge, now time.Time) State {
	if s.Started.IsZero() {
		s.Started = now
	}
	if !s.Last.IsZero() {
		if dt := now.Sub(s.Last); dt > 0 {
			s.Decayed *= math.Exp(-float64(dt) / float64(RateWindow))
		}
	}
	s.Decayed += c.USD
	s.Last = now
	s.Counters = s.Counters.add(c.Counters)
	s.Budget = c.Budget
	if s.Capped == "" {
		s.Capped = c.Cap
	}
	if s.Capped == "" && !c.Reserve {
		s.Capped = s.reached(c.Budget)
	}
	return s
}

// reached returns the first budget of b the counters reached, "" when
// none.
func (s State) reached(b Budget) Cap {
	switch {
	case b.ToolCalls > 0 && s.ToolCalls >= b.ToolCalls:
		return CapToolCalls
	case b.Tokens > 0 && s.Tokens() >= b.Tokens:
		return CapTokens
	case b.USD > 0 && s.USD >= b.USD:
		return CapUSD
	}
	return ""
}

// Next is the gateway's estimate of what the next request's prompt adds
// to a session before the upstream answers: the tokens SESSION_MAX_TOKENS
// counts and the dollars.
type Next struct {
	Tokens int64
	USD    float64
}

// Spent returns the budget of b a request would cross, "" when none: the
// session's recorded cap, a tool-call budget reached (any call forwarded
// would cross it), or a token or dollar budget the request's prompt (n)
// would carry the session past. Such a request is the session's forced
// final answer.
func (s State) Spent(b Budget, n Next) Cap {
	switch {
	case s.Capped != "":
		return s.Capped
	case b.ToolCalls > 0 && s.ToolCalls >= b.ToolCalls:
		return CapToolCalls
	case b.Tokens > 0 && s.Tokens()+n.Tokens > b.Tokens:
		return CapTokens
	case b.USD > 0 && s.USD+n.USD > b.USD:
		return CapUSD
	}
	return ""
}

// Expired reports whether s is past its idle TTL at now.
func (s State) Expired(now time.Time) bool {
	return s.Budget.IdleTTL > 0 && !now.Before(s.Last.Add(s.Budget.IdleTTL))
}

// Outcome is how a session ended, as the outcome label of
// phasegate_session_spend_usd spells it.
type Outcome string

// Outcomes of a session.
const (
	// OutcomeIdle: it expired without spending a budget.
	OutcomeIdle Outcome = "idle"
	// OutcomeCappedToolCalls, OutcomeCappedTokens, OutcomeCappedUSD: it
	// expired after spending that budget.
	OutcomeCappedToolCalls Outcome = "capped_tool_calls"
	OutcomeCappedTokens    Outcome = "capped_tokens"
	OutcomeCappedUSD       Outcome = "capped_usd"
	// OutcomeStopped: it expired after an operator stopped it.
	OutcomeStopped Outcome = "stopped"
	// OutcomeReset: an operator reset it.
	OutcomeReset Outcome = "reset"
	// OutcomeEvicted: the store's memory bound forgot it before it expired.
	OutcomeEvicted Outcome = "evicted"
)

// Outcomes lists every outcome.
var Outcomes = []Outcome{OutcomeIdle, OutcomeCappedToolCalls, OutcomeCappedTokens, OutcomeCappedUSD, OutcomeStopped, OutcomeReset, OutcomeEvicted}

// Outcome is how s ends once it expires.
func (s State) Outcome() Outcome {
	switch s.Capped {
	case CapToolCalls:
		return OutcomeCappedToolCalls
	case CapTokens:
		return OutcomeCappedTokens
	case CapUSD:
		return OutcomeCappedUSD
	case CapStopped:
		return OutcomeStopped
	}
	return OutcomeIdle
}

// Ended is a session the store let go: what it cost and how it ended.
type Ended struct {
	USD     float64
	Outcome Outcome
}

// Charged is what a store reports of a charge.
type Charged struct {
	// State is the session after the charge.
	State State
	// New reports that the charge started the session; Capped that it
	// recorded the session's cap.
	New, Capped bool
	// Ended are the sessions the store found expired (or forgot) while
	// charging, each reported once.
	Ended []Ended
	// Active is the sessions the store holds, Capped those of them with a
	// spent budget, as of the charge.
	Active, CappedSessions int
}
