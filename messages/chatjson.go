package messages

import (
	"encoding/json"
	"strconv"

	"github.com/phasegate/phasegate/internal/jsonscan"
)

// chatRequest is the chat completion request the translation writes.
// Raw fields hold JSON the client wrote, passed on as it is.
type chatRequest struct {
	Model               string
	Messages            []chatMessage
	Tools               []chatTool
	ToolChoice          json.RawMessage
	ParallelToolCalls   *bool
	MaxTokens           *int
	MaxCompletionTokens *int
	Stop                []string
	Temperature         json.RawMessage
	TopP                json.RawMessage
	TopK                json.RawMessage
	User                string
	// Thinking is DeepSeek's switch: "enabled", "disabled", or "" for
	// the upstream's default.
	Thinking string
	Stream   bool
}

// chatMessage is one chat message. Content, Reasoning and the call
// arguments are raw JSON (a string with its quotes, or an array of
// parts); a nil Content is null.
type chatMessage struct {
	Role       string
	Content    json.RawMessage
	Reasoning  json.RawMessage
	ToolCalls  []chatCall
	ToolCallID json.RawMessage
}

// chatCall is a tool call of an assistant message: ID and Name are JSON
// strings, Arguments the raw input the client sent (an object), written
// as a JSON string.
type chatCall struct {
	ID, Name  json.RawMessage
	Arguments json.RawMessage
}

// chatTool is a function tool; its fields are the client's raw JSON.
type chatTool struct {
	Name, Description, Parameters json.RawMessage
}

// object appends the members of a JSON object, a comma before all but
// the first.
type object struct {
	b     []byte
	first bool
}

func newObject(dst []byte) *object { return &object{b: append(dst, '{'), first: true} }

func (o *object) key(k string) {
	if !o.first {
		o.b = append(o.b, ',')
	}
	o.first = false
	o.b = append(append(append(o.b, '"'), k...), `":`...)
}

func (o *object) raw(k string, v []byte) {
	o.key(k)
	o.b = append(o.b, v...)
}

func (o *object) str(k, v string) {
	o.key(k)
	o.b = appendString(o.b, v)
}

func (o *object) int(k string, v int) {
	o.key(k)
	o.b = strconv.AppendInt(o.b, int64(v), 10)
}

func (o *object) close() []byte { return append(o.b, '}') }

func (r *chatRequest) appendJSON(dst []byte) []byte {
	o := newObject(dst)
	o.str("model", r.Model)
	o.key("messages")
	o.b = append(o.b, '[')
	for i := range r.Messages {
		if i > 0 {
			o.b = append(o.b, ',')
		}
		o.b = r.Messages[i].appendJSON(o.b)
	}
	o.b = append(o.b, ']')
	if len(r.Tools) > 0 {
		o.key("tools")
		o.b = append(o.b, '[')
		for i, t := range r.Tools {
			if i > 0 {
				o.b = append(o.b, ',')
			}
			o.b = t.appendJSON(o.b)
		}
		o.b = append(o.b, ']')
	}
	r.appendOptions(o)
	return o.close()
}

// appendOptions appends the members after the messages and tools.
func (r *chatRequest) appendOptions(o *object) {
	if r.ToolChoice != nil {
		o.raw("tool_choice", r.ToolChoice)
	}
	if r.ParallelToolCalls != nil {
		o.raw("parallel_tool_calls", []byte(strconv.FormatBool(*r.ParallelToolCalls)))
	}
	if r.MaxTokens != nil {
		o.int("max_tokens", *r.MaxTokens)
	}
	if r.MaxCompletionTokens != nil {
		o.int("max_completion_tokens", *r.MaxCompletionTokens)
	}
	if len(r.Stop) > 0 {
		o.key("stop")
		o.b = append(o.b, '[')
		for i, s := range r.Stop {
			if i > 0 {
				o.b = append(o.b, ',')
			}
			o.b = appendString(o.b, s)
		}
		o.b = append(o.b, ']')
	}
	for _, f := range []struct {
		k string
		v json.RawMessage
	}{{"temperature", r.Temperature}, {"top_p", r.TopP}, {"top_k", r.TopK}} {
		if f.v != nil {
			o.raw(f.k, f.v)
		}
	}
	if r.User != "" {
		o.str("user", r.User)
	}
	if r.Thinking != "" {
		o.key("thinking")
		o.b = append(appendString(append(o.b, `{"type":`...), r.Thinking), '}')
	}
	if r.Stream {
		o.raw("stream", []byte("true"))
		o.raw("stream_options", []byte(`{"include_usage":true}`))
	}
}

func (m *chatMessage) appendJSON(dst []byte) []byte {
	o := newObject(dst)
	o.str("role", m.Role)
	if m.ToolCallID != nil {
		o.raw("tool_call_id", m.ToolCallID)
	}
	if m.Content == nil {
		o.raw("content", []byte("null"))
	} else {
		o.raw("content", m.Content)
	}
	if m.Reasoning != nil {
		o.raw("reasoning_content", m.Reasoning)
	}
	if len(m.ToolCalls) > 0 {
		o.key("tool_calls")
		o.b = append(o.b, '[')
		for i, c := range m.ToolCalls {
			if i > 0 {
				o.b = append(o.b, ',')
			}
			o.b = append(append(append(o.b, `{"id":`...), c.ID...), `,"type":"function","function":{"name":`...)
			o.b = append(append(o.b, c.Name...), `,"arguments":`...)
			o.b = append(appendString(o.b, string(c.Arguments)), "}}"...)
		}
		o.b = append(o.b, ']')
	}
	return o.close()
}

func (t *chatTool) appendJSON(dst []byte) []byte {
	o := newObject(append(dst, `{"type":"function","function":`...))
	o.raw("name", t.Name)
	if t.Description != nil {
		o.raw("description", t.Description)
	}
	o.raw("parameters", t.Parameters)
	return append(o.close(), '}')
}

// appendString appends s as a JSON string, as an encoding/json Encoder
// without HTML escaping writes it.
func appendString(dst []byte, s string) []byte { return jsonscan.AppendString(dst, s, false) }
