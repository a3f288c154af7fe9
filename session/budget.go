package session

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/phasegate/phasegate/chat"
)

// Budget is what one session may spend. A zero budget field is unlimited.
type Budget struct {
	// ToolCalls bounds the tool calls forwarded to the client
	// (SESSION_MAX_TOOL_CALLS).
	ToolCalls int64
	// Tokens bounds the prompt tokens the provider's cache did not hold
	// plus the completion tokens (SESSION_MAX_TOKENS); cache reads are
	// counted apart and priced in USD.
	Tokens int64
	// USD bounds what the session cost by the price table
	// (SESSION_MAX_USD).
	USD float64
	// IdleTTL is how long a session is kept after its last request
	// (SESSION_IDLE_TTL); more than 0.
	IdleTTL time.Duration
}

// Cap names a spent budget, as the X-Phasegate-Session-Budget header and
// the budget label of phasegate_budget_exhaustions_total spell it.
type Cap string

// The caps: each budget, and an operator's stop.
const (
	CapToolCalls Cap = "SESSION_MAX_TOOL_CALLS"
	CapTokens    Cap = "SESSION_MAX_TOKENS"
	CapUSD       Cap = "SESSION_MAX_USD"
	CapStopped   Cap = "SESSION_STOPPED"
)

// Caps lists every cap.
var Caps = []Cap{CapToolCalls, CapTokens, CapUSD, CapStopped}

// Override is a budget as one part of the configuration gives it: a nil
// field is not set there.
type Override struct {
	ToolCalls *int64
	Tokens    *int64
	USD       *float64
	IdleTTL   *time.Duration
}

// over returns b with the fields o sets.
func (o Override) over(b Budget) Budget {
	if o.ToolCalls != nil {
		b.ToolCalls = *o.ToolCalls
	}
	if o.Tokens != nil {
		b.Tokens = *o.Tokens
	}
	if o.USD != nil {
		b.USD = *o.USD
	}
	if o.IdleTTL != nil {
		b.IdleTTL = *o.IdleTTL
	}
	return b
}

// ModelRule sets budgets of the models that match Pattern (a name, or a
// prefix ending in "*").
type ModelRule struct {
	Pattern string
	Override
}

// Rules are the configured budgets: global ones (the SESSION_MAX_*
// settings), per model and per project (the config file's sessions:).
type Rules struct {
	Global   Budget
	Models   []ModelRule
	Projects map[string]Override
}

// Resolve returns the budget of a request of project to model: the
// global budget, with the fields the first model rule that matches sets,
// then those the project's sets (a project's rule wins, as with the guard's
// modes).
func (r Rules) Resolve(project, model string) Budget {
	b := r.Global
	for _, m := range r.Models {
		if match(m.Pattern, model) {
			b = m.over(b)
			break
		}
	}
	if o, ok := r.Projects[project]; ok && project != "" {
		b = o.over(b)
	}
	return b
}

// The headers that lower a request's budget.
const (
	HeaderMaxToolCalls = "X-Phasegate-Session-Max-Tool-Calls"
	HeaderMaxTokens    = "X-Phasegate-Session-Max-Tokens"
	HeaderMaxUSD       = "X-Phasegate-Session-Max-Usd"
	HeaderIdleTTL      = "X-Phasegate-Session-Idle-Ttl"
)

// Lowered returns b lowered by the request's headers. A header may only
// lower a budget: a value above it (or 0, unlimited, under a limited one)
// is a 400 whose param names the header.
func (b Budget) Lowered(hdr http.Header) (Budget, error) {
	var err error
	if b.ToolCalls, err = lowerCount(hdr, HeaderMaxToolCalls, b.ToolCalls); err != nil {
		return b, err
	}
	if b.Tokens, err = lowerCount(hdr, HeaderMaxTokens, b.Tokens); err != nil {
		return b, err
	}
	if b.USD, err = lowerUSD(hdr, b.USD); err != nil {
		return b, err
	}
	b.IdleTTL, err = lowerTTL(hdr, b.IdleTTL)
	return b, err
}

// lowerCount reads a whole-number header that may lower limit (0:
// unlimited).
func lowerCount(hdr http.Header, name string, limit int64) (int64, error) {
	v := strings.TrimSpace(hdr.Get(name))
	if v == "" {
		return limit, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return limit, chat.InvalidRequest(name, "header %s must be a whole number of 0 or more, got %q", name, v)
	}
	if !lowers(float64(n), float64(limit)) {
		return limit, loosens(name, v, strconv.FormatInt(limit, 10))
	}
	return n, nil
}

func lowerUSD(hdr http.Header, limit float64) (float64, error) {
	v := strings.TrimSpace(hdr.Get(HeaderMaxUSD))
	if v == "" {
		return limit, nil
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil || !(n >= 0) || math.IsInf(n, 0) {
		return limit, chat.InvalidRequest(HeaderMaxUSD, "header %s must be an amount of US dollars of 0 or more, such as 2.50, got %q", HeaderMaxUSD, v)
	}
	if !lowers(n, limit) {
		return limit, loosens(HeaderMaxUSD, v, strconv.FormatFloat(limit, 'f', -1, 64))
	}
	return n, nil
}

func lowerTTL(hdr http.Header, limit time.Duration) (time.Duration, error) {
	v := strings.TrimSpace(hdr.Get(HeaderIdleTTL))
	if v == "" {
		return limit, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return limit, chat.InvalidRequest(HeaderIdleTTL, "header %s must be a duration of more than 0 with a unit, such as 30m, got %q", HeaderIdleTTL, v)
	}
	if d > limit {
		return limit, loosens(HeaderIdleTTL, v, limit.String())
	}
	return d, nil
}

// lowers reports whether n is at most limit, 0 meaning unlimited for
// both.
func lowers(n, limit float64) bool {
	switch {
	case limit == 0:
		return true
	case n == 0:
		return false
	}
	return n <= limit
}

func loosens(name, v, limit string) error {
	return chat.InvalidRequest(name, "header %s: %s may only lower this session's budget, %s (0 is unlimited, which no header may ask for under a limit)", name, v, limit)
}

// match reports whether model matches pattern: equal, or starting with
// pattern's prefix when it ends in "*".
func match(pattern, model string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(model, prefix)
	}
	return pattern == model
}
