package pricing_test

import (
	"math"
	"testing"
	"time"

	"github.com/phasegate/phasegate/pricing"
)

// The published figures the built-in table must hold, as DeepSeek's
// Models & Pricing page states them, USD per 1M tokens.
//
// Source: https://api-docs.deepseek.com/quick_start/pricing, read on
// 2026-11-27 (the page as it stood on 2026-11-15): deepseek-flash
// (DeepSeek-V4.1-Flash-1017) and deepseek-v4-pro (DeepSeek-V4-Pro-0813),
// peak and off-peak; "the legacy names deepseek-v4-flash and
// deepseek-v4-flash-vision-exp are still accepted [...] and billed at Flash
// price"; off-peak rates are half the peak rates; peak hours are 01:00 -
// 04:00 and 06:00 - 10:00 UTC, Monday to Friday.
var published = []struct {
	model         string
	peak, offPeak pricing.Price
}{
	{model: "deepseek-flash", peak: pricing.Price{InputCacheHit: 0.006, InputCacheMiss: 0.3, Output: 1.2},
		offPeak: pricing.Price{InputCacheHit: 0.003, InputCacheMiss: 0.15, Output: 0.6}},
	{model: "deepseek-v4-flash", peak: pricing.Price{InputCacheHit: 0.006, InputCacheMiss: 0.3, Output: 1.2},
		offPeak: pricing.Price{InputCacheHit: 0.003, InputCacheMiss: 0.15, Output: 0.6}},
	{model: "deepseek-v4-flash-vision-exp", peak: pricing.Price{InputCacheHit: 0.006, InputCacheMiss: 0.3, Output: 1.2},
		offPeak: pricing.Price{InputCacheHit: 0.003, InputCacheMiss: 0.15, Output: 0.6}},
	{model: "deepseek-v4-pro", peak: pricing.Price{InputCacheHit: 0.044, InputCacheMiss: 1.32, Output: 3.96},
		offPeak: pricing.Price{InputCacheHit: 0.022, InputCacheMiss: 0.66, Output: 1.98}},
}

// OpenAI's published prices, standard tier, USD per 1M tokens: input,
// cached input, output. OpenAI's own page
// (https://developers.openai.com/api/docs/pricing) could not be fetched
// when the table was written, so each row is checked against two
// transcriptions of it, read on 2026-11-27, that agree:
//   - the table Pydantic maintains for its cost tracking,
//     https://github.com/pydantic/genai-prices, prices/providers/openai.yml
//     at 01d6df8c, which dates each model's last check against
//     platform.openai.com/docs/pricing (gpt-4.1, gpt-4.1-mini, gpt-4o,
//     gpt-4o-mini, o4-mini: 2025-07-04; o3: 2025-07-12, its price since
//     2025-06-10; gpt-5, gpt-5-mini: 2025-11-13);
//   - pages that quote OpenAI's: https://deploybase.ai/articles/openai-pricing
//     (input and output of gpt-5, gpt-4.1, gpt-4o, gpt-4o-mini, o4-mini),
//     https://chatgptpricing-akr.pages.dev/api-pricing (cached input of
//     gpt-4o and gpt-4o-mini), https://aipromptshub.co/calc/gpt-5-cost
//     (cached input a tenth of input on every GPT-5 tier),
//     https://github.com/RooCodeInc/Roo-Code/pull/2691 (cached input of
//     o4-mini), https://tokenmath.io/openai-api-pricing-explained (gpt-4.1
//     and gpt-4.1-mini, "checked Jun 21, 2026").
//
// Where pages disagreed (o3's cached input, 0.50 or 1.00), the dated check
// decides: 0.50 since OpenAI's price cut of 2025-06-10.
var publishedOpenAI = []struct {
	model string
	price pricing.Price
}{
	{model: "gpt-5", price: pricing.Price{InputCacheMiss: 1.25, InputCacheHit: 0.125, Output: 10}},
	{model: "gpt-5-mini", price: pricing.Price{InputCacheMiss: 0.25, InputCacheHit: 0.025, Output: 2}},
	{model: "gpt-4.1", price: pricing.Price{InputCacheMiss: 2, InputCacheHit: 0.5, Output: 8}},
	{model: "gpt-4.1-mini", price: pricing.Price{InputCacheMiss: 0.4, InputCacheHit: 0.1, Output: 1.6}},
	{model: "gpt-4o", price: pricing.Price{InputCacheMiss: 2.5, InputCacheHit: 1.25, Output: 10}},
	{model: "gpt-4o-mini", price: pricing.Price{InputCacheMiss: 0.15, InputCacheHit: 0.075, Output: 0.6}},
	{model: "o3", price: pricing.Price{InputCacheMiss: 2, InputCacheHit: 0.5, Output: 8}},
	{model: "o4-mini", price: pricing.Price{InputCacheMiss: 1.1, InputCacheHit: 0.275, Output: 4.4}},
}

func TestDefaultTableHoldsOpenAIsPublishedPrices(t *testing.T) {
	table := pricing.New()
	for _, p := range publishedOpenAI {
		// OpenAI has no off-peak hours: the same price at every hour.
		for _, at := range []time.Time{mondayPeak, mondayGap, saturdayMorn} {
			if got, ok := table.Lookup(p.model, at); !ok || got != p.price {
				t.Errorf("%s at %v: %+v (priced %v), want %+v", p.model, at, got, ok, p.price)
			}
		}
	}
}

