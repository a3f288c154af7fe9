package responses_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/responses"
)

// The fixtures are requests Codex CLI 0.169.0 (codex exec, a custom
// provider with wire_api = "responses") sent to a server of ours that
// recorded them, its machine's paths and installation id replaced:
//   - first-turn: the first request of a session: function tools, a
//     namespace (multi_agent_v1) of function tools and a web_search tool,
//     with include reasoning.encrypted_content, store false,
//     parallel_tool_calls, prompt_cache_key and client_metadata;
//   - third-turn: the third, after the server had answered a reasoning
//     item (encrypted_content "pgr1.opaque-one") and an exec_command call,
//     then a reasoning item and a call of the namespace's close_agent
//     (name close_agent, namespace multi_agent_v1): Codex sends both
//     back, each with its output.
const (
	codexFirstTurn = "testdata/codex-0.169.0-first-turn.json"
	codexThirdTurn = "testdata/codex-0.169.0-third-turn.json"
)

func fixture(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// codexTools are the functions Codex's first request offers, by their
// chat names: its namespace's flattened, its web_search dropped.
var codexTools = []string{"exec_command", "write_stdin", "request_user_input", "view_image",
	"multi_agent_v1__close_agent", "multi_agent_v1__resume_agent", "multi_agent_v1__send_input", "multi_agent_v1__spawn_agent", "multi_agent_v1__wait_agent",
	"get_goal", "create_goal", "update_goal"}

// Codex's first request translates with no 400, for DeepSeek and for
// OpenAI; what neither can take is named as dropped.
func TestCodexFirstTurn(t *testing.T) {
	body := string(fixture(t, codexFirstTurn))
	sealer := newSealer(t, responses.NewKey())
	r, err := responses.ParseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		target responses.Target
		want   []chat.Drop
	}{
		{"deepseek", responses.Target{DeepSeek: true, Sealer: sealer}, []chat.Drop{
			{Param: "tools[8].type=web_search", Field: "tools.web_search"}, {Param: "prompt_cache_key", Field: "prompt_cache_key"}, {Param: "client_metadata", Field: "client_metadata"}}},
		{"openai", responses.Target{OpenAI: true, Sealer: sealer}, []chat.Drop{
			{Param: "tools[8].type=web_search", Field: "tools.web_search"}, {Param: "client_metadata", Field: "client_metadata"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := translate(t, body, tc.target)
			if err != nil {
				t.Fatalf("Codex's request is refused: %v", err)
			}
			if _, err := chat.ParseRequest(mustJSON(t, got)); err != nil {
				t.Fatalf("the chat pipeline refuses the translation: %v", err)
			}
			if d := cmp.Diff(codexTools, chatToolNames(t, got)); d != "" {
				t.Errorf("tools offered upstream (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.want, r.Dropped(tc.target)); d != "" {
				t.Errorf("dropped (-want +got):\n%s", d)
			}
			if got["parallel_tool_calls"] != true || got["tool_choice"] != "auto" || got["stream"] != true {
				t.Errorf("parallel_tool_calls %v, tool_choice %v, stream %v", got["parallel_tool_calls"], got["tool_choice"], got["stream"])
			}
			if _, ok := got["prompt_cache_key"]; ok != tc.target.OpenAI {
				t.Errorf("prompt_cache_key sent: %v, want %v", ok, tc.target.OpenAI)
			}
		})
	}
	if _, err := translate(t, body, responses.Target{DeepSeek: true, RefuseHosted: true}); err == nil {
		t.Error("HOSTED_TOOLS=refuse served Codex's web_search")
	}
}

// codexItem is a function_call item as Codex reads it
// (codex-rs/protocol/src/models.rs, ResponseItem::FunctionCall).
type codexItem struct {
	Type      string  `json:"type"`
	Name      string  `json:"name"`
	Namespace *string `json:"namespace"`
	Arguments string  `json:"arguments"`
	CallID    string  `json:"call_id"`
}

// A call of a namespace's function comes back to Codex as the function
// of its namespace (name and namespace apart), streamed and whole, and
// goes upstream again under the chat name the model called when Codex
// sends it back.
func TestCodexNamespaceCallRoundTrip(t *testing.T) {
	r, err := responses.ParseRequest(fixture(t, codexFirstTurn))
	if err != nil {
		t.Fatal(err)
	}
	resp := responses.NewResponse(r)
	s := responses.NewStream(resp)
	b := s.Start(nil)
	for _, c := range []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_ns","type":"function","function":{"name":"multi_agent_v1__spawn_agent","arguments":"{\"message\":"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"go\"}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_top","type":"function","function":{"name":"exec_command","arguments":"{}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
	} {
		if b, err = s.Chunk(b, []byte(c), nil); err != nil {
			t.Fatal(err)
		}
	}
	var done []codexItem
	for _, e := range parseEvents(t, s.End(b)) {
		switch e.name {
		case "response.output_item.added", "response.output_item.done":
			var it codexItem
			if err := json.Unmarshal(mustJSON(t, e.data["item"]), &it); err != nil {
				t.Fatal(err)
			}
			if e.name == "response.output_item.done" {
				done = append(done, it)
			} else if it.Name == "multi_agent_v1__spawn_agent" {
				t.Errorf("output_item.added names the chat name: %+v", it)
			}
		case "response.function_call_arguments.done":
			if n := e.data["name"]; n != "spawn_agent" && n != "exec_command" {
				t.Errorf("function_call_arguments.done name = %v", n)
			}
		}
	}
	ns := "multi_agent_v1"
	want := []codexItem{
		{Type: "function_call", Name: "spawn_agent", Namespace: &ns, Arguments: `{"message":"go"}`, CallID: "call_ns"},
		{Type: "function_call", Name: "exec_command", Arguments: "{}", CallID: "call_top"},
	}
	if d := cmp.Diff(want, done); d != "" {
		t.Fatalf("output_item.done items (-want +got):\n%s", d)
	}

	whole := responses.NewResponse(r)
	if err := responses.FromCompletion(whole, []byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[`+
		`{"id":"call_ns","type":"function","function":{"name":"multi_agent_v1__spawn_agent","arguments":"{\"message\":\"go\"}"}}]},"finish_reason":"tool_calls"}]}`)); err != nil {
		t.Fatal(err)
	}
	var object struct{ Output []codexItem }
	if err := json.Unmarshal(whole.JSON(), &object); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want[:1], object.Output); d != "" {
		t.Errorf("response output (-want +got):\n%s", d)
	}

	// Codex sends the call back with its output.
	back := mustJSON(t, map[string]any{"model": "m", "tools": json.RawMessage(mustJSON(t, r.Tools)), "input": []any{
		map[string]any{"role": "user", "content": "go"}, done[0],
		map[string]any{"type": "function_call_output", "call_id": "call_ns", "output": "spawned"}}})
	got, err := translate(t, string(back), responses.Target{DeepSeek: true})
	if err != nil {
		t.Fatal(err)
	}
	call := got["messages"].([]any)[1].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)
	if call["name"] != "multi_agent_v1__spawn_agent" {
		t.Errorf("the call goes upstream as %v, want the chat name the model called", call["name"])
	}
}

// withEncrypted replaces the encrypted_content of the input items at
// idx, in order, with sealed.
func withEncrypted(t *testing.T, body []byte, sealed map[int]string) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	in := m["input"].([]any)
	for i, v := range sealed {
		in[i].(map[string]any)["encrypted_content"] = v
	}
	return mustJSON(t, m)
}

// Codex's third request sends back the reasoning items it was given:
// items no key of the gateway sealed are a 400 naming the first; items
// the gateway sealed go upstream as the reasoning_content of the
// assistant message each precedes, with the calls, the namespace's by
// its chat name.
func TestCodexThirdTurn(t *testing.T) {
	body := fixture(t, codexThirdTurn)
	sealer := newSealer(t, responses.NewKey())
	_, err := translate(t, string(body), responses.Target{DeepSeek: true, Sealer: sealer})
	var e *chat.Error
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != "invalid_encrypted_content" || e.Param != "input[4].encrypted_content" {
		t.Fatalf("foreign reasoning: err = %v, want a 400 invalid_encrypted_content on input[4].encrypted_content", err)
	}

	body = withEncrypted(t, body, map[int]string{
		4: *sealedItem(t, sealer, "Run it.").EncryptedContent,
		7: *sealedItem(t, sealer, "Close the agent.").EncryptedContent,
	})
	got, err := translate(t, string(body), responses.Target{DeepSeek: true, Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	type call struct{ reasoning, name, output string }
	var calls []call
	msgs := got["messages"].([]any)
	for i, m := range msgs {
		msg := m.(map[string]any)
		if msg["role"] != "assistant" {
			continue
		}
		fn := msg["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)
		out, _ := msgs[i+1].(map[string]any)["content"].(string)
		calls = append(calls, call{msg["reasoning_content"].(string), fn["name"].(string), out[:min(len(out), 7)]})
	}
	want := []call{{"Run it.", "exec_command", "Chunk I"}, {"Close the agent.", "multi_agent_v1__close_agent", "invalid"}}
	if d := cmp.Diff(want, calls, cmp.AllowUnexported(call{})); d != "" {
		t.Errorf("assistant turns (-want +got):\n%s", d)
	}
}
