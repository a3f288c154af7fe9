package protocol_test

import (
	"slices"
	"testing"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/tools"
)

// TestVerdictsHaveMetricLabels: every verdict the policy gives is a value
// of the verdict label of both the guard's and observe mode's counters
// (the counters drop a value they do not know, so a verdict without its
// label would go uncounted), and so is observe mode's own.
func TestVerdictsHaveMetricLabels(t *testing.T) {
	for _, v := range tools.Verdicts() {
		if !slices.Contains(metrics.Verdicts, string(v)) {
			t.Errorf("verdict %q is not a value of phasegate_tool_calls_total's verdict label (metrics.Verdicts)", v)
		}
		if !slices.Contains(metrics.ObservedVerdicts, string(v)) {
			t.Errorf("verdict %q is not a value of phasegate_observed_tool_calls_total's verdict label (metrics.ObservedVerdicts)", v)
		}
	}
	if !slices.Contains(metrics.ObservedVerdicts, protocol.VerdictOverCycleBudget) {
		t.Errorf("%q is not a value of metrics.ObservedVerdicts", protocol.VerdictOverCycleBudget)
	}
}
