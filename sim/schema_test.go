package sim_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/schema"
	"github.com/phasegate/phasegate/sim"
)

// valid checks that args are one JSON object that params accepts.
func valid(t *testing.T, params, args string) {
	t.Helper()
	s, err := schema.Compile("params.json", []byte(params))
	if err != nil {
		t.Fatalf("compile %s: %v", params, err)
	}
	var v any
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		t.Fatalf("arguments %s: %v", args, err)
	}
	if _, ok := v.(map[string]any); !ok {
		t.Fatalf("arguments %s are not an object", args)
	}
	if err := s.Validate(v); err != nil {
		t.Errorf("arguments %s break the schema %s: %v", args, params, err)
	}
}

// tool is a function tool declaration with a parameters schema.
func schemaTool(name, params string) string {
	return fmt.Sprintf(`{"type":"function","function":{"name":%q,"description":"","parameters":%s}}`, name, params)
}

// callOf answers body with the simulated model and returns its one call.
func callOf(t *testing.T, body string) chat.FunctionCall {
	t.Helper()
	msg, finish, _ := assemble(t, simulate(t, "POST", "/v1/chat/completions", body))
	calls, _ := msg["tool_calls"].([]any)
	if finish != chat.FinishToolCalls || len(calls) != 1 {
		t.Fatalf("finish %q, calls %v; want one call", finish, msg["tool_calls"])
	}
	fn := calls[0].(map[string]any)["function"].(map[string]any)
	return chat.FunctionCall{Name: fn["name"].(string), Arguments: fn["arguments"].(string)}
}

