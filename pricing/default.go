package pricing

import (
	"maps"
	"slices"
	"time"
)

// DeepSeekPeak are DeepSeek's peak hours: 01:00 to 04:00 and 06:00 to
// 10:00 UTC, Monday to Friday (09:00–12:00 and 14:00–18:00 Beijing time).
// DeepSeek also bills Chinese public holidays off-peak; the table does not
// know them and prices those hours at the peak rate, an upper bound.
var DeepSeekPeak = []Window{
	{Weekdays: weekdays, From: 1, To: 4},
	{Weekdays: weekdays, From: 6, To: 10},
}

var weekdays = []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday}

// The prices DeepSeek publishes on its Models & Pricing page
// (https://api-docs.deepseek.com/quick_start/pricing): the peak prices,
// and off-peak prices at half of them. The legacy deepseek-v4-flash names
// are served by the current Flash model and billed at its prices.
var (
	deepseekFlash        = Price{InputCacheMiss: 0.30, InputCacheHit: 0.006, Output: 1.20}
	deepseekFlashOffPeak = Price{InputCacheMiss: 0.15, InputCacheHit: 0.003, Output: 0.60}
	deepseekPro          = Price{InputCacheMiss: 1.32, InputCacheHit: 0.044, Output: 3.96}
	deepseekProOffPeak   = Price{InputCacheMiss: 0.66, InputCacheHit: 0.022, Output: 1.98}
)

// The prices OpenAI publishes on its pricing page
// (https://developers.openai.com/api/docs/pricing), standard tier: input,
// cached input and output. OpenAI has no off-peak hours. Each name is
// priced exactly: OpenAI prices a model's variants (gpt-5-nano, gpt-5.1,
// gpt-4o-2024-05-13) apart, and a prefix would give them the wrong price.
var openAI = map[string]Price{
	"gpt-5":        {InputCacheMiss: 1.25, InputCacheHit: 0.125, Output: 10},
	"gpt-5-mini":   {InputCacheMiss: 0.25, InputCacheHit: 0.025, Output: 2},
	"gpt-4.1":      {InputCacheMiss: 2, InputCacheHit: 0.5, Output: 8},
	"gpt-4.1-mini": {InputCacheMiss: 0.4, InputCacheHit: 0.1, Output: 1.6},
	"gpt-4o":       {InputCacheMiss: 2.5, InputCacheHit: 1.25, Output: 10},
	"gpt-4o-mini":  {InputCacheMiss: 0.15, InputCacheHit: 0.075, Output: 0.6},
	"o3":           {InputCacheMiss: 2, InputCacheHit: 0.5, Output: 8},
	"o4-mini":      {InputCacheMiss: 1.1, InputCacheHit: 0.275, Output: 4.4},
}

// Default returns the built-in rules: DeepSeek's published prices for its
// V4 models, and OpenAI's for the OpenAI models docs/ names. Other
// models have no built-in price: the config file's prices: gives them
// one.
func Default() []Rule {
	rules := []Rule{
		{Pattern: "deepseek-v4-pro*", Price: deepseekPro, OffPeak: ptr(deepseekProOffPeak)},
		{Pattern: "deepseek-v4-flash*", Price: deepseekFlash, OffPeak: ptr(deepseekFlashOffPeak)},
		{Pattern: "deepseek-flash*", Price: deepseekFlash, OffPeak: ptr(deepseekFlashOffPeak)},
	}
	for _, model := range slices.Sorted(maps.Keys(openAI)) {
		rules = append(rules, Rule{Pattern: model, Price: openAI[model]})
	}
	return rules
}

// ptr returns a pointer to a copy of p, so no caller shares the table's.
func ptr(p Price) *Price { return &p }
