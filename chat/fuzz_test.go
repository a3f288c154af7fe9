package chat_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/phasegate/phasegate/chat"
)

// FuzzDecodeChunk checks decoding any event data never panics, and that a
// decoded chunk answers its questions without panicking either.
func FuzzDecodeChunk(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x","type":"function","function":{"name":"f","arguments":"{"}}]},"finish_reason":"tool_calls"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":1,"prompt_cache_hit_tokens":0}}`,
		`{"choices":[{"finish_reason":"stop"}],"usage":null}`,
		`[DONE]`, `{}`, `null`, `{"choices":[null]}`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := chat.DecodeChunk(data)
		if err != nil {
			return
		}
		_ = c.FinishReason()
		_ = c.HasUsage()
		var a chat.Assembler
		if a.Add(data) == nil {
			if _, err := a.Completion(); err != nil {
				t.Errorf("Completion after a decoded chunk %q: %v", data, err)
			}
		}
	})
}

// FuzzParseRequest checks parsing any body never panics; a body that parses
// encodes to one that parses to the same request, and encoding is stable.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"deepseek-v4-flash","stream":true,"stream_options":{"include_usage":true},"thinking":{"type":"enabled"},"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"x"}]},{"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"n":1,"max_tokens":5}`,
		`{"model":"a","model":"b","messages":[{"role":"user"}]}`,
		`{ "model" : "m" , "messages" : [ {"role":"user"} ] }`,
		`{"model":"m","messages":[null]}`, `{"model":"m","messages":[]}`, `[]`, `{`, `"`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := chat.ParseRequest(body)
		if err != nil {
			var e *chat.Error
			if !asError(err, &e) || e.Status != 400 {
				t.Fatalf("ParseRequest(%q) error = %v, want a 400 *chat.Error", body, err)
			}
			return
		}
		enc := r.Encode()
		if !json.Valid(enc) {
			t.Fatalf("Encode of %q is not valid JSON: %q", body, enc)
		}
		r2, err := chat.ParseRequest(enc)
		if err != nil {
			t.Fatalf("Encode of %q = %q does not parse: %v", body, enc, err)
		}
		if enc2 := r2.Encode(); !bytes.Equal(enc, enc2) {
			t.Fatalf("Encode is not stable: %q then %q", enc, enc2)
		}
		if r2.Model != r.Model || r2.Stream != r.Stream || len(r2.Messages) != len(r.Messages) || len(r2.Tools) != len(r.Tools) {
			t.Fatalf("views changed across a round trip of %q", body)
		}
		c := r.Clone()
		c.Delete("model")
		if !bytes.Equal(r.Encode(), enc) {
			t.Fatalf("editing a clone changed the original")
		}
	})
}

// FuzzWithExtension checks splicing a field into a valid JSON object
// always gives a valid object holding the field, the rest unchanged.
func FuzzWithExtension(f *testing.F) {
	for _, s := range []string{`{}`, ` { } `, `{"a":1}`, `{"a":"}"}`, "\n{\"choices\":[]}\n", `[]`, `1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out := chat.WithExtension(data, "phasegate", []byte(`{"phase":"complete"}`))
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil || obj == nil {
			return // not an object: nothing promised beyond not panicking
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("WithExtension(%q) = %q: invalid JSON: %v", data, out, err)
		}
		if string(got["phasegate"]) != `{"phase":"complete"}` {
			t.Fatalf("WithExtension(%q) = %q: field missing", data, out)
		}
	})
}

func asError(err error, target **chat.Error) bool {
	e, ok := err.(*chat.Error) //nolint:errorlint // ParseRequest returns it unwrapped
	if ok {
		*target = e
	}
	return ok
}
