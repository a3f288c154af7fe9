package envelope

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The seed's examples, one per phase ("Phase Types"), verbatim.
var seedExamples = map[Phase]string{
	PhaseAnalysis: `{"phase": "analysis", "data": {
		"summary": "The project is a Node.js backend with Express API and WebSocket support",
		"key_files": ["backend/server.js", "backend/cdp-controller.js", "public/app.js"],
		"estimated_complexity": "high", "recommended_splits": 6,
		"components": [
			{"name": "REST API", "files": ["server.js:2400-2520"], "complexity": "medium"},
			{"name": "WebSocket", "files": ["server.js:2522-2600"], "complexity": "low"},
			{"name": "CDP Controller", "files": ["cdp-controller.js"], "complexity": "high"}],
		"notes": "Heavy use of async/await, consider documenting error handling patterns"}}`,
	PhaseTaskList: `{"phase": "task_list", "data": {"total_tasks": 4, "tasks": [
		{"id": "task_001", "title": "REST API Documentation", "description": "Document all REST endpoints",
		 "scope": ["backend/server.js:2400-2520"], "priority": 1, "dependencies": []},
		{"id": "task_004", "title": "Integration Guide", "description": "Write guide",
		 "scope": [], "priority": 3, "dependencies": ["task_001", "task_002", "task_003"]}],
		"parallelizable_groups": [["task_001", "task_002", "task_003"], ["task_004"]]}}`,
	PhaseProgress: `{"phase": "progress", "data": {"task_id": "task_001", "status": "in_progress",
		"progress_percent": 60, "current_action": "Documenting /api/session endpoints",
		"files_processed": 3, "files_total": 5}}`,
	PhaseCompletion: `{"phase": "completion", "data": {"task_id": "task_001", "status": "success",
		"summary": "Documented 15 REST endpoints with request/response examples",
		"output_files": ["docs/api-rest.md"], "metrics": {"endpoints_documented": 15, "examples_created": 8}}}`,
	PhaseAggregation: `{"phase": "aggregation", "data": {"status": "success",
		"summary": "Merged 4 documentation sections into unified docs",
		"conflicts": [{"type": "duplicate", "description": "Both documented /api/status",
		 "resolution": "Kept version from task_001 as more complete"}],
		"output_files": ["docs/README.md", "docs/api.md", "docs/architecture.md"]}}`,
}

// seedFailureExample is the seed's "Example (failure)" of the completion phase.
const seedFailureExample = `{"phase": "completion", "data": {"task_id": "task_002", "status": "failed",
	"error": "Could not find WebSocket implementation in specified files",
	"warnings": ["File server.js:2522-2600 does not contain WebSocket code"]}}`

func TestJudgeSeedExamples(t *testing.T) {
	for _, p := range Phases {
		t.Run(string(p), func(t *testing.T) {
			r := Judge(seedExamples[p])
			if !r.Valid || r.Repaired || r.Phase != p || r.Errors != nil {
				t.Errorf("Judge = %+v, want valid %s, not repaired", r, p)
			}
		})
	}
	if r := Judge(seedFailureExample); !r.Valid {
		t.Errorf("seed completion failure example: errors %q", r.Errors)
	}
}

func env(phase, data string) string { return `{"phase": "` + phase + `", "data": ` + data + `}` }