// TestToolCallFollowsSchema: phasegate-sim calls a declared tool with
// arguments its schema accepts, whatever the schema asks: nested objects,
// arrays of a least length, enums and consts, formats, bounds, local
// references, alternatives and nullable types.
func TestToolCallFollowsSchema(t *testing.T) {
	t.Parallel()
	for name, params := range map[string]string{
		"no parameters":    `{"type":"object","properties":{}}`,
		"strings and ints": `{"type":"object","properties":{"path":{"type":"string","minLength":12},"line":{"type":"integer","minimum":10,"maximum":20}},"required":["path","line"]}`,
		"nested":           `{"type":"object","properties":{"edit":{"type":"object","properties":{"old":{"type":"string"},"new":{"type":"string"},"count":{"type":"number","minimum":2.5}},"required":["old","new","count"]}},"required":["edit"]}`,
		"arrays":           `{"type":"object","properties":{"files":{"type":"array","minItems":2,"items":{"type":"string","format":"uri"}}},"required":["files"]}`,
		"enum, const":      `{"type":"object","properties":{"unit":{"enum":["c","f"]},"v":{"const":2},"flag":{"type":"boolean"}},"required":["unit","v","flag"]}`,
		"formats":          `{"type":"object","properties":{"at":{"type":"string","format":"date-time"},"to":{"type":"string","format":"email"},"id":{"type":"string","format":"uuid"}},"required":["at","to","id"]}`,
		"refs":             `{"type":"object","$defs":{"pos":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}},"properties":{"from":{"$ref":"#/$defs/pos"}},"required":["from"]}`,
		"alternatives":     `{"type":"object","properties":{"q":{"anyOf":[{"type":"integer","minimum":3},{"type":"string"}]},"n":{"type":["null","integer"]}},"required":["q","n"]}`,
		"no type given":    `{"properties":{"query":{"type":"string"}},"required":["query"],"additionalProperties":false}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body := `{"model":"phasegate-sim","messages":[{"role":"user","content":"go"}],"tools":[` + schemaTool("do_it", params) + `]}`
			call := callOf(t, body)
			if call.Name != "do_it" {
				t.Errorf("called %q, want do_it", call.Name)
			}
			valid(t, params, call.Arguments)
		})
	}
}

// TestToolCallPicksFittingTool: of several declared tools, phasegate-sim
// calls the one the user's message speaks of, the first on a tie; never a
// tool that starts an agent while another is declared, even when the
// message speaks of agents.
func TestToolCallPicksFittingTool(t *testing.T) {
	t.Parallel()
	time := schemaTool("get_time", `{"type":"object","properties":{"timezone":{"type":"string"}},"required":["timezone"]}`)
	weather := schemaTool("get_weather", `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)
	for prompt, want := range map[string]string{"What's the weather in Paris?": "get_weather", "What time is it?": "get_time", "Hello": "get_time"} {
		body := `{"model":"phasegate-sim","messages":[{"role":"user","content":"` + prompt + `"}],"tools":[` + time + `,` + weather + `]}`
		if got := callOf(t, body).Name; got != want {
			t.Errorf("%q: called %s, want %s", prompt, got, want)
		}
	}
	prompt := `{"type":"object","properties":{"prompt":{"type":"string"}},"required":["prompt"]}`
	bash := schemaTool("Bash", `{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)
	for _, tt := range []struct{ prompt, agent, want string }{
		{"Hello", "Agent", "Bash"},
		{"Hello", "spawn_agent", "Bash"},
		{"Hello", "task", "Bash"},
		{"Start an agent for this", "Agent", "Bash"},
	} {
		body := `{"model":"phasegate-sim","messages":[{"role":"user","content":"` + tt.prompt + `"}],"tools":[` + schemaTool(tt.agent, prompt) + `,` + bash + `]}`
		if got := callOf(t, body).Name; got != tt.want {
			t.Errorf("%q with %s declared first: called %s, want %s", tt.prompt, tt.agent, got, tt.want)
		}
	}
}

// codingTools are a coding agent's tools under names of its own, none of
// which the scripted agents' scripts name.
var codingTools = map[string]string{
	"bash":          `{"type":"object","properties":{"command":{"type":"string"},"timeout_ms":{"type":"integer","minimum":1000}},"required":["command"]}`,
	"view":          `{"type":"object","properties":{"file_path":{"type":"string"},"offset":{"type":"integer"}},"required":["file_path"]}`,
	"grep":          `{"type":"object","properties":{"regex":{"type":"string"},"glob":{"type":"string"}},"required":["regex"]}`,
	"apply_patch":   `{"type":"object","properties":{"path":{"type":"string"},"diff":{"type":"string"}},"required":["path","diff"]}`,
	"list_dir_tree": `{"type":"object","properties":{"root":{"type":"string"},"depth":{"type":"integer","maximum":3}},"required":["root","depth"]}`,
}

// TestScriptedAgentsOnDeclaredTools: the session and verify models call
// only tools the request declares, with arguments their schemas accept,
// when the declared tools are not those of their scripts; and they keep
// their stories: the session's test runs repeat, the verification loop
// varies only in form.
func TestScriptedAgentsOnDeclaredTools(t *testing.T) {
	t.Parallel()
	var decl []string
	for name, params := range codingTools {
		decl = append(decl, schemaTool(name, params))
	}
	for _, model := range []string{sim.SessionModel, sim.VerifyModel} {
		t.Run(model, func(t *testing.T) {
			t.Parallel()
			msgs := []any{map[string]any{"role": "user", "content": "Fix the rounding bug."}}
			seen := map[string]int{}
			for i := range 25 {
				b, _ := json.Marshal(msgs)
				body := `{"model":"` + model + `","messages":` + string(b) + `,"tools":[` + strings.Join(decl, ",") + `]}`
				msg, finish, _ := assemble(t, simulate(t, "POST", "/v1/chat/completions", body))
				if finish != chat.FinishToolCalls {
					break
				}
				call := msg["tool_calls"].([]any)[0].(map[string]any)
				fn := call["function"].(map[string]any)
				name, args := fn["name"].(string), fn["arguments"].(string)
				params, ok := codingTools[name]
				if !ok {
					t.Fatalf("call %d names %q, which the request does not declare", i+1, name)
				}
				valid(t, params, args)
				seen[name+" "+args]++
				msgs = append(msgs, map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{call}},
					map[string]any{"role": "tool", "tool_call_id": call["id"], "content": fmt.Sprintf("result %d", i)})
			}
			repeated := 0
			for _, n := range seen {
				repeated = max(repeated, n)
			}
			if model == sim.SessionModel && (len(seen) < 10 || repeated < 2) {
				t.Errorf("the session made %d different calls, repeating one at most %d times; want its story (a test run repeated): %v", len(seen), repeated, seen)
			}
			if model == sim.VerifyModel && len(seen) < 3 {
				t.Errorf("the verification loop made %d different calls: %v", len(seen), seen)
			}
		})
	}
}

// TestAnswerNamesRequestedModel: every answer names the model the request
// asked for, streamed or not, as the Responses door's answers do, and
// GET /models/{id} answers any name the simulated model serves.
func TestAnswerNamesRequestedModel(t *testing.T) {
	t.Parallel()
	for _, model := range []string{"deepseek-v4-flash", sim.Model, sim.LoopingModel, "gpt-4o-mini"} {
		for _, stream := range []bool{false, true} {
			body := fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":"Hello"}]}`, model, stream)
			r := simulate(t, "POST", "/v1/chat/completions", body)
			raw := string(r.Body)
			for _, ev := range r.Events {
				raw += ev.Data
			}
			if n, want := strings.Count(raw, `"model":"`), strings.Count(raw, `"model":"`+model+`"`); n == 0 || n != want {
				t.Errorf("%s (stream %v): %d model fields, %d naming it:\n%s", model, stream, n, want, raw)
			}
		}
		r := simulate(t, "GET", "/v1/models/"+model, "")
		var m struct{ ID, Object string }
		if err := json.Unmarshal(r.Body, &m); err != nil || r.Status != 0 && r.Status != 200 || m.ID != model || m.Object != "model" {
			t.Errorf("GET /v1/models/%s: %d %s", model, r.Status, r.Body)
		}
	}
}
