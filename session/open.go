package session

// Opening is what a request asks of its session before it goes upstream:
// the decision (Spent) and, unless the session is spent and refused, a
// reservation of what the request is sure to cost, charged at once, so
// that a replica that serves the session's next request finds it counted
// before this one is settled.
type Opening struct {
	// Budget is the request's budget.
	Budget Budget
	// Prompt is the gateway's count of the request's prompt.
	Prompt int64
	// MissPrice and HitPrice price a prompt token the cache missed and
	// one it held, in US dollars per million tokens; Priced is false for
	// a model the price table does not know.
	MissPrice, HitPrice float64
	Priced              bool
	// Calls is the tool calls the response may forward, reserved unless
	// the request is its session's forced final answer (which forwards
	// none).
	Calls int64
	// Reject: a spent session's request is refused, and charged nothing.
	Reject bool
	// ID names the reservation (see Charge.ID).
	ID string
}

// Open decides a request of s (see Spent) and returns the budget it
// would cross ("" when none) and its reservation: one request, the
// prompt split at the session's miss ratio and priced so, the calls it
// may forward, the spent budget as the session's cap. A reservation
// records no cap a counter reached: the request's settlement does, once
// its counts are known. A refused request reserves nothing (a zero
// Charge).
func (s State) Open(o Opening) (Cap, Charge) {
	miss := int64(float64(o.Prompt) * s.MissRatio())
	var usd float64
	if o.Priced {
		usd = (float64(miss)*o.MissPrice + float64(o.Prompt-miss)*o.HitPrice) / 1e6
	}
	spent := s.Spent(o.Budget, Next{Tokens: miss, USD: usd})
	if spent != "" && o.Reject {
		return spent, Charge{}
	}
	c := Charge{Counters: Counters{Requests: 1, PromptTokens: o.Prompt, CacheReadTokens: o.Prompt - miss, USD: usd},
		Cap: spent, Budget: o.Budget, ID: o.ID, Reserve: true}
	if !o.Priced {
		c.USD, c.UnpricedTokens = 0, o.Prompt
	}
	if spent == "" {
		c.ToolCalls = o.Calls
	}
	return spent, c
}

// Opened is what a store reports of an opening.
type Opened struct {
	// Charged reports the reservation: the session after it (State), and
	// whether it started the session or recorded its cap. A refused
	// request reserved nothing: State is the session as it was.
	Charged
	// Before is the session as the request found it (zero when new).
	Before State
	// Spent is the budget the request would cross, "" when none.
	Spent Cap
	// Reserved is what the reservation charged.
	Reserved Counters
	// Settled are the caps that settlements of earlier requests, carried
	// with this opening (see RedisSessions.Owe), recorded.
	Settled []Settled
}

// Settled is a cap a settlement recorded: the store's key of the session,
// and its cap.
type Settled struct {
	Key string
	Cap Cap
}

// Reached returns the first budget of b the counters of s reached, ""
// when none: the cap a charge records.
func (s State) Reached(b Budget) Cap { return s.reached(b) }
