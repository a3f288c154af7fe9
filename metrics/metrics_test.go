package metrics_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/phasegate/phasegate/metrics"
)

var providers = []string{"deepseek", "openai"}

func newMetrics(t *testing.T) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	return metrics.New(reg, providers), reg
}

// samples flattens what g exposes into one value per series, keyed by
// family and series: counters and gauges by their labels, histograms by
// their _bucket (finite bounds; the +Inf bucket is _count), _sum and
// _count series.
func samples(t *testing.T, g prometheus.Gatherer) map[string]map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		fam := map[string]float64{}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			key := func(suffix string, extra ...string) string {
				return mf.GetName() + suffix + "{" + strings.Join(append(slices.Clone(labels), extra...), ",") + "}"
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				fam[key("")] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				fam[key("")] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					fam[key("_bucket", "le="+strconv.Quote(strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)))] = float64(b.GetCumulativeCount())
				}
				fam[key("_sum")] = h.GetSampleSum()
				fam[key("_count")] = float64(h.GetSampleCount())
			default:
				t.Fatalf("%s: unexpected type %v", mf.GetName(), mf.GetType())
			}
		}
		out[mf.GetName()] = fam
	}
	return out
}

// checkOthersUnmoved fails t if any family but those named in moved differs
// in reg from what a fresh New exposes.
func checkOthersUnmoved(t *testing.T, reg prometheus.Gatherer, moved ...string) {
	t.Helper()
	_, fresh := newMetrics(t)
	want, got := samples(t, fresh), samples(t, reg)
	for _, name := range moved {
		delete(want, name)
		delete(got, name)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("series other than %v moved (-fresh +got):\n%s", moved, diff)
	}
}