func TestJudgeRules(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		valid bool
		want  []string // Errors
	}{
		// Parsing Algorithm: missing phase, missing data.
		{"algorithm: missing phase", `{"data": {}}`, false, []string{"missing required field phase"}},
		{"algorithm: missing data", `{"phase": "aggregation"}`, false, []string{"missing required field data"}},
		{"algorithm: keys match exactly", `{"Phase": "aggregation", "DATA": {"status": "x"}}`, false,
			[]string{"missing required field phase", "missing required field data"}},
		{"algorithm: phase null", `{"phase": null, "data": {"status": "x"}}`, false, []string{"missing required field phase"}},
		{"algorithm: phase not a string", `{"phase": 3, "data": {}}`, false, []string{"phase is number, want string"}},
		{"algorithm: data not an object", `{"phase": "aggregation", "data": [1]}`, false, []string{"data is array, want object"}},
		{"algorithm: not an object", `[1, 2]`, false, []string{`the envelope must be a JSON object with "phase" and "data", got array`}},
		{"phase types: unknown phase", env("review", `{}`), false,
			[]string{`phase: value "review" is not one of "analysis", "task_list", "progress", "completion", "aggregation"`}},
		// 1. Analysis.
		{"analysis: required summary, recommended_splits", env("analysis", `{}`), false,
			[]string{"missing required field data.summary, data.recommended_splits"}},
		{"analysis: recommended_splits is a number", env("analysis", `{"summary": "s", "recommended_splits": "5"}`), false,
			[]string{"data.recommended_splits is string, want number"}},
		{"analysis: estimated_complexity enum", env("analysis", `{"summary": "s", "recommended_splits": 2, "estimated_complexity": "extreme"}`), false,
			[]string{`data.estimated_complexity: value "extreme" is not one of "low", "medium", "high"`}},
		{"analysis: key_files string[]", env("analysis", `{"summary": "s", "recommended_splits": 2, "key_files": ["a", 1]}`), false,
			[]string{"data.key_files[1] is number, want string"}},
		{"analysis: warnings string[]", env("analysis", `{"summary": "s", "recommended_splits": 2, "warnings": "w"}`), false,
			[]string{"data.warnings is string, want array"}},
		{"analysis: components object[]", env("analysis", `{"summary": "s", "recommended_splits": 2, "components": ["c"]}`), false,
			[]string{"data.components[0] is string, want object"}},
		{"analysis: notes string", env("analysis", `{"summary": "s", "recommended_splits": 2, "notes": 1}`), false,
			[]string{"data.notes is number, want string"}},
		{"analysis: unknown fields allowed", env("analysis", `{"summary": "s", "recommended_splits": 2, "extra": true}`), true, nil},
		// 2. Task list.
		{"task_list: required tasks", env("task_list", `{"total_tasks": 0}`), false, []string{"missing required field data.tasks"}},
		{"task_list: task required id, title, description", env("task_list", `{"tasks": [{"id": "t"}]}`), false,
			[]string{"missing required field data.tasks[0].title, data.tasks[0].description"}},
		{"task_list: priority 1-10", env("task_list", `{"tasks": [{"id": "t", "title": "t", "description": "d", "priority": 11}]}`), false,
			[]string{"data.tasks[0].priority: 11 is more than the maximum 10"}},
		{"task_list: priority at least 1", env("task_list", `{"tasks": [{"id": "t", "title": "t", "description": "d", "priority": 0}]}`), false,
			[]string{"data.tasks[0].priority: 0 is less than the minimum 1"}},
		{"task_list: dependencies string[]", env("task_list", `{"tasks": [{"id": "t", "title": "t", "description": "d", "dependencies": [1]}]}`), false,
			[]string{"data.tasks[0].dependencies[0] is number, want string"}},
		{"task_list: parallelizable_groups string[][]", env("task_list", `{"tasks": [], "parallelizable_groups": ["a"]}`), false,
			[]string{"data.parallelizable_groups[0] is string, want array"}},
		{"task_list: execution_order string[]", env("task_list", `{"tasks": [], "execution_order": [["a"]]}`), false,
			[]string{"data.execution_order[0] is array, want string"}},
		{"task_list: estimated_tokens number", env("task_list", `{"tasks": [{"id": "t", "title": "t", "description": "d", "estimated_tokens": "many"}]}`), false,
			[]string{"data.tasks[0].estimated_tokens is string, want number"}},
		// 3. Progress.
		{"progress: required task_id, status", env("progress", `{}`), false,
			[]string{"missing required field data.task_id, data.status"}},
		{"progress: status values", env("progress", `{"task_id": "t", "status": "done"}`), false,
			[]string{`data.status: value "done" is not one of "in_progress", "blocked", "retrying"`}},
		{"progress: blocked", env("progress", `{"task_id": "t", "status": "blocked"}`), true, nil},
		{"progress: retrying", env("progress", `{"task_id": "t", "status": "retrying"}`), true, nil},
		{"progress: progress_percent 0-100", env("progress", `{"task_id": "t", "status": "blocked", "progress_percent": 101}`), false,
			[]string{"data.progress_percent: 101 is more than the maximum 100"}},
		{"errors sorted by where, whatever the map order", env("progress", `{"status": "x", "files_total": null, "files_processed": "1"}`), false,
			[]string{"missing required field data.task_id", "data.files_processed is string, want number",
				"data.files_total is null, want number", `data.status: value "x" is not one of "in_progress", "blocked", "retrying"`}},
		{"progress: files_total number", env("progress", `{"task_id": "t", "status": "blocked", "files_total": "5"}`), false,
			[]string{"data.files_total is string, want number"}},
		// 4. Completion.
		{"completion: required task_id, status", env("completion", `{"status": "success"}`), false,
			[]string{"missing required field data.task_id"}},
		{"completion: status values", env("completion", `{"task_id": "t", "status": "in_progress"}`), false,
			[]string{`data.status: value "in_progress" is not one of "success", "partial", "failed", "timeout"`}},
		{"completion: partial", env("completion", `{"task_id": "t", "status": "partial"}`), true, nil},
		{"completion: timeout", env("completion", `{"task_id": "t", "status": "timeout"}`), true, nil},
		{"completion: metrics object", env("completion", `{"task_id": "t", "status": "failed", "metrics": 3}`), false,
			[]string{"data.metrics is number, want object"}},
		// 5. Aggregation.
		{"aggregation: required status", env("aggregation", `{"summary": "s"}`), false, []string{"missing required field data.status"}},
		{"aggregation: conflicts object[]", env("aggregation", `{"status": "success", "conflicts": "none"}`), false,
			[]string{"data.conflicts is string, want array"}},
		{"aggregation: output_files string[]", env("aggregation", `{"status": "success", "output_files": [true]}`), false,
			[]string{"data.output_files[0] is boolean, want string"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Judge(tt.body)
			if r.Valid != tt.valid || r.Repaired {
				t.Errorf("Valid = %v, Repaired = %v; want %v, false", r.Valid, r.Repaired, tt.valid)
			}
			if diff := cmp.Diff(tt.want, r.Errors); diff != "" {
				t.Errorf("Errors (-want +got):\n%s", diff)
			}
		})
	}
}

