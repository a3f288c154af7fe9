package sim

import (
	"encoding/json"
	"time"
)

// Stream builds a chat.completion.chunk stream. Every chunk shares one id,
// created time and model, as upstreams send them. A Stream is not safe for
// concurrent use; its Reply and Events are copies.
type Stream struct {
	id, model string
	created   int64
	events    []Event
}

// NewStream starts a stream for model, with a fresh id and the current
// time.
func NewStream(model string) *Stream {
	return &Stream{id: newID(), model: model, created: time.Now().Unix()}
}

// chunk appends a chunk with one choice whose delta is delta.
func (s *Stream) chunk(delta map[string]any, finish any) *Stream {
	return s.Raw(s.encode([]any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}, nil))
}

func (s *Stream) encode(choices []any, usage any) string {
	c := map[string]any{"id": s.id, "object": "chat.completion.chunk", "created": s.created, "model": s.model,
		"system_fingerprint": fingerprint, "choices": choices}
	if usage != nil {
		c["usage"] = usage
	}
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // unreachable: plain maps and strings
	}
	return string(b)
}

// Role appends the opening chunk that carries the assistant role.
func (s *Stream) Role() *Stream {
	return s.chunk(map[string]any{"role": "assistant", "content": ""}, nil)
}

// Content appends one chunk per piece of text.
func (s *Stream) Content(pieces ...string) *Stream {
	for _, p := range pieces {
		s.chunk(map[string]any{"content": p}, nil)
	}
	return s
}

// Reasoning appends one reasoning_content chunk per piece, as DeepSeek's
// thinking mode sends them before the content.
func (s *Stream) Reasoning(pieces ...string) *Stream {
	for _, p := range pieces {
		s.chunk(map[string]any{"reasoning_content": p, "content": nil}, nil)
	}
	return s
}

// ToolCall appends a tool call at index: the first fragment carries id,
// type, name and the first piece of the arguments, the others only
// argument pieces. No pieces means arguments "".
func (s *Stream) ToolCall(index int, id, name string, argPieces ...string) *Stream {
	first := ""
	if len(argPieces) > 0 {
		first = argPieces[0]
	}
	s.chunk(map[string]any{"tool_calls": []any{map[string]any{"index": index, "id": id, "type": "function",
		"function": map[string]any{"name": name, "arguments": first}}}}, nil)
	for i := 1; i < len(argPieces); i++ {
		s.chunk(map[string]any{"tool_calls": []any{map[string]any{"index": index,
			"function": map[string]any{"arguments": argPieces[i]}}}}, nil)
	}
	return s
}

// Finish appends the chunk with the finish reason and an empty delta.
func (s *Stream) Finish(reason string) *Stream {
	return s.chunk(map[string]any{}, reason)
}

// Usage appends the usage chunk OpenAI sends last when include_usage is
// set: no choices, the usage object. Extra fields (DeepSeek's
// prompt_cache_hit_tokens, say) are merged into it.
func (s *Stream) Usage(prompt, completion int, extra map[string]any) *Stream {
	u := map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
	for k, v := range extra {
		u[k] = v
	}
	return s.Raw(s.encode([]any{}, u))
}

// KeepAlive appends a ": keep-alive" comment, as DeepSeek sends under load.
func (s *Stream) KeepAlive() *Stream {
	s.events = append(s.events, Event{Comment: ": keep-alive"})
	return s
}

// Raw appends an event with the given data.
func (s *Stream) Raw(data string) *Stream {
	s.events = append(s.events, Event{Data: data})
	return s
}

// Delay makes the next event wait d.
func (s *Stream) Delay(d time.Duration) *Stream {
	s.events = append(s.events, Event{Comment: ": delay", Delay: d})
	return s
}

// Burst makes the events so far reach the client together with the next
// one, in one write: a reader gets them in one read, with no wait between
// them, however the machine schedules the two sides.
func (s *Stream) Burst() *Stream {
	for i := range s.events {
		s.events[i].Unflushed = true
	}
	return s
}

// Done appends "[DONE]".
func (s *Stream) Done() *Stream { return s.Raw("[DONE]") }

// Events returns the events built so far.
func (s *Stream) Events() []Event { return append([]Event(nil), s.events...) }

// Reply returns the stream as a reply.
func (s *Stream) Reply() Reply { return Reply{Events: s.Events()} }
