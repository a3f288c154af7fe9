package messages_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/phasegate/phasegate/messages"
)

func completion(message, finish, usage string) string {
	s := `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"upstream-name","choices":[{"index":0,"message":` + message + `,"finish_reason":` + finish + `}]`
	if usage != "" {
		s += `,"usage":` + usage
	}
	return s + `}`
}

func TestFromCompletion(t *testing.T) {
	reply := messages.Reply{Model: "deepseek-v4-pro", StopSequences: []string{"<END>"}, InputTokens: 99}
	ignore := cmpopts.IgnoreFields(message{}, "ID")
	for _, tc := range []struct {
		name, body string
		want       message
	}{
		{name: "text", body: completion(`{"role":"assistant","content":"Hello \"you\""}`, `"stop"`, `{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}`),
			want: message{Model: "deepseek-v4-pro", StopReason: "end_turn", Content: []block{{Type: "text", Text: `Hello "you"`}}, Input: 10, Output: 2}},
		{name: "thinking, text and calls", body: completion(`{"role":"assistant","content":"Let me look.","reasoning_content":"need ls",
			"tool_calls":[{"id":"call_1","type":"function","function":{"name":"Bash","arguments":"{\"command\": \"ls\"}"}},{"id":"","type":"function","function":{"name":"Read","arguments":""}}]}`,
			`"tool_calls"`, `{"prompt_tokens":100,"completion_tokens":20,"prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":36}`),
			want: message{Model: "deepseek-v4-pro", StopReason: "tool_use", Input: 36, CacheRead: 64, Output: 20, Content: []block{
				{Type: "thinking", Thinking: "need ls"}, {Type: "text", Text: "Let me look."},
				{Type: "tool_use", ID: "call_1", Name: "Bash", Input: map[string]any{"command": "ls"}},
				{Type: "tool_use", Name: "Read", Input: map[string]any{}}}}},
		{name: "OpenAI's cached tokens", body: completion(`{"role":"assistant","content":"x"}`, `"stop"`, `{"prompt_tokens":50,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":32}}`),
			want: message{Model: "deepseek-v4-pro", StopReason: "end_turn", Content: []block{{Type: "text", Text: "x"}}, Input: 18, CacheRead: 32, Output: 1}},
		{name: "no usage: the gateway's count", body: completion(`{"role":"assistant","content":"x"}`, `"stop"`, ``),
			want: message{Model: "deepseek-v4-pro", StopReason: "end_turn", Content: []block{{Type: "text", Text: "x"}}, Input: 99}},
		{name: "length", body: completion(`{"role":"assistant","content":"cut"}`, `"length"`, ``),
			want: message{Model: "deepseek-v4-pro", StopReason: "max_tokens", Content: []block{{Type: "text", Text: "cut"}}, Input: 99}},
		{name: "length in a call", body: completion(`{"role":"assistant","content":null,"tool_calls":[{"id":"c","function":{"name":"f","arguments":"{\"a\":"}}]}`, `"length"`, ``),
			want: message{Model: "deepseek-v4-pro", StopReason: "max_tokens", Content: []block{{Type: "tool_use", ID: "c", Name: "f", Input: map[string]any{}}}, Input: 99}},
		{name: "content filter", body: completion(`{"role":"assistant","content":""}`, `"content_filter"`, ``),
			want: message{Model: "deepseek-v4-pro", StopReason: "refusal", Input: 99}},
		{name: "stop sequence", body: strings.Replace(completion(`{"role":"assistant","content":"a"}`, `"stop"`, ``), `"finish_reason"`, `"stop_reason":"<END>","finish_reason"`, 1),
			want: message{Model: "deepseek-v4-pro", StopReason: "stop_sequence", StopSequence: "<END>", Content: []block{{Type: "text", Text: "a"}}, Input: 99}},
		{name: "a stop the request did not ask", body: strings.Replace(completion(`{"role":"assistant","content":"a"}`, `"stop"`, ``), `"finish_reason"`, `"matched_stop":"\n","finish_reason"`, 1),
			want: message{Model: "deepseek-v4-pro", StopReason: "end_turn", Content: []block{{Type: "text", Text: "a"}}, Input: 99}},
		{name: "no choices", body: `{"id":"x","choices":[]}`, want: message{Model: "deepseek-v4-pro", StopReason: "end_turn", Input: 99}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := messages.FromCompletion(reply, []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			m := decodeMessage(t, body)
			got := view(t, m)
			for i := range got.Content {
				if got.Content[i].Type == "thinking" && got.Content[i].Signature == "" {
					t.Errorf("thinking block %d has no signature", i)
				}
				if got.Content[i].Type == "tool_use" && got.Content[i].ID == "" {
					t.Errorf("tool_use block %d has no id", i)
				}
				if got.Content[i].Type == "tool_use" && tc.want.Content[i].ID == "" {
					got.Content[i].ID = "" // derived: checked above
				}
				got.Content[i].Signature = ""
			}
			if d := cmp.Diff(tc.want, got, ignore); d != "" {
				t.Errorf("message (-want +got):\n%s", d)
			}
			if !strings.HasPrefix(m.ID, "msg_") {
				t.Errorf("id = %q, want msg_…", m.ID)
			}
		})
	}
}

