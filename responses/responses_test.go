package responses_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/responses"
)

// translate parses body and translates it with no stored history.
func translate(t *testing.T, body string, target responses.Target) (map[string]any, error) {
	t.Helper()
	r, err := responses.ParseRequest([]byte(body))
	if err != nil {
		return nil, err
	}
	in, err := responses.Resolve(r.Items(), nil)
	if err != nil {
		return nil, err
	}
	b, err := responses.ChatBody(r, in, target)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("chat body is not JSON: %v\n%s", err, b)
	}
	return m, nil
}

// The history the Agents SDK resends every turn: reasoning with its
// summary, a function call with ids and status, its output.
func TestChatBodyAgentsHistory(t *testing.T) {
	body := `{"model":"deepseek-v4-flash","instructions":"be brief","include":[],
	"input":[{"role":"user","content":"weather in Paris?"},
	 {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"need the tool"}]},
	 {"type":"function_call","id":"fc_1","call_id":"call_1","name":"weather","arguments":"{\"city\":\"Paris\"}","status":"completed"},
	 {"type":"function_call_output","call_id":"call_1","output":"sunny","status":"completed"}],
	"tools":[{"type":"function","name":"weather","strict":true,"parameters":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"city":{"type":"string"}}}}],
	"tool_choice":"auto","max_output_tokens":100,"temperature":0,"reasoning":{"effort":"high"},"stream":true}`
	got, err := translate(t, body, responses.Target{DeepSeek: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"model": "deepseek-v4-flash",
		"messages": []any{
			map[string]any{"role": "system", "content": "be brief"},
			map[string]any{"role": "user", "content": "weather in Paris?"},
			map[string]any{"role": "assistant", "content": nil, "reasoning_content": "need the tool",
				"tool_calls": []any{map[string]any{"id": "call_1", "type": "function", "function": map[string]any{"name": "weather", "arguments": `{"city":"Paris"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
		},
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "weather", "strict": true,
			"parameters": map[string]any{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}},
		"tool_choice":    "auto",
		"max_tokens":     float64(100),
		"temperature":    float64(0),
		"thinking":       map[string]any{"type": "enabled"},
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("chat body (-want +got):\n%s", d)
	}
	if _, err := chat.ParseRequest(mustJSON(t, got)); err != nil {
		t.Errorf("the chat pipeline refuses the translation: %v", err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// What the gateway cannot serve is a 400 naming it, never a silent drop
// (hosted tools are dropped and named, see TestHostedTools).
func TestParseRequestRefuses(t *testing.T) {
	for _, tc := range []struct{ name, body, param string }{
		{"background", `{"model":"m","input":"hi","background":true}`, "background"},
		{"computer call item", `{"model":"m","input":[{"type":"computer_call","id":"x"}]}`, "input[0].type"},
		{"no input", `{"model":"m"}`, "input"},
		{"no model", `{"input":"hi"}`, "model"},
		{"bad role", `{"model":"m","input":[{"role":"tool","content":"x"}]}`, "input[0].role"},
		{"function call without arguments", `{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f"}]}`, "input[0]"},
		{"wrong type", `{"model":"m","input":"hi","stream":"yes"}`, "stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := translate(t, tc.body, responses.Target{})
			var e *chat.Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want a *chat.Error", err)
			}
			if e.Status != http.StatusBadRequest || e.Param != tc.param {
				t.Errorf("status %d param %v, want 400 %q (%s)", e.Status, e.Param, tc.param, e.Message)
			}
		})
	}
}

// An item reference resolves to the stored item; a missing one is a 400
// on its place in the input.
func TestResolve(t *testing.T) {
	r, err := responses.ParseRequest([]byte(`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"item_reference","id":"msg_1"},{"role":"user","content":"again"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	args := "{}"
	stored := responses.Item{Type: responses.TypeFunctionCall, ID: "msg_1", CallID: "c1", Name: "f", Arguments: &args}
	in, err := responses.Resolve(r.Items(), map[string]responses.Item{"msg_1": stored})
	if err != nil {
		t.Fatal(err)
	}
	if in[1].CallID != "c1" {
		t.Errorf("resolved item = %+v", in[1])
	}
	_, err = responses.Resolve(r.Items(), nil)
	var e *chat.Error
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Param != "input[1].id" {
		t.Errorf("missing reference: err = %v, want a 400 on input[1].id", err)
	}
}

// event is one event of a translated stream.
type event struct {
	name string
	data map[string]any
}

// parseEvents splits SSE bytes into events, checking that every event
// line names the type its data holds and that sequence numbers count up
// from 0.
func parseEvents(t *testing.T, b []byte) []event {
	t.Helper()
	var out []event
	for _, block := range strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(block, "\ndata: ")
		if !ok || !strings.HasPrefix(name, "event: ") {
			t.Fatalf("malformed event %q", block)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("event data is not JSON: %v\n%s", err, data)
		}
		name = strings.TrimPrefix(name, "event: ")
		if m["type"] != name {
			t.Errorf("event %s holds type %v", name, m["type"])
		}
		if m["sequence_number"] != float64(len(out)) {
			t.Errorf("event %d has sequence_number %v", len(out), m["sequence_number"])
		}
		out = append(out, event{name, m})
	}
	return out
}

func names(evs []event) []string {
	var n []string
	for _, e := range evs {
		n = append(n, e.name)
	}
	return n
}

func TestStreamEvents(t *testing.T) {
	r, err := responses.ParseRequest([]byte(`{"model":"m","input":"hi","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	resp := responses.NewResponse(r)
	s := responses.NewStream(resp)
	b := s.Start(nil)
	for _, c := range []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"think \"a\""}}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":"ing"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"Hel"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"lo\n"}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_9","type":"function","function":{"name":"f","arguments":"{\"a\""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_cache_hit_tokens":4,"completion_tokens_details":{"reasoning_tokens":2}},"phasegate":{"usage_estimated":true}}`,
	} {
		if b, err = s.Chunk(b, []byte(c), nil); err != nil {
			t.Fatal(err)
		}
	}
	b = s.End(b)
	evs := parseEvents(t, b)
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.reasoning_text.delta", "response.reasoning_text.delta",
		"response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done", "response.completed"}
	if d := cmp.Diff(want, names(evs)); d != "" {
		t.Fatalf("events (-want +got):\n%s", d)
	}
	if got := evs[13].data["text"]; got != "Hello\n" {
		t.Errorf("output_text.done text = %q", got)
	}
	if got := evs[6].data["text"]; got != `think "a"ing` {
		t.Errorf("reasoning_text.done text = %q", got)
	}
	done := evs[19].data
	if done["arguments"] != `{"a":1}` || done["name"] != "f" {
		t.Errorf("function_call_arguments.done = %v", done)
	}
	final := evs[len(evs)-1].data["response"].(map[string]any)
	out := final["output"].([]any)
	call := out[2].(map[string]any)
	if final["status"] != "completed" || len(out) != 3 || call["call_id"] != "call_9" || call["status"] != "completed" {
		t.Errorf("final response = %v", final)
	}
	usage := final["usage"].(map[string]any)
	wantUsage := map[string]any{"input_tokens": float64(10), "output_tokens": float64(5), "total_tokens": float64(15),
		"input_tokens_details":  map[string]any{"cached_tokens": float64(4), "cache_write_tokens": float64(0)},
		"output_tokens_details": map[string]any{"reasoning_tokens": float64(2)}}
	if d := cmp.Diff(wantUsage, usage); d != "" {
		t.Errorf("usage (-want +got):\n%s", d)
	}
	if pg, _ := final["phasegate"].(map[string]any); pg["usage_estimated"] != true {
		t.Errorf("estimated usage is not marked: %v", final["phasegate"])
	}
	// The output goes back as input on the next turn.
	items := resp.Output()
	if len(items) != 3 || items[0].Type != "reasoning" || items[2].Arguments == nil || *items[2].Arguments != `{"a":1}` {
		t.Errorf("output items = %+v", items)
	}
	// As stored, rendered, each decodes to the same item.
	i := 0
	for id, b := range resp.OutputJSON() {
		var it responses.Item
		if err := json.Unmarshal(b, &it); err != nil || i >= len(items) || id != items[i].ID {
			t.Fatalf("rendered item %d %s: %v", i, b, err)
		}
		if d := cmp.Diff(items[i], it); d != "" {
			t.Errorf("rendered item %d decodes otherwise (-Output +OutputJSON):\n%s", i, d)
		}
		i++
	}
	if i != len(items) {
		t.Errorf("%d items rendered, %d output", i, len(items))
	}
}

// A stream cut by the length limit ends incomplete; an in-band error
// ends it with an error event and response.failed.
func TestStreamEndings(t *testing.T) {
	r, _ := responses.ParseRequest([]byte(`{"model":"m","input":"hi","stream":true}`))
	s := responses.NewStream(responses.NewResponse(r))
	b, _ := s.Chunk(s.Start(nil), []byte(`{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"length"}]}`), nil)
	evs := parseEvents(t, s.End(b))
	last := evs[len(evs)-1]
	if last.name != "response.incomplete" || last.data["response"].(map[string]any)["incomplete_details"].(map[string]any)["reason"] != "max_output_tokens" {
		t.Errorf("last event = %v", last)
	}

	s = responses.NewStream(responses.NewResponse(r))
	b, _ = s.Chunk(s.Start(nil), []byte(`{"choices":[{"index":0,"delta":{"content":"Hi"}}]}`), nil)
	b, _ = s.Chunk(b, []byte(`{"error":{"message":"upstream gone","type":"upstream_error","param":null,"code":"upstream_truncated"}}`), nil)
	b = s.End(b) // nothing after the failure
	evs = parseEvents(t, b)
	if d := cmp.Diff([]string{"error", "response.failed"}, names(evs[len(evs)-2:])); d != "" {
		t.Fatalf("ending (-want +got):\n%s", d)
	}
	if e := evs[len(evs)-2].data; e["code"] != "upstream_truncated" || e["message"] != "upstream gone" {
		t.Errorf("error event = %v", e)
	}
}

// Events yields each event a call made, whole and in order, without
// reading the text again: together they are the bytes appended, each one
// event of its own.
func TestStreamEventsApart(t *testing.T) {
	r, _ := responses.ParseRequest([]byte(`{"model":"m","input":"hi","stream":true}`))
	s := responses.NewStream(responses.NewResponse(r))
	var all []byte
	n := 0
	for _, step := range []func([]byte) []byte{
		s.Start,
		func(b []byte) []byte {
			out, _ := s.Chunk(b, []byte(`{"choices":[{"index":0,"delta":{"content":"a\n\nb"}}]}`), nil)
			return out
		},
		func(b []byte) []byte {
			out, _ := s.Chunk(b, []byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{}"}}]}}]}`), nil)
			return out
		},
		s.End,
	} {
		out := step(nil)
		var joined []byte
		for ev := range s.Events(out) {
			if !strings.HasPrefix(string(ev), "event: ") || strings.Index(string(ev), "\n\n") != len(ev)-2 {
				t.Fatalf("event %q is not one whole event", ev)
			}
			if !strings.Contains(string(ev), fmt.Sprintf(`"sequence_number":%d,`, n)) {
				t.Errorf("event %d is %q", n, ev)
			}
			n++
			joined = append(joined, ev...)
		}
		if string(joined) != string(out) {
			t.Errorf("events joined = %q, want %q", joined, out)
		}
		all = append(all, out...)
	}
	if got := len(parseEvents(t, all)); got != n {
		t.Errorf("%d events yielded, %d written", n, got)
	}
	for range s.Events(nil) {
		t.Error("Events yields events a second time")
	}
}

// The gateway's extension marks estimated usage as the same member in the
// chunk does: the response tells it.
func TestStreamExtensionEstimated(t *testing.T) {
	for _, tc := range []struct {
		name, data, ext string
		want            bool
	}{
		{"in the extension", `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`, `{"phase":"complete","usage_estimated":true}`, true},
		{"extension without it", `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`, `{"phase":"complete"}`, false},
		{"extension over the chunk's", `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3},"phasegate":{"usage_estimated":true}}`, `{"usage_estimated":false}`, false},
		{"chunk's kept", `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3},"phasegate":{"usage_estimated":true}}`, `{"phase":"complete"}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := responses.ParseRequest([]byte(`{"model":"m","input":"hi","stream":true}`))
			s := responses.NewStream(responses.NewResponse(r))
			b, err := s.Chunk(s.Start(nil), []byte(tc.data), []byte(tc.ext))
			if err != nil {
				t.Fatal(err)
			}
			evs := parseEvents(t, s.End(b))
			final := evs[len(evs)-1].data["response"].(map[string]any)
			pg, _ := final["phasegate"].(map[string]any)
			if got := pg["usage_estimated"] == true; got != tc.want {
				t.Errorf("usage_estimated = %v, want %v (%v)", got, tc.want, final)
			}
		})
	}
}

func TestFromCompletion(t *testing.T) {
	r, _ := responses.ParseRequest([]byte(`{"model":"m","input":"hi","metadata":{"k":"v"}}`))
	resp := responses.NewResponse(r)
	err := responses.FromCompletion(resp, []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,"reasoning_content":"r",
		"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(resp.JSON(), &got); err != nil {
		t.Fatalf("%v\n%s", err, resp.JSON())
	}
	out := got["output"].([]any)
	if got["status"] != "completed" || len(out) != 2 || out[0].(map[string]any)["type"] != "reasoning" || out[1].(map[string]any)["call_id"] != "call_1" {
		t.Errorf("response = %s", resp.JSON())
	}
	if got["metadata"].(map[string]any)["k"] != "v" || got["tool_choice"] != "auto" || got["store"] != true {
		t.Errorf("echo = %s", resp.JSON())
	}
	if !bytes.Contains(resp.JSON(), []byte(`"usage":{"input_tokens":3,`)) {
		t.Errorf("usage = %s", resp.JSON())
	}
}
