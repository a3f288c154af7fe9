package protocol_test

import (
	"context"
	"slices"
	"testing"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
)

// parallel returns an assistant message making the calls (id, name,
// arguments, in threes) at once, and a tool message answering each of
// those whose id is in answered.
func parallel(answered []string, calls ...string) []string {
	var tcs []any
	for i := 0; i+2 < len(calls); i += 3 {
		tcs = append(tcs, map[string]any{"id": calls[i], "type": "function", "function": map[string]any{"name": calls[i+1], "arguments": calls[i+2]}})
	}
	out := []string{jsonText(map[string]any{"role": "assistant", "content": "", "reasoning_content": "All at once.", "tool_calls": tcs})}
	for _, id := range answered {
		out = append(out, jsonText(map[string]any{"role": "tool", "tool_call_id": id, "content": "result"}))
	}
	return out
}

// TestObserveParallelCalls: observe mode judges the calls of a parallel
// message as the guard would have met them, one after another (it
// forwards one call per response): the second of two identical calls is
// a repeat, a call past the cycle budget is over it, a call the client
// did not run is not judged.
func TestObserveParallelCalls(t *testing.T) {
	read := `{"path":"a.go"}`
	tests := []struct {
		name    string
		cfg     protocol.TwoStageConfig
		history []string
		want    []string
	}{
		{"strict: two identical calls", protocol.TwoStageConfig{},
			history(parallel([]string{"c1", "c2"}, "c1", "read_file", read, "c2", "read_file", read)), []string{"forward", "duplicate"}},
		{"strict: two identical calls, keys respaced", protocol.TwoStageConfig{},
			history(parallel([]string{"c1", "c2"}, "c1", "read_file", read, "c2", "read_file", `{ "path" : "a.go" }`)), []string{"forward", "duplicate"}},
		{"strict: two different calls", protocol.TwoStageConfig{},
			history(parallel([]string{"c1", "c2"}, "c1", "read_file", read, "c2", "list_dir", `{}`)), []string{"forward", "forward"}},
		{"strict: the second call past the cycle budget", protocol.TwoStageConfig{},
			history(ran("c0", "list_dir", `{}`), ran("c9", "read_file", `{"path":"b.go"}`), parallel([]string{"c1", "c2"}, "c1", "read_file", read, "c2", "write_file", `{"path":"x","text":"t"}`)),
			[]string{"forward", protocol.VerdictOverCycleBudget}},
		{"a call not run is not judged", protocol.TwoStageConfig{},
			history(parallel([]string{"c2"}, "c1", "read_file", read, "c2", "read_file", read)), []string{"forward"}},
		{"agent: one repeat may run", protocol.TwoStageConfig{Profile: protocol.ProfileAgent},
			history(parallel([]string{"c1", "c2"}, "c1", "read_file", read, "c2", "read_file", read)), []string{"forward", "forward"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			g := protocol.NewTwoStage(tt.cfg, rec)
			got := g.Observe(context.Background(), exchange(newRequest(t, true, tt.history, ""), nil, protocol.Limits{}))
			var verdicts []string
			for _, o := range got {
				verdicts = append(verdicts, o.Verdict)
			}
			if !slices.Equal(verdicts, tt.want) {
				t.Errorf("verdicts %v, want %v", verdicts, tt.want)
			}
			if evs := rec.kinds(metrics.TraceObservedToolCall); len(evs) != len(tt.want) {
				t.Errorf("%d observed_tool_call events, want %d", len(evs), len(tt.want))
			}
		})
	}
}
