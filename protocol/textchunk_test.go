package protocol

import (
	"encoding/json"
	"testing"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/jsonscan"
)

func TestTextSpans(t *testing.T) {
	tests := []struct {
		name               string
		data               string
		wantOK             bool
		content, reasoning string
	}{
		{"plain", `{"id":"x","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}`, true, "Hel", ""},
		{"escapes", `{"choices":[{"delta":{"content":"a\"b\\c\n"},"finish_reason":null}]}`, true, `a\"b\\c\n`, ""},
		{"spaces", `{ "choices" : [ { "delta" : { "content" : "x" } , "finish_reason" : null } ] }`, true, "x", ""},
		{"reasoning only", `{"choices":[{"delta":{"content":null,"reasoning_content":"think"},"finish_reason":null}]}`, true, "", "think"},
		{"OpenAI usage null", `{"choices":[{"delta":{"content":"x"},"finish_reason":null}],"usage":null}`, true, "x", ""},
		{"finish", `{"choices":[{"delta":{},"finish_reason":"stop"}]}`, false, "", ""},
		{"usage", `{"choices":[],"usage":{"prompt_tokens":1}}`, false, "", ""},
		{"tool call", `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`, false, "", ""},
		{"keys inside content are text", `{"choices":[{"delta":{"content":"\"finish_reason\":\"stop\""},"finish_reason":null}]}`, true, `\"finish_reason\":\"stop\"`, ""},
		{"logprobs content array", `{"choices":[{"delta":{"content":"x"},"logprobs":{"content":[{"token":"x"}]},"finish_reason":null}]}`, false, "", ""},
		{"content twice", `{"choices":[{"delta":{"content":"x"}}],"extra":{"Content":"y"}}`, false, "", ""},
		{"no choices", `{"error":{"message":"x"}}`, false, "", ""},
		{"unterminated", `{"choices":[{"delta":{"content":"x`, false, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.data)
			cs, rs, ok := textSpans(data)
			get := func(sp span) string {
				if sp.start < 0 {
					return ""
				}
				return string(data[sp.start:sp.end])
			}
			if ok != tt.wantOK || ok && (get(cs) != tt.content || get(rs) != tt.reasoning) {
				t.Errorf("textSpans: got (%q, %q, %v), want (%q, %q, %v)", get(cs), get(rs), ok, tt.content, tt.reasoning, tt.wantOK)
			}
		})
	}
}

