package protocol

import (
	"encoding/json"
	"testing"
)

// FuzzPhaseExtension holds phaseExtension to json.Marshal of the struct it
// replaced, byte for byte: escapes (HTML ones too), invalid UTF-8, U+2028,
// negative and large numbers.
func FuzzPhaseExtension(f *testing.F) {
	f.Add("action_phase", "pg-4a81b4be332f189ac4f0637d", "", 1, 0)
	f.Add("tool_phase", "req <&> \"quoted\"\n", "proj\u2028\xff", 2, 1)
	f.Add("", "\x00\x1f\\", "é", -1, 1<<40)
	f.Fuzz(func(t *testing.T, phase, requestID, projectID string, phaseIndex, cycleIndex int) {
		want, err := json.Marshal(struct {
			Phase      Phase  `json:"phase"`
			RequestID  string `json:"request_id"`
			ProjectID  string `json:"project_id"`
			PhaseIndex int    `json:"phase_index"`
			CycleIndex int    `json:"cycle_index"`
		}{Phase(phase), requestID, projectID, phaseIndex, cycleIndex})
		if err != nil {
			t.Fatal(err)
		}
		if got := phaseExtension(Phase(phase), requestID, projectID, phaseIndex, cycleIndex); string(got) != string(want) {
			t.Fatalf("phaseExtension:\n got %s\nwant %s", got, want)
		}
	})
}
