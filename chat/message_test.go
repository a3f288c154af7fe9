package chat_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/phasegate/phasegate/chat"
)

func TestContentText(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want string
	}{
		{name: "absent", raw: ``, want: ""},
		{name: "null", raw: `null`, want: ""},
		{name: "string", raw: `"a \"b\" \u00e9"`, want: `a "b" é`},
		{name: "parts", raw: `[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]`, want: "ab"},
		{name: "number", raw: `5`, want: ""},
		{name: "broken string", raw: `"abc`, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := chat.ContentText(json.RawMessage(tt.raw)); got != tt.want {
				t.Errorf("ContentText(%s) = %q, want %q", tt.raw, got, tt.want)
			}
		})
	}
}

func TestMessageRoundTrip(t *testing.T) {
	raw := `{"role":"assistant","content":null,"reasoning_content":"why","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}}],"x_vendor": [1, 2]}`
	var m chat.Message
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatal(err)
	}
	if m.Role != "assistant" || m.ReasoningContent == nil || *m.ReasoningContent != "why" || len(m.ToolCalls) != 1 ||
		m.ToolCalls[0].Function.Arguments != `{"x": 1}` {
		t.Errorf("views = %+v", m)
	}
	if string(m.Raw) != raw {
		t.Errorf("Raw = %s, want %s", m.Raw, raw)
	}
	// encoding/json compacts what a Marshaler returns; the wire path
	// (Request.Encode) writes Raw itself.
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := json.Compact(&want, []byte(raw)); err != nil {
		t.Fatal(err)
	}
	if string(b) != want.String() {
		t.Errorf("Marshal = %s, want %s", b, want.String())
	}
	if _, err := json.Marshal(chat.Message{Role: "user"}); err == nil {
		t.Error("Marshal of a message without raw form: got nil error")
	}
}

// TestMessageWith checks With sets one field and keeps every other field
// byte for byte.
func TestMessageWith(t *testing.T) {
	tests := []struct {
		name  string
		raw   string
		key   string
		value any
		want  string
	}{
		{name: "replace", raw: `{"role":"assistant","content":"a"}`, key: "content", value: "b", want: `{"role":"assistant","content":"b"}`},
		{name: "add at the end", raw: `{"role":"assistant","content":null}`, key: "reasoning_content", value: "why",
			want: `{"role":"assistant","content":null,"reasoning_content":"why"}`},
		{name: "raw value", raw: `{"role":"tool","content":"x"}`, key: "content", value: json.RawMessage(`[{"type":"text","text":"y"}]`),
			want: `{"role":"tool","content":[{"type":"text","text":"y"}]}`},
		{name: "other fields kept byte for byte", raw: `{"role":"user","x_vendor":{"b": 1, "a": [1.50, "<&>"]},"content":"<tag> & more"}`,
			key: "name", value: "bob", want: `{"role":"user","x_vendor":{"b": 1, "a": [1.50, "<&>"]},"content":"<tag> & more","name":"bob"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m chat.Message
			if err := json.Unmarshal([]byte(tt.raw), &m); err != nil {
				t.Fatal(err)
			}
			got, err := m.With(tt.key, tt.value)
			if err != nil {
				t.Fatal(err)
			}
			if string(got.Raw) != tt.want {
				t.Errorf("With = %s\nwant   %s", got.Raw, tt.want)
			}
			if string(m.Raw) != tt.raw {
				t.Errorf("With changed the original: %s", m.Raw)
			}
			if got.Role != m.Role {
				t.Errorf("views not refreshed: role %q", got.Role)
			}
		})
	}
}

func TestNewMessage(t *testing.T) {
	m := chat.NewMessage(chat.RoleSystem, "Maximum tool execution cycles (3) reached.")
	if m.Role != chat.RoleSystem || m.Text() != "Maximum tool execution cycles (3) reached." {
		t.Errorf("NewMessage = %+v", m)
	}
	var back map[string]string
	if err := json.Unmarshal(m.Raw, &back); err != nil || back["role"] != "system" {
		t.Errorf("raw = %s (%v)", m.Raw, err)
	}
	if _, err := chat.NewMessageFields(map[string]any{"role": "user", "content": make(chan int)}); err == nil {
		t.Error("NewMessageFields with an unencodable value: got nil error")
	}
}

func TestToolMarshal(t *testing.T) {
	raw := `{"type":"function","function":{"name":"f","parameters":{"type":"object"},"strict":true},"x":1}`
	var tool chat.Tool
	if err := json.Unmarshal([]byte(raw), &tool); err != nil {
		t.Fatal(err)
	}
	if tool.Function.Name != "f" || string(tool.Function.Parameters) != `{"type":"object"}` {
		t.Errorf("views = %+v", tool)
	}
	if b, _ := json.Marshal(tool); string(b) != raw {
		t.Errorf("Marshal = %s, want %s", b, raw)
	}
	built := chat.Tool{Type: "function", Function: chat.FunctionDef{Name: "g"}}
	if b, _ := json.Marshal(built); string(b) != `{"type":"function","function":{"name":"g"}}` {
		t.Errorf("Marshal of a built tool = %s", b)
	}
}
