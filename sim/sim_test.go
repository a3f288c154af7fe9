package sim_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/sim"
)

const weatherTool = `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},"unit":{"enum":["c","f"]},"raw":{"type":"boolean"}},"required":["unit","city","days","raw"]}}}`

// simulate answers one request with the simulated model.
func simulate(t *testing.T, method, path, body string) sim.Reply {
	t.Helper()
	return sim.Answer(method, path, []byte(body))
}

// assemble turns a simulated reply, streamed or not, into the message the
// client would end with.
func assemble(t *testing.T, r sim.Reply) (msg map[string]any, finish string, usage map[string]any) {
	t.Helper()
	body := r.Body
	if r.Events != nil {
		var a chat.Assembler
		for _, ev := range r.Events {
			if ev.Data == "" || ev.Data == chat.Done {
				continue
			}
			if err := a.Add([]byte(ev.Data)); err != nil {
				t.Fatalf("chunk %s: %v", ev.Data, err)
			}
		}
		var err error
		if body, err = a.Completion(); err != nil {
			t.Fatal(err)
		}
		if last := r.Events[len(r.Events)-1]; last.Data != chat.Done {
			t.Errorf("stream ends with %+v, want [DONE]", last)
		}
	}
	var c struct {
		Choices []struct {
			Message      map[string]any `json:"message"`
			FinishReason string         `json:"finish_reason"`
		} `json:"choices"`
		Usage map[string]any `json:"usage"`
	}
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatalf("completion %s: %v", body, err)
	}
	return c.Choices[0].Message, c.Choices[0].FinishReason, c.Usage
}

func TestSimulated(t *testing.T) {
	t.Parallel()
	longResult := "a" + strings.Repeat("é", 100) // the 80-byte summary cut lands inside a rune
	tests := []struct {
		name       string
		body       string
		wantFinish string
		wantText   string // a substring of the content
		wantCall   string // name and arguments of the one tool call
		wantUsage  bool
	}{
		{name: "plain answer", body: `{"model":"phasegate-sim","messages":[{"role":"user","content":"hello there"}]}`,
			wantFinish: "stop", wantText: "You said: hello there"},
		{name: "plain answer streamed with usage", body: `{"model":"phasegate-sim","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello there"}]}`,
			wantFinish: "stop", wantText: "You said: hello there", wantUsage: true},
		{name: "calls the first tool", body: `{"model":"any","messages":[{"role":"user","content":"weather?"}],"tools":[` + weatherTool + `]}`,
			wantFinish: "tool_calls", wantCall: `get_weather {"city":"example","days":1,"raw":true,"unit":"c"}`},
		{name: "calls the first tool, streamed", body: `{"model":"any","stream":true,"messages":[{"role":"user","content":"weather?"}],"tools":[` + weatherTool + `]}`,
			wantFinish: "tool_calls", wantCall: `get_weather {"city":"example","days":1,"raw":true,"unit":"c"}`},
		{name: "tool_choice none answers", body: `{"model":"any","tool_choice":"none","messages":[{"role":"user","content":"hi"}],"tools":[` + weatherTool + `]}`,
			wantFinish: "stop", wantText: "You said: hi"},
		{name: "answers from the tool result", body: `{"model":"any","messages":[{"role":"user","content":"w?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"sunny"}],"tools":[` + weatherTool + `]}`,
			wantFinish: "stop", wantText: "from the tool result: sunny"},
		{name: "a long tool result is cut on a rune boundary", body: `{"model":"any","messages":[{"role":"user","content":"w?"},{"role":"tool","tool_call_id":"c","content":"` + longResult + `"}]}`,
			wantFinish: "stop", wantText: ": a" + strings.Repeat("é", 39) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := simulate(t, http.MethodPost, "/v1/chat/completions", tt.body)
			if r.Status != 0 && r.Status != 200 {
				t.Fatalf("status = %d: %s", r.Status, r.Body)
			}
			msg, finish, usage := assemble(t, r)
			if finish != tt.wantFinish {
				t.Errorf("finish = %q, want %q", finish, tt.wantFinish)
			}
			content, _ := msg["content"].(string)
			if !utf8.ValidString(content) || strings.ContainsRune(content, utf8.RuneError) {
				t.Errorf("content %q is not clean UTF-8", content)
			}
			if !strings.Contains(content, tt.wantText) {
				t.Errorf("content = %q, want it to contain %q", content, tt.wantText)
			}
			if r, _ := msg["reasoning_content"].(string); r == "" {
				t.Errorf("no reasoning_content in %v", msg)
			}
			var call string
			if calls, _ := msg["tool_calls"].([]any); len(calls) > 0 {
				if len(calls) != 1 {
					t.Errorf("%d tool calls, want 1", len(calls))
				}
				f := calls[0].(map[string]any)["function"].(map[string]any)
				call = f["name"].(string) + " " + f["arguments"].(string)
			}
			if call != tt.wantCall {
				t.Errorf("tool call = %q, want %q", call, tt.wantCall)
			}
			if tt.wantUsage && usage["total_tokens"] == nil {
				t.Errorf("no usage, want one")
			}
		})
	}
}

