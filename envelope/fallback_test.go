package envelope

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Fallback Detection: the seed's four patterns, case-insensitive, any
// whitespace between the words, unanchored.
func TestFallback(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []Signal
	}{
		{"analysis complete", "The analysis is done? No: Analysis complete.", []Signal{SignalAnalysisComplete}},
		{"exploration finished", "EXPLORATION\n\tFINISHED", []Signal{SignalAnalysisComplete}},
		{"analysis done", "analysis done", []Signal{SignalAnalysisComplete}},
		{"task list ready", "Task  list ready", []Signal{SignalTasksReady}},
		{"breakdown created", "breakdown created", []Signal{SignalTasksReady}},
		{"task list complete", "task list complete", []Signal{SignalTasksReady}},
		{"task complete", "Task complete.", []Signal{SignalWorkerDone}},
		{"work finished", "work finished", []Signal{SignalWorkerDone}},
		{"task done", "task done", []Signal{SignalWorkerDone}},
		{"error", "An Error occurred", []Signal{SignalWorkerError}},
		{"failed", "the build failed", []Signal{SignalWorkerError}},
		{"could not", "I could\nnot open it", []Signal{SignalWorkerError}},
		{"no word boundaries, as in the seed", "a terror", []Signal{SignalWorkerError}},
		{"several, in the seed's order", "Work done, but one file failed", []Signal{SignalWorkerDone, SignalWorkerError}},
		{"none", "All good so far.", nil},
		{"words must be adjacent", "analysis is complete", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Fallback(tt.text)); diff != "" {
				t.Errorf("Fallback(%q) (-want +got):\n%s", tt.text, diff)
			}
		})
	}
}
