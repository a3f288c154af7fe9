package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// FuzzAssemblerTemplate checks that reading chunks by their learned shape
// assembles exactly what decoding every chunk does: base is a chunk with
// TEXT where a string body goes, texts the bodies (split at '|'), other a
// chunk added after every second one (another shape, a finish, usage,
// other fields: what the template must not undo or repeat).
func FuzzAssemblerTemplate(f *testing.F) {
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	f.Add(head+`{"content":"TEXT"},"logprobs":null,"finish_reason":null}]}`, "Hello| wor|ld|\\n|\"|é|", head+`{},"finish_reason":"stop"}],"x":1}`)
	f.Add(head+`{"role":"assistant","content":"TEXT","reasoning_content":"r"},"finish_reason":null}],"phasegate":{"p":1}}`, "a|b|c", `{"choices":[],"usage":{"prompt_tokens":1},"phasegate":{"p":2}}`)
	f.Add(head+`{"content":"TEXT"},"logprobs":{"content":"TEXT"},"finish_reason":null}]}`, "a|a|b", head+`{"content":"TEXT"}}]}`)
	f.Add(`{"choices":[{"index":0,"delta":{"content":"\u0041TEXT"}}],"choices":[{"index":0,"delta":{"content":"TEXT"}}]}`, "x|y", `{"id":"c2","choices":[]}`)
	f.Add(head+`{"content":"TEXT","tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`, "q|r", head+`{"content":"TEXT"}}]}`)
	f.Add(head+`{"content":"TEXT"}}],"x":1,"x":{"a": [1, 2]}}`, "a|b", `{"choices":[], "x" : 2 ,"\u0079":3,"usage":null}`)
	f.Fuzz(func(t *testing.T, base, texts, other string) {
		if len(base)+len(texts)+len(other) > 4096 {
			return
		}
		fast, ref := Assembler{}, Assembler{decodeAll: true}
		for i, text := range strings.Split(texts, "|") {
			chunks := [][]byte{[]byte(strings.ReplaceAll(base, "TEXT", text))}
			if i%2 == 1 {
				chunks = append(chunks, []byte(other))
			}
			for _, c := range chunks {
				if (fast.Add(c) == nil) != (ref.Add(c) == nil) {
					t.Fatalf("%q: one assembler took it, the other not", c)
				}
			}
		}
		got, err1 := fast.Completion()
		want, err2 := ref.Completion()
		if (err1 == nil) != (err2 == nil) || !bytes.Equal(got, want) {
			t.Fatalf("read by shape:\n%s\ndecoded:\n%s", got, want)
		}
	})
}

// TestCompletionAsEncodingJSON checks the completion written in one pass
// against the one encoding/json writes from a map, byte for byte: members
// kept from the chunks before, among and after the completion's own, keys
// and strings it escapes, raw values with spaces, tool calls, reasoning.
func TestCompletionAsEncodingJSON(t *testing.T) {
	head := `{"id":"c<1>","object":"chat.completion.chunk","created":17,"model":"m\u2028","system_fingerprint":"fp&","choices":[{"index":0,"delta":`
	cases := map[string][]string{
		"plain":         {head + `{"role":"assistant","content":"Hello"},"finish_reason":null}]}`, head + `{"content":" world"},"finish_reason":"stop"}]}`},
		"escapes":       {head + `{"content":"a<b>&c \"q\" \\ \b\f\n\r\t\u0001 \u2028\u2029 é \ud800"},"finish_reason":null}]}`},
		"invalid UTF-8": {"{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\xffb\"}}]}"},
		"kept members": {head + `{"content":"x"}}],"a":1,"d":{"k": [1, 2]},"x_phasegate":{"phase":"final"},"<k>":"v&","zz":null}`,
			`{"choices":[],"usage":{"prompt_tokens": 3,"completion_tokens":4},"b":"\u003c"}`},
		"tool calls": {head + `{"role":"assistant","tool_calls":[{"index":1,"id":"c2","type":"function","function":{"name":"g","arguments":"{\"a\":\"<\"}"}}]}}]}`,
			head + `{"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`},
		"reasoning": {head + `{"reasoning_content":"think"}}]}`, head + `{"content":""},"finish_reason":"length"}]}`},
		"nothing":   {`{"choices":[]}`},
	}
	for name, chunks := range cases {
		var a Assembler
		for _, c := range chunks {
			if err := a.Add([]byte(c)); err != nil {
				t.Fatalf("%s: Add(%s): %v", name, c, err)
			}
		}
		got, err1 := a.Completion()
		want, err2 := a.completionByMap()
		if err1 != nil || err2 != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: written\n%s (%v)\nencoding/json\n%s (%v)", name, got, err1, want, err2)
		}
	}
}