// One answer has one id, derived from the upstream's: read twice, the
// same message; another answer, another id.
func TestFromCompletionID(t *testing.T) {
	body := completion(`{"role":"assistant","content":"x","reasoning_content":"r","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}`, `"tool_calls"`, ``)
	a, _ := messages.FromCompletion(messages.Reply{Model: "m"}, []byte(body))
	b, _ := messages.FromCompletion(messages.Reply{Model: "m"}, []byte(body))
	if string(a) != string(b) {
		t.Errorf("one answer read twice differs:\n%s\n%s", a, b)
	}
	c, _ := messages.FromCompletion(messages.Reply{Model: "m"}, []byte(strings.Replace(body, "chatcmpl-1", "chatcmpl-2", 1)))
	if decodeMessage(t, a).ID == decodeMessage(t, c).ID {
		t.Errorf("two answers have one id")
	}
	if _, err := messages.FromCompletion(messages.Reply{}, []byte(`{"choices":`)); err == nil {
		t.Errorf("a body that is not JSON was read")
	}
}

// A call whose id the request's history already holds gets an id of the
// gateway's, the same streamed or not; any other keeps the upstream's.
func TestToolUseIDsUniqueInConversation(t *testing.T) {
	tr, err := messages.Translate([]byte(`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"q"},
		{"role":"assistant","content":[{"type":"tool_use","id":"call_sim_1","name":"f","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_sim_1","content":"a"}]}]}`), messages.Config{})
	if err != nil {
		t.Fatal(err)
	}
	completion := `{"id":"c9","object":"chat.completion","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
		"tool_calls":[{"id":"call_sim_1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"call_new","type":"function","function":{"name":"g","arguments":"{}"}}]}}]}`
	body, err := messages.FromCompletion(tr.Reply, []byte(completion))
	if err != nil {
		t.Fatal(err)
	}
	whole := decodeMessage(t, body)
	if id := whole.Content[0].ID; id == "call_sim_1" || !strings.HasPrefix(id, "toolu_") || whole.Content[1].ID != "call_new" {
		t.Errorf("tool_use ids %q %q, want a toolu_ id for the repeated one, call_new kept", id, whole.Content[1].ID)
	}
	evs, err := sdkStream(t, translate(t, tr.Reply, []string{
		`{"id":"c9","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_sim_1","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}`,
		`{"id":"c9","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_new","type":"function","function":{"name":"g","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
	}))
	if err != nil {
		t.Fatal(err)
	}
	streamed := accumulate(t, evs)
	if streamed.Content[0].ID != whole.Content[0].ID || streamed.Content[1].ID != "call_new" {
		t.Errorf("streamed ids %q %q, want %q call_new", streamed.Content[0].ID, streamed.Content[1].ID, whole.Content[0].ID)
	}
}