// Error Handling, Invalid JSON: "Attempt to fix common issues (trailing
// commas, unquoted keys)", and the other mistakes models make.
func TestJudgeRepair(t *testing.T) {
	const data = `{"status": "success"}`
	tests := []struct {
		name string
		body string
	}{
		{"trailing comma", `{"phase": "aggregation", "data": {"status": "success",},}`},
		{"unquoted keys", `{phase: "aggregation", data: {status: "success"}}`},
		{"single-quoted keys and strings", `{'phase': 'aggregation', 'data': {'status': 'success'}}`},
		{"code fence", "```json\n" + env("aggregation", data) + "\n```"},
		{"smart quotes", `{“phase”: “aggregation”, “data”: {“status”: “success”}}`},
		{"missing closing braces", `{"phase": "aggregation", "data": {"status": "success"`},
		{"missing closing bracket", `{"phase": "aggregation", "data": {"status": "success", "output_files": ["a"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Judge(tt.body)
			if !r.Valid || !r.Repaired || r.Phase != PhaseAggregation {
				t.Fatalf("Judge = %+v, want valid and repaired", r)
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(r.JSON), &v); err != nil {
				t.Errorf("repaired JSON %q does not parse: %v", r.JSON, err)
			}
			if !strings.Contains(string(r.Data), `"status"`) {
				t.Errorf("Data = %s, want the repaired data", r.Data)
			}
		})
	}
}

// Error Handling, Invalid JSON: "If unfixable, retry request": the error
// is the model's JSON error.
func TestJudgeUnfixable(t *testing.T) {
	for _, body := range []string{"", "  \n ", "hello there", `{"phase": "analysis"} and more`} {
		r := Judge(body)
		if r.Valid || r.Repaired || len(r.Errors) != 1 || r.JSON != "" {
			t.Errorf("Judge(%q) = %+v, want one error, no JSON", body, r)
		}
	}
	r := Judge("hello there")
	if !strings.HasPrefix(r.Errors[0], "JSON parse error: ") {
		t.Errorf("error %q, want a JSON parse error", r.Errors[0])
	}
}

func TestJudgeUnrepairedJSONIsTrimmedBody(t *testing.T) {
	r := Judge("\n  " + validBody + "\n")
	if r.JSON != validBody || r.Repaired {
		t.Errorf("JSON = %q, Repaired = %v; want the body trimmed", r.JSON, r.Repaired)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		text string
		want Result
	}{
		{"seed Example Valid Response", seedExample, Result{Found: true, Phase: PhaseAnalysis, Valid: true,
			JSON: validBody, Data: json.RawMessage(`{"summary": "Found 5 main modules", "recommended_splits": 5}`),
			Before: "I've analyzed the codebase and found several components to document.",
			After:  "Let me know if you'd like me to proceed with the task breakdown."}},
		{"algorithm: no start delimiter, fallback", "Analysis complete.", Result{
			Errors: []string{"missing start delimiter " + StartDelimiter}, Signals: []Signal{SignalAnalysisComplete}}},
		{"algorithm: missing end delimiter", "x " + StartDelimiter + validBody, Result{
			Errors: []string{"missing end delimiter " + EndDelimiter}}},
		{"algorithm: end before start is not an envelope", EndDelimiter + StartDelimiter, Result{
			Errors: []string{"missing end delimiter " + EndDelimiter}}},
		{"algorithm: first envelope wins", StartDelimiter + validBody + EndDelimiter + StartDelimiter + "{" + EndDelimiter,
			Result{Found: true, Phase: PhaseAnalysis, Valid: true, JSON: validBody,
				Data:  json.RawMessage(`{"summary": "Found 5 main modules", "recommended_splits": 5}`),
				After: StartDelimiter + "{" + EndDelimiter}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Parse(tt.text)); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRequiredMatchesSeed(t *testing.T) {
	want := map[Phase][]string{
		PhaseAnalysis:    {"summary", "recommended_splits"},
		PhaseTaskList:    {"tasks"},
		PhaseProgress:    {"task_id", "status"},
		PhaseCompletion:  {"task_id", "status"},
		PhaseAggregation: {"status"},
	}
	for p, w := range want {
		if diff := cmp.Diff(w, Required(p)); diff != "" {
			t.Errorf("Required(%s) (-want +got):\n%s", p, diff)
		}
	}
	if Required("review") != nil {
		t.Error("Required of an unknown phase is not nil")
	}
}

func TestJudgeDoesNotRepairLargeJSON(t *testing.T) {
	body := `{"phase": "aggregation", "data": {"status": "success", "summary": "` +
		strings.Repeat("x", MaxRepairBytes) + `",}}`
	r := Judge(body)
	if r.Valid || r.Repaired || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "not repaired") {
		t.Errorf("Judge = %+v, want one JSON error, not repaired", r)
	}
}

// largeTaskList is an envelope of about 10 KB.
func largeTaskList() string {
	task := `{"id": "task_001", "title": "REST API Documentation", "description": "Document all REST endpoints in server.js including request/response formats", "scope": ["backend/server.js:2400-2520"], "priority": 1, "dependencies": []}`
	tasks := strings.Repeat(task+",", 44) + task
	return `{"phase": "task_list", "data": {"total_tasks": 45, "tasks": [` + tasks + `]}}`
}

func BenchmarkJudge10KB(b *testing.B) {
	body := largeTaskList()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if !Judge(body).Valid {
			b.Fatal("invalid")
		}
	}
}

func BenchmarkJudge10KBRepaired(b *testing.B) {
	body := strings.TrimSuffix(largeTaskList(), "]}}") + ",]}" // trailing comma, missing brace
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if r := Judge(body); !r.Valid || !r.Repaired {
			b.Fatal("not repaired")
		}
	}
}

func BenchmarkScannerPlainText(b *testing.B) {
	piece := strings.Repeat("plain text, ", 10)
	var s Scanner
	b.SetBytes(int64(len(piece)))
	for b.Loop() {
		s.Feed(piece)
	}
}