// TestTextTemplate: after the decoder read one chunk, chunks of the same
// shape are read by their bytes around the text; anything else is not.
func TestTextTemplate(t *testing.T) {
	chunk := func(content string) []byte {
		return []byte(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":` + content + `},"finish_reason":null}]}`)
	}
	var tpl textTemplates
	first := chunk(`"Hel"`)
	c, err := chat.DecodeChunk(first)
	if err != nil {
		t.Fatal(err)
	}
	learnFrom(&tpl, first, &c)
	steps := []struct {
		name        string
		data        []byte
		wantOK      bool
		wantContent string
	}{
		{"same shape", chunk(`"lo wor"`), true, "lo wor"},
		{"empty content", chunk(`""`), true, ""},
		{"escapes", chunk(`"a\"b\n"`), true, "a\"b\n"},
		{"a quote would end the string", chunk(`"x","finish_reason":"stop"},"y":{"z":"w"`), false, ""},
		{"a raw control byte", chunk("\"a\nb\""), false, ""},
		{"another shape", []byte(`{"choices":[{"delta":{"content":"other"},"finish_reason":null}]}`), false, ""},
		{"finish", []byte(`{"choices":[{"delta":{},"finish_reason":"stop"}]}`), false, ""},
		{"back to the first shape", chunk(`"ld"`), true, "ld"},
	}
	for _, st := range steps {
		got, reasoning, ok := tpl.read(st.data)
		if ok != st.wantOK || reasoning != "" || (ok && got != st.wantContent) {
			t.Errorf("%s: got (%q, %q, %v), want (%q, \"\", %v)", st.name, got, reasoning, ok, st.wantContent, st.wantOK)
		}
	}
}

// FuzzTextTemplate: a chunk read through a template learned from any
// chunk the decoder read is one the decoder reads the same way: a plain
// text chunk with that content, or with reasoning and no content.
func FuzzTextTemplate(f *testing.F) {
	f.Add(`{"choices":[{"delta":{"content":"a"},"finish_reason":null}]}`, `{"choices":[{"delta":{"content":"b"},"finish_reason":null}]}`)
	f.Add(`{"choices":[{"delta":{"content":"a"},"finish_reason":null}]}`, `{"choices":[{"delta":{"content":"b"},"finish_reason":"stop"}]}`)
	f.Add(`{"choices":[{"delta":{"content":null,"reasoning_content":"a"}}]}`, `{"choices":[{"delta":{"content":null,"reasoning_content":"b\"c"}}]}`)
	f.Fuzz(func(t *testing.T, first, second string) {
		c, err := chat.DecodeChunk([]byte(first))
		if err != nil {
			return
		}
		var tpl textTemplates
		learnFrom(&tpl, []byte(first), &c)
		got, ok := tpl.content.Read([]byte(second))
		reasoning := false
		if !ok {
			if got, ok = tpl.reasoning.Read([]byte(second)); !ok {
				return
			}
			reasoning = true
		}
		d, err := chat.DecodeChunk([]byte(second))
		if err != nil || !json.Valid([]byte(second)) {
			t.Fatalf("template read a chunk the decoder refuses: %s", second)
		}
		if d.HasUsage() || len(d.Choices) != 1 || d.FinishReason() != "" || len(d.Choices[0].Delta.ToolCalls) > 0 {
			t.Fatalf("template read a chunk that is not plain text: %s", second)
		}
		delta := d.Choices[0].Delta
		switch {
		case reasoning && (delta.ReasoningContent == nil || *delta.ReasoningContent != jsonscan.Unescaped([]byte(got)) || delta.Content != nil && *delta.Content != ""):
			t.Fatalf("template read reasoning %q, the decoder %+v, from %s", got, delta, second)
		case !reasoning && (delta.Content == nil || *delta.Content != jsonscan.Unescaped([]byte(got)) || delta.ReasoningContent != nil):
			t.Fatalf("template read content %q, the decoder %+v, from %s", got, delta, second)
		}
	})
}

// learnFrom learns from a decoded chunk as the answer reader does: only a
// plain text chunk whose spans the one-pass read found.
func learnFrom(tpl *textTemplates, data []byte, c *chat.Chunk) {
	if c.HasUsage() || len(c.Choices) != 1 || c.FinishReason() != "" || len(c.Choices[0].Delta.ToolCalls) > 0 {
		return
	}
	if cs, rs, ok := textSpans(data); ok {
		tpl.learn(data, &c.Choices[0].Delta, cs, rs)
	}
}

// FuzzArgsTemplate: a fragment read through the template learned from
// another decodes to the same tool-call delta, and to nothing else.
func FuzzArgsTemplate(f *testing.F) {
	frag := func(args string) string {
		return `{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":` + args + `}}]},"finish_reason":null}]}`
	}
	f.Add(frag(`"{\"pa"`), frag(`"th\":\"a.go\"}"`))
	f.Add(frag(`"x"`), `{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"y"}}]},"finish_reason":"tool_calls"}]}`)
	f.Add(frag(`"x"`), frag(`"a","name":"evil"`))
	f.Add(frag(`"x"`), frag("\"a\nb\""))
	f.Add(frag("\"a\xffb\""), frag("\"c\xffd\""))
	// A decoy key the decoder does not read beside the one it reads in
	// another case of letters.
	f.Add(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"ARGUMENTS":"{\"p\":"}}]}}],"x":{"arguments":"1}"}}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"ARGUMENTS":"2"}}]}}],"x":{"arguments":"3}"}}`)
	f.Fuzz(func(t *testing.T, first, second string) {
		c, err := chat.DecodeChunk([]byte(first))
		if err != nil {
			return
		}
		var tpl argsTemplate
		tpl.learn([]byte(first), &c)
		got, ok := tpl.read([]byte(second))
		if !ok {
			return
		}
		d, err := chat.DecodeChunk([]byte(second))
		if err != nil || !json.Valid([]byte(second)) {
			t.Fatalf("template read %q from a chunk the decoder refuses: %s", got.Function.Arguments, second)
		}
		if d.HasUsage() || len(d.Choices) != 1 || d.FinishReason() != "" {
			t.Fatalf("template read a chunk with usage, a finish or other choices: %s", second)
		}
		delta := d.Choices[0].Delta
		if len(delta.ToolCalls) != 1 || delta.Content != nil || delta.Role != "" {
			t.Fatalf("template read a chunk that is not one argument fragment: %s", second)
		}
		want := delta.ToolCalls[0]
		if want.ID != "" || want.Type != "" || want.Function.Name != "" || want.Index != got.Index || want.Function.Arguments != got.Function.Arguments {
			t.Fatalf("template read %+v, decoder %+v, from %s", got, want, second)
		}
	})
}