// Hours of the week, each on either side of the peak windows' edges.
var (
	mondayPeak     = time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)                        // Monday 01:00, first peak hour
	mondayMorning  = time.Date(2026, 11, 23, 9, 59, 0, 0, time.UTC)                       // still peak
	mondayGap      = time.Date(2026, 11, 23, 4, 0, 0, 0, time.UTC)                        // between the windows
	mondayEvening  = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)                       // the second window is over
	fridayPeak     = time.Date(2026, 11, 27, 7, 30, 0, 0, time.UTC)                       // Friday
	saturdayMorn   = time.Date(2026, 11, 28, 7, 30, 0, 0, time.UTC)                       // weekends are off-peak
	beijingEvening = time.Date(2026, 11, 23, 2, 0, 0, 0, time.FixedZone("UTC+8", 8*3600)) // Sunday 18:00 UTC
)

func TestDefaultTableHoldsThePublishedPrices(t *testing.T) {
	table := pricing.New()
	for _, p := range published {
		for _, at := range []time.Time{mondayPeak, mondayMorning, fridayPeak} {
			if got, ok := table.Lookup(p.model, at); !ok || got != p.peak {
				t.Errorf("%s at %v: %+v (priced %v), want the peak price %+v", p.model, at, got, ok, p.peak)
			}
		}
		for _, at := range []time.Time{mondayGap, mondayEvening, saturdayMorn, beijingEvening} {
			if got, ok := table.Lookup(p.model, at); !ok || got != p.offPeak {
				t.Errorf("%s at %v: %+v (priced %v), want the off-peak price %+v", p.model, at, got, ok, p.offPeak)
			}
		}
		// The page's own rule: off-peak is half of peak, every column.
		if p.peak.InputCacheHit != 2*p.offPeak.InputCacheHit || p.peak.InputCacheMiss != 2*p.offPeak.InputCacheMiss || p.peak.Output != 2*p.offPeak.Output {
			t.Errorf("%s: off-peak %+v is not half of peak %+v", p.model, p.offPeak, p.peak)
		}
	}
}

func TestUnpricedModels(t *testing.T) {
	table := pricing.New()
	// OpenAI prices a model's variants apart: the built-in names match
	// exactly, never as a prefix.
	for _, model := range []string{"gpt-5-nano", "gpt-5.1", "gpt-4o-2024-05-13", "o3-mini", "phasegate-sim", "deepseek-chat", ""} {
		if p, ok := table.Lookup(model, mondayPeak); ok {
			t.Errorf("%s: priced %+v, want no built-in price", model, p)
		}
		if usd, ok := table.Cost(model, pricing.Usage{Prompt: 1000}, mondayPeak); ok || usd != 0 {
			t.Errorf("%s: cost %v (priced %v), want 0 and false", model, usd, ok)
		}
	}
}

func TestConfiguredRulesComeFirst(t *testing.T) {
	own := pricing.Price{InputCacheMiss: 2, InputCacheHit: 0.5, Output: 8}
	table := pricing.New(pricing.Rule{Pattern: "deepseek-v4-pro", Price: own}, pricing.Rule{Pattern: "gpt-*", Price: own})
	for _, model := range []string{"deepseek-v4-pro", "gpt-5-mini"} {
		for _, at := range []time.Time{mondayPeak, saturdayMorn} {
			if got, ok := table.Lookup(model, at); !ok || got != own {
				t.Errorf("%s at %v: %+v, want the configured %+v at every hour (no off-peak price given)", model, at, got, own)
			}
		}
	}
	if got, _ := table.Lookup("deepseek-v4-pro-2", mondayPeak); got.Output != 3.96 {
		t.Errorf("deepseek-v4-pro-2: %+v, want the built-in prefix rule", got)
	}
}

func TestCost(t *testing.T) {
	p := pricing.Price{InputCacheMiss: 0.3, InputCacheHit: 0.006, Output: 1.2}
	for _, tc := range []struct {
		name string
		u    pricing.Usage
		want float64
	}{
		{name: "all misses", u: pricing.Usage{Prompt: 1_000_000, Completion: 1_000_000}, want: 1.5},
		{name: "hits priced apart", u: pricing.Usage{Prompt: 1_000_000, CacheHit: 900_000, Completion: 0}, want: 0.03 + 0.0054},
		// The 364-call grep loop: 142 M tokens read from the cache.
		{name: "a cache-read loop", u: pricing.Usage{Prompt: 142_000_000, CacheHit: 142_000_000}, want: 0.852},
		{name: "more hits than prompt", u: pricing.Usage{Prompt: 10, CacheHit: 50}, want: 10 * 0.006 / 1e6},
		{name: "negative counts are none", u: pricing.Usage{Prompt: -5, CacheHit: -1, Completion: -3}, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.Cost(tc.u); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("Cost(%+v) = %v, want %v", tc.u, got, tc.want)
			}
		})
	}
}

func TestPriceCheck(t *testing.T) {
	for _, tc := range []struct {
		p  pricing.Price
		ok bool
	}{
		{pricing.Price{}, true},
		{pricing.Price{InputCacheMiss: 1.25, InputCacheHit: 0.125, Output: 10}, true},
		{pricing.Price{InputCacheMiss: -1}, false},
		{pricing.Price{Output: math.NaN()}, false},
		{pricing.Price{InputCacheHit: math.Inf(1)}, false},
	} {
		if err := tc.p.Check(); (err == nil) != tc.ok {
			t.Errorf("Check(%+v) = %v, want ok %v", tc.p, err, tc.ok)
		}
	}
}