// One lint over every collector the gateway registers, after each method
// has been called once, so histograms with observations are linted too.
func TestLint(t *testing.T) {
	m, reg := newMetrics(t)
	metrics.RegisterTokenRatios(reg, []string{"deepseek-v4-flash", "gpt-4o"}, func(string) float64 { return 1 })
	m.RequestStarted("chat", "two-stage")(metrics.OutcomeOK)
	m.UpstreamAnswered("deepseek", time.Second)
	m.UpstreamFailed("chat", "deepseek", metrics.UpstreamInvalid)
	m.Tokens("deepseek", 10, 2, true)
	m.Truncated(1, 100, 1)
	m.Repaired(1, 1, true)
	m.ToolCallJudged("forward")
	m.BudgetExhausted("MAX_PHASE_CYCLES")
	m.Fallback()
	m.LeakedToolCall("recovered")
	m.TransientFinish("retried")
	m.TurnEnded("agent", 2)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatalf("GatherAndLint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// Every label combination exists, at 0, before the first event, so rates
// and ratios are defined from the first scrape.
func TestInitialisedToZero(t *testing.T) {
	_, reg := newMetrics(t)
	want := `
# HELP phasegate_budget_exhaustions_total Requests whose final answer a budget forced, by budget.
# TYPE phasegate_budget_exhaustions_total counter
phasegate_budget_exhaustions_total{budget="MAX_DUPLICATE_ATTEMPTS"} 0
phasegate_budget_exhaustions_total{budget="MAX_PHASE_CYCLES"} 0
phasegate_budget_exhaustions_total{budget="SESSION_MAX_TOKENS"} 0
phasegate_budget_exhaustions_total{budget="SESSION_MAX_TOOL_CALLS"} 0
phasegate_budget_exhaustions_total{budget="SESSION_MAX_USD"} 0
phasegate_budget_exhaustions_total{budget="SESSION_STOPPED"} 0
# HELP phasegate_fallbacks_total Requests the guard failed before the first byte, served by the standard protocol instead.
# TYPE phasegate_fallbacks_total counter
phasegate_fallbacks_total 0
# HELP phasegate_leaked_tool_calls_total Tool calls a model wrote into its content as text, recovered into tool_calls or refused as malformed.
# TYPE phasegate_leaked_tool_calls_total counter
phasegate_leaked_tool_calls_total{outcome="malformed"} 0
phasegate_leaked_tool_calls_total{outcome="recovered"} 0
# HELP phasegate_thinking_repairs_total Requests repaired for DeepSeek's thinking mode: reasoning_content restored or emptied, forced tool_choice downgraded.
# TYPE phasegate_thinking_repairs_total counter
phasegate_thinking_repairs_total{kind="reasoning_emptied"} 0
phasegate_thinking_repairs_total{kind="reasoning_restored"} 0
phasegate_thinking_repairs_total{kind="tool_choice_downgraded"} 0
# HELP phasegate_tool_calls_total Tool calls the guard judged, by verdict (forward: sent to the client).
# TYPE phasegate_tool_calls_total counter
phasegate_tool_calls_total{verdict="dropped"} 0
phasegate_tool_calls_total{verdict="duplicate"} 0
phasegate_tool_calls_total{verdict="forward"} 0
phasegate_tool_calls_total{verdict="malformed"} 0
phasegate_tool_calls_total{verdict="not_allowed"} 0
phasegate_tool_calls_total{verdict="no_progress"} 0
phasegate_tool_calls_total{verdict="schema_invalid"} 0
phasegate_tool_calls_total{verdict="undeclared"} 0
# HELP phasegate_transient_finishes_total Upstream answers that ended transiently (insufficient_system_resource, or no finish): retried before the first byte, or passed on.
# TYPE phasegate_transient_finishes_total counter
phasegate_transient_finishes_total{outcome="passed_on"} 0
phasegate_transient_finishes_total{outcome="retried"} 0
# HELP phasegate_truncated_total What history truncation removed to fit the context window: messages, tokens, tool results shortened.
# TYPE phasegate_truncated_total counter
phasegate_truncated_total{kind="messages"} 0
phasegate_truncated_total{kind="shortened_results"} 0
phasegate_truncated_total{kind="tokens"} 0
# HELP phasegate_upstream_tokens_total Tokens of upstream calls, by provider, kind and source: reported by the upstream, or estimated by the gateway for a call it closed before the upstream reported usage.
# TYPE phasegate_upstream_tokens_total counter
phasegate_upstream_tokens_total{kind="completion",provider="deepseek",source="estimated"} 0
phasegate_upstream_tokens_total{kind="completion",provider="deepseek",source="reported"} 0
phasegate_upstream_tokens_total{kind="completion",provider="openai",source="estimated"} 0
phasegate_upstream_tokens_total{kind="completion",provider="openai",source="reported"} 0
phasegate_upstream_tokens_total{kind="prompt",provider="deepseek",source="estimated"} 0
phasegate_upstream_tokens_total{kind="prompt",provider="deepseek",source="reported"} 0
phasegate_upstream_tokens_total{kind="prompt",provider="openai",source="estimated"} 0
phasegate_upstream_tokens_total{kind="prompt",provider="openai",source="reported"} 0
` + cyclesHead + zeroCycles("agent") + zeroCycles("strict") + inFlightWant(nil) + requestsWant(nil) + upstreamErrorsWant(nil)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"phasegate_budget_exhaustions_total", "phasegate_fallbacks_total", "phasegate_leaked_tool_calls_total",
		"phasegate_requests_in_flight", "phasegate_requests_total", "phasegate_thinking_repairs_total",
		"phasegate_tool_calls_total", "phasegate_transient_finishes_total", "phasegate_truncated_total",
		"phasegate_upstream_errors_total", "phasegate_upstream_tokens_total", "phasegate_turn_cycles"); err != nil {
		t.Error(err)
	}
	// The histograms by label exist too: one series set per door and
	// protocol, and per provider.
	for name, want := range map[string]int{
		"phasegate_request_duration_seconds":    len(metrics.Doors) * len(metrics.Protocols),
		"phasegate_upstream_first_byte_seconds": len(providers),
	} {
		if got, err := testutil.GatherAndCount(reg, name); err != nil || got != want {
			t.Errorf("GatherAndCount(%s) = %d, %v; want %d", name, got, err, want)
		}
	}
}

// series writes the exposition of a counter family with one label, a
// series for each of values at its count in counts (0 if absent).
// zeroCycles is the golden lines of one profile's phasegate_turn_cycles
// series before any turn ended: every bucket, the sum and the count at 0.
func zeroCycles(profile string) string {
	var b strings.Builder
	for _, le := range []string{"0", "1", "2", "3", "4", "5", "8", "13", "+Inf"} {
		b.WriteString("phasegate_turn_cycles_bucket{profile=" + strconv.Quote(profile) + ",le=" + strconv.Quote(le) + "} 0\n")
	}
	b.WriteString("phasegate_turn_cycles_sum{profile=" + strconv.Quote(profile) + "} 0\n")
	b.WriteString("phasegate_turn_cycles_count{profile=" + strconv.Quote(profile) + "} 0\n")
	return b.String()
}

func series(name, help, label string, values []string, counts map[string]int) string {
	var b strings.Builder
	b.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " counter\n")
	for _, v := range values {
		b.WriteString(name + "{" + label + "=" + strconv.Quote(v) + "} " + strconv.Itoa(counts[v]) + "\n")
	}
	return b.String()
}

