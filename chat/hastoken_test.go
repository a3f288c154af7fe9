package chat_test

import (
	"testing"

	"github.com/phasegate/phasegate/chat"
)

func TestHasToken(t *testing.T) {
	tests := []struct {
		name string
		data string
		want bool
	}{
		{"opening", `{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, false},
		{"opening with null content", `{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}`, false},
		{"text", `{"choices":[{"index":0,"delta":{"content":"Hi"}}]}`, true},
		{"a space", `{"choices":[{"index":0,"delta":{"content":" "}}]}`, true},
		{"reasoning", `{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":"Let"}}]}`, true},
		{"tool call", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"f"}}]}}]}`, true},
		{"empty tool calls", `{"choices":[{"index":0,"delta":{"tool_calls": [ ]}}]}`, false},
		{"finish", `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, false},
		{"usage", `{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}`, false},
		{"quoted key in text", `{"choices":[{"index":0,"delta":{"content":""},"x":"\"content\":\"a"}]}`, false},
		{"spaced", `{"delta" : { "content" : "a" }}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := chat.HasToken([]byte(tt.data)); got != tt.want {
				t.Errorf("HasToken(%s) = %v, want %v", tt.data, got, tt.want)
			}
		})
	}
}
