package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/phasegate/phasegate/metrics"
)

// TestSessionMetrics: each method moves its series, and label values
// outside the known sets (a client's model, an unknown kind) are not
// counted under a label of their own.
func TestSessionMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, providers, "deepseek-v4-flash")
	m.SessionDecision("forced_final")
	m.SessionDecision("made-up")
	m.SessionCapped("SESSION_MAX_USD")
	m.SessionCapped("SESSION_MAX_ANYTHING")
	m.SessionCharged("deepseek-v4-flash", 0.25, 3, 7, 2)
	m.SessionCharged("deepseek-v4-flash", 0.5, 60, 8, 2)
	m.SessionEnded("capped_usd", 0.75)
	m.Saved("deepseek-v4-flash", "duplicate", 1200, 0.01)
	m.Saved("deepseek-v4-flash", "forward", 1200, 0.01)
	m.Saved("deepseek-v4-flash", "not-a-verdict", 1200, 0.01)
	want := `
# HELP phasegate_session_caps_total Sessions that spent a budget (or an operator stopped), by budget; each session counts once.
# TYPE phasegate_session_caps_total counter
phasegate_session_caps_total{budget="SESSION_MAX_TOKENS"} 0
phasegate_session_caps_total{budget="SESSION_MAX_TOOL_CALLS"} 0
phasegate_session_caps_total{budget="SESSION_MAX_USD"} 1
phasegate_session_caps_total{budget="SESSION_STOPPED"} 0
# HELP phasegate_sessions Agent sessions the session store holds (active), and those of them whose budget is spent (capped), as of this replica's last charge; replicas on one Redis report the same shared count.
# TYPE phasegate_sessions gauge
phasegate_sessions{state="active"} 8
phasegate_sessions{state="capped"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "phasegate_session_caps_total", "phasegate_sessions"); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		metric string
		labels []string
		want   float64
	}{
		{"phasegate_session_usd_total", []string{"deepseek-v4-flash"}, 0.75},
		{"phasegate_guard_saved_tokens_total", []string{"duplicate", "deepseek-v4-flash"}, 1200}, // labels by name: kind, model
		{"phasegate_guard_saved_usd_total", []string{"duplicate", "deepseek-v4-flash"}, 0.01},
	} {
		if got := counterValue(t, reg, c.metric, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.metric, c.labels, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(reg, "phasegate_guard_saved_tokens_total"); n != 2*len(metrics.RefusalKinds()) {
		t.Errorf("saved tokens series = %d, want one per model (the configured one and other) and refusal kind", n)
	}
	for _, kind := range metrics.RefusalKinds() {
		if kind == "forward" {
			t.Error("forward is a refusal kind")
		}
	}
}

// counterValue is the value of the counter name with the label values.
func counterValue(t *testing.T, g prometheus.Gatherer, name string, values ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i, lp := range m.GetLabel() {
				if i >= len(values) || lp.GetValue() != values[i] {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}
