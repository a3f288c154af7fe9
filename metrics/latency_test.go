package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/phasegate/phasegate/metrics"
)

// TestModelTokens: configured model names are label values and start at
// 0; any other name counts as other.
func TestModelTokens(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, providers, "deepseek-v4-flash")
	for _, tc := range []struct{ model, label string }{
		{"deepseek-v4-flash", "deepseek-v4-flash"},
		{"DeepSeek-V4-Flash", metrics.OtherModel},
		{"gpt-4o\n{evil}", metrics.OtherModel},
	} {
		if got := m.ModelLabel(tc.model); got != tc.label {
			t.Errorf("ModelLabel(%q) = %q, want %q", tc.model, got, tc.label)
		}
	}
	m.ModelTokens(m.ModelLabel("deepseek-v4-flash"), 100, 20)
	m.ModelTokens(m.ModelLabel("unknown"), 7, 3)
	want := `
# HELP phasegate_model_tokens_total Tokens in (prompt) and out (completion) of upstream calls, reported or estimated, by configured model name (other: any other).
# TYPE phasegate_model_tokens_total counter
phasegate_model_tokens_total{kind="completion",model="deepseek-v4-flash"} 20
phasegate_model_tokens_total{kind="completion",model="other"} 3
phasegate_model_tokens_total{kind="prompt",model="deepseek-v4-flash"} 100
phasegate_model_tokens_total{kind="prompt",model="other"} 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "phasegate_model_tokens_total"); err != nil {
		t.Error(err)
	}
}

// TestLatencyHistograms: both histograms exist for every door, protocol
// and provider before any request, and observe in seconds; an overhead below
// zero (clock steps) is recorded as 0.
func TestLatencyHistograms(t *testing.T) {
	m, reg := newMetrics(t)
	m.FirstToken("chat", "two-stage", "deepseek", 30*time.Millisecond)
	m.Overhead("chat", "two-stage", "deepseek", 400*time.Microsecond)
	m.Overhead("responses", "standard", "openai", -time.Millisecond)
	got := samples(t, reg)
	for _, tc := range []struct {
		family, series string
		want           float64
	}{
		{"phasegate_time_to_first_token_seconds", `phasegate_time_to_first_token_seconds_bucket{door="chat",protocol="two-stage",provider="deepseek",le="0.025"}`, 0},
		{"phasegate_time_to_first_token_seconds", `phasegate_time_to_first_token_seconds_bucket{door="chat",protocol="two-stage",provider="deepseek",le="0.05"}`, 1},
		{"phasegate_time_to_first_token_seconds", `phasegate_time_to_first_token_seconds_count{door="responses",protocol="standard",provider="openai"}`, 0},
		{"phasegate_gateway_overhead_seconds", `phasegate_gateway_overhead_seconds_bucket{door="chat",protocol="two-stage",provider="deepseek",le="0.00025"}`, 0},
		{"phasegate_gateway_overhead_seconds", `phasegate_gateway_overhead_seconds_bucket{door="chat",protocol="two-stage",provider="deepseek",le="0.0005"}`, 1},
		{"phasegate_gateway_overhead_seconds", `phasegate_gateway_overhead_seconds_sum{door="responses",protocol="standard",provider="openai"}`, 0},
		{"phasegate_gateway_overhead_seconds", `phasegate_gateway_overhead_seconds_count{door="responses",protocol="standard",provider="openai"}`, 1},
	} {
		v, ok := got[tc.family][tc.series]
		if !ok || v != tc.want {
			t.Errorf("%s = %v (present %v), want %v", tc.series, v, ok, tc.want)
		}
	}
}
