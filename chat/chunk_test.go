package chat_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
)

func TestDecodeChunk(t *testing.T) {
	tests := []struct {
		name      string
		data      string
		wantErr   bool
		finish    string
		usage     bool
		toolCalls int
	}{
		{name: "content", data: `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`},
		{name: "finish", data: `{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`, finish: "tool_calls"},
		{name: "usage chunk", data: `{"choices":[],"usage":{"prompt_tokens":1}}`, usage: true},
		{name: "zero usage is usage", data: `{"choices":[],"usage":{}}`, usage: true},
		{name: "null usage is none", data: `{"choices":[],"usage":null}`},
		{name: "no choices", data: `{}`},
		{name: "tool call fragment", data: `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x","type":"function","function":{"name":"f","arguments":""}},{"index":1,"function":{"arguments":"{"}}]}}]}`, toolCalls: 2},
		{name: "not JSON", data: `data: {}`, wantErr: true},
		{name: "wrong type", data: `{"choices":{}}`, wantErr: true},
		{name: "done is not a chunk", data: chat.Done, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := chat.DecodeChunk([]byte(tt.data))
			if (err != nil) != tt.wantErr {
				t.Fatalf("DecodeChunk error = %v, want error: %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got := c.FinishReason(); got != tt.finish {
				t.Errorf("FinishReason = %q, want %q", got, tt.finish)
			}
			if got := c.HasUsage(); got != tt.usage {
				t.Errorf("HasUsage = %v, want %v", got, tt.usage)
			}
			n := 0
			for _, ch := range c.Choices {
				n += len(ch.Delta.ToolCalls)
			}
			if n != tt.toolCalls {
				t.Errorf("%d tool call deltas, want %d", n, tt.toolCalls)
			}
		})
	}
}

func TestWithExtension(t *testing.T) {
	ext := []byte(`{"phase":"tool_phase","cycle_index":1}`)
	tests := []struct {
		name string
		data string
		want string
	}{
		{name: "object", data: `{"id":"c","choices":[]}`, want: `{"id":"c","choices":[],"phasegate":{"phase":"tool_phase","cycle_index":1}}`},
		{name: "empty object", data: `{}`, want: `{"phasegate":{"phase":"tool_phase","cycle_index":1}}`},
		{name: "empty object with space", data: `{ }`, want: `{ "phasegate":{"phase":"tool_phase","cycle_index":1}}`},
		{name: "rest kept byte for byte", data: `{"a": "}<&>", "b" : [1.50]}`, want: `{"a": "}<&>", "b" : [1.50],"phasegate":{"phase":"tool_phase","cycle_index":1}}`},
		{name: "trailing whitespace", data: "{\"a\":1}\n", want: "{\"a\":1,\"phasegate\":{\"phase\":\"tool_phase\",\"cycle_index\":1}}\n"},
		{name: "leading whitespace", data: " {\"a\":1}", want: " {\"a\":1,\"phasegate\":{\"phase\":\"tool_phase\",\"cycle_index\":1}}"},
		{name: "leading whitespace, empty object", data: " {}", want: ` {"phasegate":{"phase":"tool_phase","cycle_index":1}}`},
		{name: "array unchanged", data: `[{"a":1}]`, want: `[{"a":1}]`},
		{name: "done unchanged", data: `[DONE]`, want: `[DONE]`},
		{name: "empty unchanged", data: ``, want: ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(chat.WithExtension([]byte(tt.data), "phasegate", ext))
			if got != tt.want {
				t.Errorf("WithExtension(%q) = %q, want %q", tt.data, got, tt.want)
			}
			if json.Valid([]byte(tt.data)) && !json.Valid([]byte(got)) {
				t.Errorf("WithExtension made invalid JSON of valid %q: %q", tt.data, got)
			}
		})
	}
}