const (
	toolCallsHelp = "Tool calls the guard judged, by verdict (forward: sent to the client)."
	budgetsHelp   = "Requests whose final answer a budget forced, by budget."
	leakedHelp    = "Tool calls a model wrote into its content as text, recovered into tool_calls or refused as malformed."
	transientHelp = "Upstream answers that ended transiently (insufficient_system_resource, or no finish): retried before the first byte, or passed on."
	cyclesHead    = `
# HELP phasegate_turn_cycles Tool executions the turn held when a guarded request ended with a final answer, by the guard's profile.
# TYPE phasegate_turn_cycles histogram
`
)

// Each of the guard's methods moves its own series and nothing else, and
// a value outside the label's fixed set is not counted: it would be a new
// series, and the label would no longer be bounded.
func TestGuardMethods(t *testing.T) {
	tests := []struct {
		name   string
		call   func(*metrics.Metrics)
		metric string
		want   string
	}{
		{
			name: "ToolCallJudged counts each verdict",
			call: func(m *metrics.Metrics) {
				for _, v := range metrics.Verdicts {
					m.ToolCallJudged(v)
				}
				m.ToolCallJudged("duplicate")
				m.ToolCallJudged("dropped")
			},
			metric: "phasegate_tool_calls_total",
			want: series("phasegate_tool_calls_total", toolCallsHelp, "verdict", metrics.Verdicts, map[string]int{
				"forward": 1, "duplicate": 2, "malformed": 1, "undeclared": 1, "schema_invalid": 1,
				"not_allowed": 1, "no_progress": 1, "dropped": 2}),
		},
		{
			name: "ToolCallJudged ignores an unknown verdict",
			call: func(m *metrics.Metrics) {
				m.ToolCallJudged("")
				m.ToolCallJudged("Forward")
				m.ToolCallJudged("read_file")
			},
			metric: "phasegate_tool_calls_total",
			want:   series("phasegate_tool_calls_total", toolCallsHelp, "verdict", metrics.Verdicts, nil),
		},
		{
			name: "BudgetExhausted counts by budget",
			call: func(m *metrics.Metrics) {
				m.BudgetExhausted("MAX_PHASE_CYCLES")
				m.BudgetExhausted("MAX_DUPLICATE_ATTEMPTS")
				m.BudgetExhausted("MAX_DUPLICATE_ATTEMPTS")
			},
			metric: "phasegate_budget_exhaustions_total",
			want: series("phasegate_budget_exhaustions_total", budgetsHelp, "budget", metrics.Budgets,
				map[string]int{"MAX_PHASE_CYCLES": 1, "MAX_DUPLICATE_ATTEMPTS": 2}),
		},
		{
			name: "BudgetExhausted ignores an unknown budget",
			call: func(m *metrics.Metrics) {
				m.BudgetExhausted("")
				m.BudgetExhausted("MAX_TOKENS")
				m.BudgetExhausted("max_phase_cycles")
			},
			metric: "phasegate_budget_exhaustions_total",
			want:   series("phasegate_budget_exhaustions_total", budgetsHelp, "budget", metrics.Budgets, nil),
		},
		{
			name: "Fallback",
			call: func(m *metrics.Metrics) {
				m.Fallback()
				m.Fallback()
			},
			metric: "phasegate_fallbacks_total",
			want: `
# HELP phasegate_fallbacks_total Requests the guard failed before the first byte, served by the standard protocol instead.
# TYPE phasegate_fallbacks_total counter
phasegate_fallbacks_total 2
`,
		},
		{
			name: "LeakedToolCall counts by outcome, unknown ones ignored",
			call: func(m *metrics.Metrics) {
				m.LeakedToolCall("recovered")
				m.LeakedToolCall("recovered")
				m.LeakedToolCall("malformed")
				m.LeakedToolCall("")
				m.LeakedToolCall("retried")
			},
			metric: "phasegate_leaked_tool_calls_total",
			want: series("phasegate_leaked_tool_calls_total", leakedHelp, "outcome", metrics.LeakOutcomes,
				map[string]int{"recovered": 2, "malformed": 1}),
		},
		{
			name: "TransientFinish counts by outcome, unknown ones ignored",
			call: func(m *metrics.Metrics) {
				m.TransientFinish("retried")
				m.TransientFinish("passed_on")
				m.TransientFinish("passed_on")
				m.TransientFinish("")
				m.TransientFinish("recovered")
			},
			metric: "phasegate_transient_finishes_total",
			want: series("phasegate_transient_finishes_total", transientHelp, "outcome", metrics.TransientOutcomes,
				map[string]int{"retried": 1, "passed_on": 2}),
		},
		{
			name: "UpstreamRetried counts by failure kind, unknown ones ignored",
			call: func(m *metrics.Metrics) {
				m.UpstreamRetried("status_5xx")
				m.UpstreamRetried("status_5xx")
				m.UpstreamRetried("unreachable")
				m.UpstreamRetried("")
				m.UpstreamRetried("deepseek")
			},
			metric: "phasegate_upstream_retries_total",
			want: series("phasegate_upstream_retries_total", "Upstream calls made again after a failure safe to retry, before any byte reached the client, by the failure's kind.",
				"kind", metrics.UpstreamErrorKinds, map[string]int{"status_5xx": 2, "unreachable": 1}),
		},
		{
			name: "TurnEnded observes the cycles",
			call: func(m *metrics.Metrics) {
				m.TurnEnded("strict", 0)
				m.TurnEnded("strict", 2)
				m.TurnEnded("strict", 20)
				m.TurnEnded("lenient", 1) // not a profile: not counted
			},
			metric: "phasegate_turn_cycles",
			want: cyclesHead + zeroCycles("agent") + `
phasegate_turn_cycles_bucket{profile="strict",le="0"} 1
phasegate_turn_cycles_bucket{profile="strict",le="1"} 1
phasegate_turn_cycles_bucket{profile="strict",le="2"} 2
phasegate_turn_cycles_bucket{profile="strict",le="3"} 2
phasegate_turn_cycles_bucket{profile="strict",le="4"} 2
phasegate_turn_cycles_bucket{profile="strict",le="5"} 2
phasegate_turn_cycles_bucket{profile="strict",le="8"} 2
phasegate_turn_cycles_bucket{profile="strict",le="13"} 2
phasegate_turn_cycles_bucket{profile="strict",le="+Inf"} 3
phasegate_turn_cycles_sum{profile="strict"} 22
phasegate_turn_cycles_count{profile="strict"} 3
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reg := newMetrics(t)
			tt.call(m)
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tt.want), tt.metric); err != nil {
				t.Error(err)
			}
			checkOthersUnmoved(t, reg, tt.metric)
		})
	}
}

// A strategy built without metrics holds a nil *Metrics; the guard's
// methods count nothing on it and do not panic.
func TestGuardMethodsOnNil(t *testing.T) {
	var m *metrics.Metrics
	for name, call := range map[string]func(){
		"ToolCallJudged":  func() { m.ToolCallJudged("forward") },
		"BudgetExhausted": func() { m.BudgetExhausted("MAX_PHASE_CYCLES") },
		"Fallback":        func() { m.Fallback() },
		"LeakedToolCall":  func() { m.LeakedToolCall("recovered") },
		"TransientFinish": func() { m.TransientFinish("retried") },
		"UpstreamRetried": func() { m.UpstreamRetried("status_5xx") },
		"TurnEnded":       func() { m.TurnEnded("strict", 3) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if v := recover(); v != nil {
					t.Errorf("%s on a nil *Metrics panicked: %v", name, v)
				}
			}()
			call()
		})
	}
}

// requestsWant is the exposition of phasegate_requests_total with counts
// by "door/protocol/outcome".
func requestsWant(counts map[string]int) string {
	var b strings.Builder
	b.WriteString(`# HELP phasegate_requests_total Requests served through a front door (chat completions, Responses, Messages), by door, protocol and outcome.
# TYPE phasegate_requests_total counter
`)
	for _, d := range metrics.Doors {
		for _, p := range metrics.Protocols {
			for _, o := range metrics.Outcomes {
				b.WriteString(`phasegate_requests_total{door="` + d + `",outcome="` + string(o) + `",protocol="` + p + `"} ` +
					strconv.Itoa(counts[d+"/"+p+"/"+string(o)]) + "\n")
			}
		}
	}
	return b.String()
}

// inFlightWant is the exposition of phasegate_requests_in_flight with
// values by "door/protocol".
func inFlightWant(values map[string]int) string {
	var b strings.Builder
	b.WriteString(`# HELP phasegate_requests_in_flight Requests being served through a front door, streams included, by door and protocol.
# TYPE phasegate_requests_in_flight gauge
`)
	for _, d := range metrics.Doors {
		for _, p := range metrics.Protocols {
			b.WriteString(`phasegate_requests_in_flight{door="` + d + `",protocol="` + p + `"} ` + strconv.Itoa(values[d+"/"+p]) + "\n")
		}
	}
	return b.String()
}

// upstreamErrorsWant is the exposition of phasegate_upstream_errors_total
// with counts by "door/provider/kind".
func upstreamErrorsWant(counts map[string]int) string {
	var b strings.Builder
	b.WriteString(`# HELP phasegate_upstream_errors_total Upstream calls that failed, by the door of their request, provider and kind.
# TYPE phasegate_upstream_errors_total counter
`)
	for _, d := range metrics.Doors {
		for _, prov := range providers {
			for _, k := range metrics.UpstreamErrorKinds {
				b.WriteString(`phasegate_upstream_errors_total{door="` + d + `",kind="` + k + `",provider="` + prov + `"} ` +
					strconv.Itoa(counts[d+"/"+prov+"/"+k]) + "\n")
			}
		}
	}
	return b.String()
}

// The end of a request counts it under the outcome it is given, observes
// its duration under its protocol, and moves nothing else.
func TestRequestStartedOutcome(t *testing.T) {
	for _, o := range metrics.Outcomes {
		t.Run(string(o), func(t *testing.T) {
			m, reg := newMetrics(t)
			m.RequestStarted("responses", "two-stage")(o)
			if err := testutil.GatherAndCompare(reg, strings.NewReader(requestsWant(map[string]int{"responses/two-stage/" + string(o): 1})),
				"phasegate_requests_total"); err != nil {
				t.Error(err)
			}
			durations := samples(t, reg)["phasegate_request_duration_seconds"]
			for _, d := range metrics.Doors {
				for _, p := range metrics.Protocols {
					want := 0.0
					if d == "responses" && p == "two-stage" {
						want = 1
					}
					if got := durations[`phasegate_request_duration_seconds_count{door="`+d+`",protocol="`+p+`"}`]; got != want {
						t.Errorf("duration count of %s %s = %v, want %v", d, p, got, want)
					}
				}
			}
			checkOthersUnmoved(t, reg, "phasegate_requests_total", "phasegate_request_duration_seconds")
		})
	}
}

func TestRequestsInFlight(t *testing.T) {
	m, reg := newMetrics(t)
	gauge := func(chatTwoStage, responsesStandard int) string {
		return inFlightWant(map[string]int{"chat/two-stage": chatTwoStage, "responses/standard": responsesStandard})
	}
	check := func(when, want string) {
		t.Helper()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "phasegate_requests_in_flight"); err != nil {
			t.Errorf("%s: %v", when, err)
		}
	}

	a := m.RequestStarted("chat", "two-stage")
	b := m.RequestStarted("chat", "two-stage")
	c := m.RequestStarted("responses", "standard")
	check("three started", gauge(2, 1))
	if err := testutil.GatherAndCompare(reg, strings.NewReader(requestsWant(nil)), "phasegate_requests_total"); err != nil {
		t.Errorf("requests counted before they ended: %v", err)
	}
	a(metrics.OutcomeOK)
	c(metrics.OutcomeUpstreamError)
	check("two ended", gauge(1, 0))
	b(metrics.OutcomeClientClosed)
	check("all ended", gauge(0, 0))

	want := requestsWant(map[string]int{"chat/two-stage/ok": 1, "chat/two-stage/client_closed": 1, "responses/standard/upstream_error": 1})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "phasegate_requests_total"); err != nil {
		t.Error(err)
	}
}

// Tokens go under the source they came from: reported by the upstream,
// or estimated by the gateway; the two never mix.
func TestTokensBySource(t *testing.T) {
	m, reg := newMetrics(t)
	m.Tokens("deepseek", 1200, 30, false)
	m.Tokens("deepseek", 800, 20, false)
	m.Tokens("deepseek", 900, 7, true)
	m.Tokens("openai", 40, 0, true)
	want := `
# HELP phasegate_upstream_tokens_total Tokens of upstream calls, by provider, kind and source: reported by the upstream, or estimated by the gateway for a call it closed before the upstream reported usage.
# TYPE phasegate_upstream_tokens_total counter
phasegate_upstream_tokens_total{kind="completion",provider="deepseek",source="estimated"} 7
phasegate_upstream_tokens_total{kind="completion",provider="deepseek",source="reported"} 50
phasegate_upstream_tokens_total{kind="completion",provider="openai",source="estimated"} 0
phasegate_upstream_tokens_total{kind="completion",provider="openai",source="reported"} 0
phasegate_upstream_tokens_total{kind="prompt",provider="deepseek",source="estimated"} 900
phasegate_upstream_tokens_total{kind="prompt",provider="deepseek",source="reported"} 2000
phasegate_upstream_tokens_total{kind="prompt",provider="openai",source="estimated"} 40
phasegate_upstream_tokens_total{kind="prompt",provider="openai",source="reported"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "phasegate_upstream_tokens_total"); err != nil {
		t.Error(err)
	}
	checkOthersUnmoved(t, reg, "phasegate_upstream_tokens_total")
}

// Every kind of upstream error has its own series per door and provider.
func TestUpstreamFailed(t *testing.T) {
	m, reg := newMetrics(t)
	counts := map[string]int{}
	for i, k := range metrics.UpstreamErrorKinds {
		for range i + 1 {
			m.UpstreamFailed("chat", "openai", k)
		}
		counts["chat/openai/"+k] = i + 1
	}
	m.UpstreamFailed("responses", "deepseek", metrics.UpstreamInvalid)
	counts["responses/deepseek/"+metrics.UpstreamInvalid] = 1
	if err := testutil.GatherAndCompare(reg, strings.NewReader(upstreamErrorsWant(counts)), "phasegate_upstream_errors_total"); err != nil {
		t.Error(err)
	}
	checkOthersUnmoved(t, reg, "phasegate_upstream_errors_total")
}

func TestUpstreamAnswered(t *testing.T) {
	m, reg := newMetrics(t)
	m.UpstreamAnswered("openai", 500*time.Millisecond)
	m.UpstreamAnswered("openai", 200*time.Second)
	got := samples(t, reg)["phasegate_upstream_first_byte_seconds"]
	for key, want := range map[string]float64{
		`phasegate_upstream_first_byte_seconds_bucket{provider="openai",le="0.25"}`: 0,
		`phasegate_upstream_first_byte_seconds_bucket{provider="openai",le="0.5"}`:  1,
		`phasegate_upstream_first_byte_seconds_bucket{provider="openai",le="120"}`:  1,
		`phasegate_upstream_first_byte_seconds_sum{provider="openai"}`:              200.5,
		`phasegate_upstream_first_byte_seconds_count{provider="openai"}`:            2,
		`phasegate_upstream_first_byte_seconds_count{provider="deepseek"}`:          0,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
		}
	}
	checkOthersUnmoved(t, reg, "phasegate_upstream_first_byte_seconds")
}

func TestTruncated(t *testing.T) {
	m, reg := newMetrics(t)
	m.Truncated(4, 5000, 1)
	m.Truncated(0, 0, 2)
	want := `
# HELP phasegate_truncated_total What history truncation removed to fit the context window: messages, tokens, tool results shortened.
# TYPE phasegate_truncated_total counter
phasegate_truncated_total{kind="messages"} 4
phasegate_truncated_total{kind="shortened_results"} 3
phasegate_truncated_total{kind="tokens"} 5000
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "phasegate_truncated_total"); err != nil {
		t.Error(err)
	}
	checkOthersUnmoved(t, reg, "phasegate_truncated_total")
}

func TestRepaired(t *testing.T) {
	m, reg := newMetrics(t)
	m.Repaired(3, 1, true)
	m.Repaired(1, 0, false)
	want := `
# HELP phasegate_thinking_repairs_total Requests repaired for DeepSeek's thinking mode: reasoning_content restored or emptied, forced tool_choice downgraded.
# TYPE phasegate_thinking_repairs_total counter
phasegate_thinking_repairs_total{kind="reasoning_emptied"} 1
phasegate_thinking_repairs_total{kind="reasoning_restored"} 4
phasegate_thinking_repairs_total{kind="tool_choice_downgraded"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "phasegate_thinking_repairs_total"); err != nil {
		t.Error(err)
	}
	checkOthersUnmoved(t, reg, "phasegate_thinking_repairs_total")
}

func TestRegisterTokenRatios(t *testing.T) {
	reg := prometheus.NewRegistry()
	ratios := map[string]float64{"deepseek-v4-flash": 1.25, "gpt-4o": 0.5}
	metrics.RegisterTokenRatios(reg, []string{"deepseek-v4-flash", "gpt-4o"}, func(model string) float64 { return ratios[model] })
	ratios["gpt-4o"] = 0.75 // read at scrape time
	want := `
# HELP phasegate_token_estimate_ratio Learned ratio of the prompt tokens upstreams report to the gateway's tiktoken estimate, by configured model.
# TYPE phasegate_token_estimate_ratio gauge
phasegate_token_estimate_ratio{model="deepseek-v4-flash"} 1.25
phasegate_token_estimate_ratio{model="gpt-4o"} 0.75
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "phasegate_token_estimate_ratio"); err != nil {
		t.Error(err)
	}
}