// FuzzCompletion checks the completion of any chunks the assembler takes
// against the one encoding/json writes from a map.
func FuzzCompletion(f *testing.F) {
	f.Add(`{"id":"c","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi<"},"finish_reason":"stop"}],"a":1}`, `{"choices":[],"usage":{"x": 1},"zz":"&"}`)
	f.Add(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x","function":{"name":"f","arguments":"{"}}]}}]}`, `{"choices":[{"index":0,"delta":{"reasoning_content":"\u2029"}}],"\u00e9":[1]}`)
	f.Fuzz(func(t *testing.T, c1, c2 string) {
		var a Assembler
		_ = a.Add([]byte(c1))
		_ = a.Add([]byte(c2))
		got, err1 := a.Completion()
		want, err2 := a.completionByMap()
		if (err1 == nil) != (err2 == nil) || !bytes.Equal(got, want) {
			t.Fatalf("written\n%s (%v)\nencoding/json\n%s (%v)", got, err1, want, err2)
		}
	})
}

// completionByMap is the completion as encoding/json writes it from a
// map: the reference Completion is tested against.
func (a *Assembler) completionByMap() ([]byte, error) {
	// refusal is required by the chat.completion message's schema, null
	// when there is none; the gateway never assembles one.
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	if a.role != "" {
		msg["role"] = a.role
	}
	if a.hasText || len(a.calls) == 0 {
		msg["content"] = a.content.String()
	}
	if a.hasReason {
		msg["reasoning_content"] = a.reasoning.String()
	}
	if len(a.calls) > 0 {
		msg["tool_calls"] = a.sortedCalls()
	}
	out := map[string]any{
		"id": a.header.ID, "object": "chat.completion", "created": a.header.Created, "model": a.header.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": a.finish}},
	}
	if a.header.SystemFingerprint != "" {
		out["system_fingerprint"] = a.header.SystemFingerprint
	}
	if len(a.usage) > 0 {
		out["usage"] = a.usage
	}
	for k, v := range a.extra {
		out[k] = v
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode completion: %w", err)
	}
	return b, nil
}

// BenchmarkCompletion writes the completion of a small answer (a role, nine
// words, a finish, usage, the gateway's extension) in one pass and, for
// comparison, as encoding/json writes it from a map:
//
//	go test ./chat -run '^$' -bench '^BenchmarkCompletion$' -benchmem
func BenchmarkCompletion(b *testing.B) {
	head := `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"deepseek-chat","choices":[{"index":0,"delta":`
	var a Assembler
	chunks := []string{head + `{"role":"assistant","content":""},"finish_reason":null}]}`}
	for _, w := range []string{"The ", "handler ", "closes ", "the ", "stream ", "early, ", "so ", "tests ", "fail."} {
		chunks = append(chunks, head+`{"content":"`+w+`"},"finish_reason":null}],"x_phasegate":{"phase":"final"}}`)
	}
	chunks = append(chunks, head+`{},"finish_reason":"stop"}]}`, `{"choices":[],"usage":{"prompt_tokens":24,"completion_tokens":9,"total_tokens":33}}`)
	for _, c := range chunks {
		if err := a.Add([]byte(c)); err != nil {
			b.Fatal(err)
		}
	}
	for _, bm := range []struct {
		name string
		f    func() ([]byte, error)
	}{{"written", a.Completion}, {"map", a.completionByMap}} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bm.f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
