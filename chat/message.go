package chat

import (
	"encoding/json"
	"fmt"

	"github.com/phasegate/phasegate/internal/jsonscan"
)

// Roles, as the wire spells them.
const (
	RoleSystem    = "system"
	RoleDeveloper = "developer"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one message of a chat history: its raw JSON, which is what
// goes back on the wire, and typed views of the fields the gateway reads.
type Message struct {
	Role string
	// Content is the raw content: a JSON string, an array of parts, or null.
	Content          json.RawMessage
	ToolCalls        []ToolCall
	ToolCallID       string
	ReasoningContent *string

	// Raw is the message exactly as the client sent it, or as the gateway
	// rewrote it through With.
	Raw json.RawMessage
}

type messageView struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	ToolCalls        []ToolCall      `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
	ReasoningContent *string         `json:"reasoning_content"`
}

// UnmarshalJSON keeps the raw bytes and decodes the views.
func (m *Message) UnmarshalJSON(b []byte) error {
	var v messageView
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*m = Message{
		Role:             v.Role,
		Content:          v.Content,
		ToolCalls:        v.ToolCalls,
		ToolCallID:       v.ToolCallID,
		ReasoningContent: v.ReasoningContent,
		Raw:              append(json.RawMessage(nil), b...),
	}
	return nil
}

// MarshalJSON writes the raw form.
func (m Message) MarshalJSON() ([]byte, error) {
	if len(m.Raw) == 0 {
		return nil, fmt.Errorf("message with role %q has no raw form: build it with NewMessage", m.Role)
	}
	return m.Raw, nil
}

// Text returns the content as plain text: the string itself, or the text
// parts of an array joined; "" for null or anything else.
func (m Message) Text() string {
	return ContentText(m.Content)
}

// ContentText returns raw message content as plain text.
func ContentText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if raw[0] == '"' {
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		return ""
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	for _, p := range parts {
		s += p.Text
	}
	return s
}

// NewMessage builds a message from a role and a text content.
func NewMessage(role, text string) Message {
	m, err := NewMessageFields(map[string]any{"role": role, "content": text})
	if err != nil {
		panic(err) // unreachable: strings always marshal
	}
	return m
}

// NewMessageFields builds a message from its fields.
func NewMessageFields(fields map[string]any) (Message, error) {
	b, err := json.Marshal(fields)
	if err != nil {
		return Message{}, fmt.Errorf("encode message: %w", err)
	}
	var m Message
	if err := m.UnmarshalJSON(b); err != nil {
		return Message{}, fmt.Errorf("decode message: %w", err)
	}
	return m, nil
}

// With returns a copy of m with field key set to v (marshalled unless it is
// a json.RawMessage), every other field kept byte for byte and in place; a
// new field goes last.
func (m Message) With(key string, v any) (Message, error) {
	raw, ok := v.(json.RawMessage)
	if !ok {
		b, err := json.Marshal(v)
		if err != nil {
			return Message{}, fmt.Errorf("encode %q: %w", key, err)
		}
		raw = b
	}
	b, err := jsonscan.SetField(m.Raw, key, raw)
	if err != nil {
		return Message{}, fmt.Errorf("decode message: %w", err)
	}
	var out Message
	if err := out.UnmarshalJSON(b); err != nil {
		return Message{}, err
	}
	return out, nil
}

// ToolCall is a complete tool call of an assistant message.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its arguments, a JSON text.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool is a tool the request declares, with its raw form.
type Tool struct {
	Type     string
	Function FunctionDef
	Raw      json.RawMessage
}

// FunctionDef is a declared function; Parameters is its JSON Schema, raw.
type FunctionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// UnmarshalJSON keeps the raw bytes and decodes the views.
func (t *Tool) UnmarshalJSON(b []byte) error {
	var v struct {
		Type     string      `json:"type"`
		Function FunctionDef `json:"function"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*t = Tool{Type: v.Type, Function: v.Function, Raw: append(json.RawMessage(nil), b...)}
	return nil
}

// MarshalJSON writes the raw form.
func (t Tool) MarshalJSON() ([]byte, error) {
	if len(t.Raw) == 0 {
		return json.Marshal(struct {
			Type     string      `json:"type"`
			Function FunctionDef `json:"function"`
		}{t.Type, t.Function})
	}
	return t.Raw, nil
}
