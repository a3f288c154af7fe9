package envelope

import (
	"strings"
	"testing"
)

// Error Handling: "retry with stricter prompt"; Missing Required Fields:
// "request clarification" from the model.
func TestNotice(t *testing.T) {
	tests := []struct {
		name     string
		r        Result
		want     Phase
		contains []string
	}{
		{"missing field, phase known", Judge(env("progress", `{"status": "blocked"}`)), "",
			[]string{"- missing required field data.task_id\n", `{"phase": "progress", "data": {...}}`,
				`The data of phase "progress" must have the fields task_id, status.`}},
		{"bad enum", Judge(env("completion", `{"task_id": "t", "status": "done"}`)), "",
			[]string{`value "done" is not one of "success", "partial", "failed", "timeout"`}},
		{"JSON error, expected phase given", Judge("hello there"), PhaseTaskList,
			[]string{"- JSON parse error: ", `{"phase": "task_list"`, "fields tasks."}},
		{"no envelope, phase unknown", Parse("Analysis complete."), "",
			[]string{"- missing start delimiter " + StartDelimiter, `{"phase": one of "analysis", "task_list"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Default().Notice(tt.r, tt.want)
			for _, c := range append(tt.contains, StartDelimiter+"\n", EndDelimiter+"\n",
				"no trailing commas, no code fences") {
				if !strings.Contains(got, c) {
					t.Errorf("notice lacks %q:\n%s", c, got)
				}
			}
		})
	}
}

func TestNoticeValid(t *testing.T) {
	if got := Default().Notice(Judge(validBody), ""); got != "" {
		t.Errorf("Notice of a valid result = %q, want empty", got)
	}
}
