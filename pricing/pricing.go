// Package pricing is the price table of the models the gateway serves: what
// a million tokens cost in US dollars, cache misses, cache hits and output
// priced apart, per model, and for a provider that bills less outside its
// peak hours, the off-peak prices and the hours they apply. It turns the
// usage of an upstream call into what the call cost.
//
// The built-in table holds the prices its providers publish (see Default);
// every price is a setting: rules given to New come before them.
package pricing

import (
	"fmt"
	"strings"
	"time"
)

// Price is what one million tokens of a model cost, in US dollars.
type Price struct {
	// InputCacheMiss prices the prompt tokens the provider's cache did
	// not hold.
	InputCacheMiss float64
	// InputCacheHit prices the prompt tokens read from the provider's
	// cache.
	InputCacheHit float64
	// Output prices the completion tokens, reasoning included.
	Output float64
}

// Usage is the tokens of one upstream call, as the usage object reports
// them.
type Usage struct {
	// Prompt is every prompt token, cache hits included (prompt_tokens).
	Prompt int
	// CacheHit is the part of Prompt read from the cache
	// (prompt_cache_hit_tokens on DeepSeek,
	// prompt_tokens_details.cached_tokens on OpenAI).
	CacheHit int
	// Completion is completion_tokens.
	Completion int
}

// Cost returns what u costs at p, in US dollars.
func (p Price) Cost(u Usage) float64 {
	hit := min(max(u.CacheHit, 0), max(u.Prompt, 0))
	miss := max(u.Prompt, 0) - hit
	return (float64(miss)*p.InputCacheMiss + float64(hit)*p.InputCacheHit + float64(max(u.Completion, 0))*p.Output) / 1e6
}

// Check reports a price that cannot be one: negative, or not a number.
func (p Price) Check() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"input_cache_miss", p.InputCacheMiss}, {"input_cache_hit", p.InputCacheHit}, {"output", p.Output}} {
		if !(f.v >= 0) || f.v > 1e6 {
			return fmt.Errorf("%s must be a price in US dollars per million tokens, 0 or more, got %v", f.name, f.v)
		}
	}
	return nil
}

// Rule prices the models that match Pattern: a model name, or a prefix
// ending in "*".
type Rule struct {
	Pattern string
	// Price applies at every hour, or within the peak hours when OffPeak
	// is set.
	Price Price
	// OffPeak, when set, applies outside the table's peak hours.
	OffPeak *Price
}

// Window is a span of the hours of some weekdays, in UTC: from From:00
// up to (not including) To:00.
type Window struct {
	Weekdays []time.Weekday
	From, To int
}

// contains reports whether t (in UTC) falls in w.
func (w Window) contains(t time.Time) bool {
	t = t.UTC()
	for _, d := range w.Weekdays {
		if d == t.Weekday() {
			return t.Hour() >= w.From && t.Hour() < w.To
		}
	}
	return false
}

// Table is a price table: the first rule whose pattern matches a model
// prices it. It is safe for concurrent use; it never changes once built.
type Table struct {
	rules []Rule
	peak  []Window
}

// New returns the table of rules, then the built-in rules (Default); the
// peak hours are DeepSeek's (DeepSeekPeak).
func New(rules ...Rule) *Table {
	return &Table{rules: append(append([]Rule(nil), rules...), Default()...), peak: DeepSeekPeak}
}

// Lookup returns the price of model at time at, and false when no rule
// prices it.
func (t *Table) Lookup(model string, at time.Time) (Price, bool) {
	if t == nil {
		return Price{}, false
	}
	for _, r := range t.rules {
		if !match(r.Pattern, model) {
			continue
		}
		if r.OffPeak != nil && !t.Peak(at) {
			return *r.OffPeak, true
		}
		return r.Price, true
	}
	return Price{}, false
}

// Cost returns what u of model cost at time at, and false (and 0) when
// the model has no price.
func (t *Table) Cost(model string, u Usage, at time.Time) (float64, bool) {
	p, ok := t.Lookup(model, at)
	if !ok {
		return 0, false
	}
	return p.Cost(u), true
}

// Peak reports whether at falls in the table's peak hours.
func (t *Table) Peak(at time.Time) bool {
	for _, w := range t.peak {
		if w.contains(at) {
			return true
		}
	}
	return false
}

// match reports whether model matches pattern: equal, or starting with
// pattern's prefix when it ends in "*".
func match(pattern, model string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(model, prefix)
	}
	return pattern == model
}
