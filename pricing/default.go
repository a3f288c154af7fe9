package pricing

import "time"

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

// Default returns the built-in rules: DeepSeek's published prices for its
// V4 models. Models of other providers (OpenAI's among them) have no
// built-in price: the config file's prices: gives them one.
func Default() []Rule {
	return []Rule{
		{Pattern: "deepseek-v4-pro*", Price: deepseekPro, OffPeak: ptr(deepseekProOffPeak)},
		{Pattern: "deepseek-v4-flash*", Price: deepseekFlash, OffPeak: ptr(deepseekFlashOffPeak)},
		{Pattern: "deepseek-flash*", Price: deepseekFlash, OffPeak: ptr(deepseekFlashOffPeak)},
	}
}

// ptr returns a pointer to a copy of p, so no caller shares the table's.
func ptr(p Price) *Price { return &p }