func TestSimulatedRoutes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		method string
		path   string
		body   string
		status int
	}{
		{name: "models", method: http.MethodGet, path: "/v1/models", status: 0},
		{name: "unknown path", method: http.MethodPost, path: "/v1/embeddings", body: `{}`, status: 404},
		{name: "invalid request", method: http.MethodPost, path: "/v1/chat/completions", body: `{"model":"x","messages":[]}`, status: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := simulate(t, tt.method, tt.path, tt.body)
			if r.Status != tt.status {
				t.Errorf("status = %d, want %d (%s)", r.Status, tt.status, r.Body)
			}
			if tt.status != 0 {
				var e struct {
					Error struct {
						Message string `json:"message"`
					} `json:"error"`
				}
				if err := json.Unmarshal(r.Body, &e); err != nil || e.Error.Message == "" {
					t.Errorf("body %s is not an OpenAI-style error", r.Body)
				}
				return
			}
			var list struct {
				Data []struct {
					ID string `json:"id"`
				} `json:"data"`
			}
			if err := json.Unmarshal(r.Body, &list); err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, m := range list.Data {
				ids = append(ids, m.ID)
			}
			if diff := cmp.Diff(sim.Models, ids); diff != "" {
				t.Errorf("models (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLoopingModelTools: the looping model's burst calls the declared
// shell tool twice and another tool once (the read tool when there is
// one), never a tool named for an agent; with no shell tool, the first
// declared tool not named for one.
func TestLoopingModelTools(t *testing.T) {
	t.Parallel()
	weather := tool("get_weather", "Weather of a city.", "city:string")
	clock := tool("get_time", "Time in a zone.", "zone:string")
	spawn := tool("spawn_agent", "Starts a helper.", "prompt:string")
	tests := []struct {
		name  string
		tools []json.RawMessage
		want  []string
	}{
		{"Claude Code", claude2Tools, []string{"Bash", "Bash", "Read"}},
		{"Codex", codexTools, []string{"exec_command", "exec_command", "write_stdin"}},
		{"Qwen Code", qwenTools, []string{"run_shell_command", "run_shell_command", "read_file"}},
		{"OpenCode", opencodeTools, []string{"bash", "bash", "read"}},
		{"no shell", []json.RawMessage{weather, clock}, []string{"get_weather", "get_weather", "get_time"}},
		{"an agent first", []json.RawMessage{spawn, clock, weather}, []string{"get_time", "get_time", "get_weather"}},
		{"one tool", []json.RawMessage{weather}, []string{"get_weather", "get_weather"}},
		{"only an agent", []json.RawMessage{spawn}, []string{"spawn_agent", "spawn_agent"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body, _ := json.Marshal(map[string]any{"model": sim.LoopingModel, "tools": tt.tools,
				"messages": []any{map[string]any{"role": "user", "content": "Survey the project."}}})
			msg, finish, _ := assemble(t, simulate(t, http.MethodPost, "/v1/chat/completions", string(body)))
			var got []string
			for _, c := range msg["tool_calls"].([]any) {
				got = append(got, c.(map[string]any)["function"].(map[string]any)["name"].(string))
			}
			if finish != chat.FinishToolCalls {
				t.Errorf("finish %q, want tool_calls", finish)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("called (-want +got):\n%s", diff)
			}
		})
	}
}
