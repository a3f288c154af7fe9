package chat

import (
	"reflect"
	"testing"
)

// FuzzWalkChunk checks that a chunk the walk reads is the chunk
// encoding/json decodes, and that what the walk leaves is left.
func FuzzWalkChunk(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"c","choices":[{"index":0,"delta":{"content":"a\"b\u00e9\ud83d\ude00","reasoning_content":null},"finish_reason":null}],"phasegate":{"phase":"action_phase"}}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x","type":"function","function":{"name":"f","arguments":"{\"p\":1}"}},null]},"finish_reason":"tool_calls"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":1,"prompt_cache_hit_tokens":0}}`,
		`{"choices":[{"finish_reason":"stop"}],"usage":null}`,
		`{"choices":null,"created":null,"id":null}`,
		`{"choices":[null,{"delta":null}],"model":"\xff"}`,
		`{"Choices":[],"ID":"x"}`, `{"id":"a","id":"b"}`, `{"choices":[{"delta":{"content":"a"},"delta":{"role":"r"}}]}`,
		`{"created":1.5}`, `{"created":"1"}`, `{"created":1e3}`, `{"choices":[{"index":99999999999999999999}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"function":{"name":1}}]}}]}`, `{"choices":{}}`, `{"choſces":[]}`,
		` {"choices" : [ ] } `, `{"usage":{"a":[1,2]}}`, `[DONE]`, `{}`, `null`, `{"choices":[null]}`, "", `{"id":"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := walkChunk(data)
		want, err := decodeChunkJSON(data)
		if !ok {
			return
		}
		if err != nil {
			t.Fatalf("walked %q, which encoding/json refuses: %v", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nwalked  %#v\ndecoded %#v", data, got, want)
		}
	})
}

// The chunks upstreams send are walked; the shapes the decoder has rules
// of its own for are left to it.
func TestWalkChunkLeaves(t *testing.T) {
	for _, tc := range []struct {
		data   string
		walked bool
	}{
		{`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"logprobs":null,"finish_reason":null}],"phasegate":{"p":1}}`, true},
		{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":1}"}}]},"finish_reason":null}]}`, true},
		{`{"choices":[],"usage":{"prompt_tokens":1}}`, true},
		{`{"ID":"x","choices":[]}`, false},
		{`{"choices":[],"choices":[]}`, false},
		{`{"\u0069d":"x"}`, false},
		{`{"created":1.5}`, false},
		{`null`, false},
	} {
		if _, ok := walkChunk([]byte(tc.data)); ok != tc.walked {
			t.Errorf("walkChunk(%s) walked = %v, want %v", tc.data, ok, tc.walked)
		}
	}
}