func TestAddUsage(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		want string
	}{
		{name: "standard fields summed", a: `{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}`, b: `{"prompt_tokens":20,"completion_tokens":1,"total_tokens":21}`,
			want: `{"completion_tokens":6,"prompt_tokens":30,"total_tokens":36}`},
		{name: "DeepSeek cache fields summed", a: `{"prompt_tokens":10,"prompt_cache_hit_tokens":8,"prompt_cache_miss_tokens":2}`, b: `{"prompt_tokens":12,"prompt_cache_hit_tokens":10,"prompt_cache_miss_tokens":2}`,
			want: `{"prompt_cache_hit_tokens":18,"prompt_cache_miss_tokens":4,"prompt_tokens":22}`},
		{name: "nested details summed", a: `{"completion_tokens_details":{"reasoning_tokens":3},"prompt_tokens_details":{"cached_tokens":1}}`,
			b:    `{"completion_tokens_details":{"reasoning_tokens":4,"audio_tokens":1},"prompt_tokens_details":null}`,
			want: `{"completion_tokens_details":{"audio_tokens":1,"reasoning_tokens":7},"prompt_tokens_details":{"cached_tokens":1}}`},
		{name: "a field on one side only", a: `{"prompt_tokens":1}`, b: `{"x_vendor_tokens":4}`, want: `{"prompt_tokens":1,"x_vendor_tokens":4}`},
		{name: "fractions", a: `{"cost":0.25}`, b: `{"cost":0.5}`, want: `{"cost":0.75}`},
		{name: "big integers exact", a: `{"n":9007199254740993}`, b: `{"n":1}`, want: `{"n":9007199254740994}`},
		{name: "non-numbers: the later wins", a: `{"tier":"a","ok":true}`, b: `{"tier":"b","ok":false}`, want: `{"ok":false,"tier":"b"}`},
		{name: "numeric strings are not numbers", a: `{"id":"12"}`, b: `{"id":"30"}`, want: `{"id":"30"}`},
		{name: "absent first", a: ``, b: `{"prompt_tokens":1}`, want: `{"prompt_tokens":1}`},
		{name: "null first", a: `null`, b: `{"prompt_tokens":1}`, want: `{"prompt_tokens":1}`},
		{name: "absent second", a: `{"prompt_tokens":1}`, b: ``, want: `{"prompt_tokens":1}`},
		{name: "both absent", a: ``, b: ``, want: ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := chat.AddUsage(json.RawMessage(tt.a), json.RawMessage(tt.b))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("AddUsage = %s, want %s", got, tt.want)
			}
		})
	}
	if _, err := chat.AddUsage(json.RawMessage(`{"a":1}`), json.RawMessage(`[1]`)); err == nil {
		t.Error("AddUsage of a non-object: got nil error")
	}
}

func TestOutChunk(t *testing.T) {
	h := chat.ChunkHeader{ID: "chatcmpl-1", Created: 7, Model: "m", SystemFingerprint: "fp"}
	c := h.NewChunk()
	text := "**System Notice**: x"
	c.Choices = []chat.OutChoice{{Index: 0, Delta: chat.OutDelta{Content: &text}}}
	c.Extension = json.RawMessage(`{"phase":"action_phase"}`)
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp",` +
		`"choices":[{"index":0,"delta":{"content":"**System Notice**: x"},"finish_reason":null}],"phasegate":{"phase":"action_phase"}}`
	if string(b) != want {
		t.Errorf("chunk = %s\nwant    %s", b, want)
	}
}

func TestAssembler(t *testing.T) {
	chunks := []string{
		`{"id":"c1","object":"chat.completion.chunk","created":5,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{"id":"c1","choices":[{"index":0,"delta":{"reasoning_content":"think"},"finish_reason":null}]}`,
		`{"id":"c1","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}`,
		`{"id":"c1","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}`,
		`{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\""}}]},"finish_reason":null}]}`,
		`{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":null}]}`,
		`{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"phasegate":{"phase":"tool_phase"}}`,
		`{"id":"c1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`,
	}
	var a chat.Assembler
	for _, c := range chunks {
		if err := a.Add([]byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := a.Completion()
	if err != nil {
		t.Fatal(err)
	}
	var got, want any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(`{"id":"c1","object":"chat.completion","created":5,"model":"m","system_fingerprint":"fp",
		"choices":[{"index":0,"message":{"role":"assistant","content":"Hello","reasoning_content":"think","refusal":null,
		"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],
		"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},"phasegate":{"phase":"tool_phase"}}`), &want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("completion (-want +got):\n%s", diff)
	}
	if err := a.Add([]byte(`not json`)); err == nil {
		t.Error("Add of invalid JSON: got nil error")
	}
}
