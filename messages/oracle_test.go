package messages_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/respjson"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"
)

// The Anthropic Go SDK is the oracle of every body and event this
// package writes: what it decodes, and what it would not know (an extra
// field is a misspelt one).

// decodeMessage decodes a message object as the SDK does, and checks
// that it holds no field the SDK does not know.
func decodeMessage(t *testing.T, body []byte) anthropic.Message {
	t.Helper()
	if !json.Valid(body) {
		t.Fatalf("message is not JSON: %s", body)
	}
	var m anthropic.Message
	if err := m.UnmarshalJSON(body); err != nil {
		t.Fatalf("the SDK cannot decode the message: %v\n%s", err, body)
	}
	if len(m.JSON.ExtraFields) > 0 || len(m.Usage.JSON.ExtraFields) > 0 {
		t.Errorf("message holds fields the SDK does not know: %v %v\n%s", m.JSON.ExtraFields, m.Usage.JSON.ExtraFields, body)
	}
	for i, b := range m.Content {
		var extra map[string]respjson.Field
		switch b.Type {
		case "text":
			extra = b.AsText().JSON.ExtraFields
		case "thinking":
			extra = b.AsThinking().JSON.ExtraFields
		case "tool_use":
			extra = b.AsToolUse().JSON.ExtraFields
		default:
			t.Errorf("content[%d] is a %q block", i, b.Type)
		}
		if len(extra) > 0 {
			t.Errorf("content[%d] holds fields the SDK does not know: %v", i, extra)
		}
	}
	for _, f := range []struct {
		name  string
		valid bool
	}{{"id", m.JSON.ID.Valid()}, {"type", m.JSON.Type.Valid()}, {"role", m.JSON.Role.Valid()}, {"model", m.JSON.Model.Valid()},
		{"content", m.JSON.Content.Valid()}, {"usage", m.JSON.Usage.Valid()}} {
		if !f.valid {
			t.Errorf("message lacks %s: %s", f.name, body)
		}
	}
	return m
}

// sdkStream reads an event stream with the SDK's own SSE decoder and
// stream, as a client reading the response would: the events, and the
// error an error event makes.
func sdkStream(t *testing.T, sse []byte) ([]anthropic.MessageStreamEventUnion, error) {
	t.Helper()
	res := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(sse)), Request: &http.Request{Method: http.MethodPost}}
	s := ssestream.NewStream[anthropic.MessageStreamEventUnion](ssestream.NewDecoder(res), nil)
	var evs []anthropic.MessageStreamEventUnion
	for s.Next() {
		evs = append(evs, s.Current())
	}
	return evs, s.Err()
}

// accumulate builds the message a client's accumulator builds from the
// events.
func accumulate(t *testing.T, evs []anthropic.MessageStreamEventUnion) anthropic.Message {
	t.Helper()
	var m anthropic.Message
	for i, ev := range evs {
		if err := m.Accumulate(ev); err != nil {
			t.Fatalf("event %d (%s): the SDK's accumulator refuses it: %v", i, ev.Type, err)
		}
	}
	return m
}

// sseEvent is one event of a stream, as written.
type sseEvent struct {
	name string
	data map[string]any
}

// parseEvents splits a stream into its events, checking the framing of
// each (an event: line, one data: line of JSON whose type is the event's
// name, a blank line) and the order of the blocks: indexes start at 0
// and grow by one, one block is open at a time, deltas go to the open
// block, and every block that starts stops.
func parseEvents(t *testing.T, sse []byte) []sseEvent {
	t.Helper()
	if len(sse) == 0 {
		return nil
	}
	if !bytes.HasSuffix(sse, []byte("\n\n")) {
		t.Fatalf("stream does not end with a blank line: %q", sse)
	}
	var out []sseEvent
	open, next := -1, 0
	for _, block := range strings.Split(strings.TrimSuffix(string(sse), "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(block, "\ndata: ")
		if !ok || !strings.HasPrefix(name, "event: ") || strings.Contains(data, "\n") {
			t.Fatalf("malformed event %q", block)
		}
		name = strings.TrimPrefix(name, "event: ")
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("event %s: data is not JSON: %v\n%s", name, err, data)
		}
		if m["type"] != name {
			t.Fatalf("event %s holds type %v", name, m["type"])
		}
		idx, _ := m["index"].(float64)
		switch name {
		case "content_block_start":
			if open >= 0 || int(idx) != next {
				t.Fatalf("block %v starts while %d is open, next %d", idx, open, next)
			}
			open, next = next, next+1
		case "content_block_delta":
			if int(idx) != open {
				t.Fatalf("delta to block %v while %d is open", idx, open)
			}
		case "content_block_stop":
			if int(idx) != open {
				t.Fatalf("block %v stops while %d is open", idx, open)
			}
			open = -1
		case "message_delta", "message_stop":
			if open >= 0 {
				t.Fatalf("%s while block %d is open", name, open)
			}
		}
		out = append(out, sseEvent{name, m})
	}
	if open >= 0 && out[len(out)-1].name != "error" {
		t.Fatalf("block %d never stops", open)
	}
	return out
}

func eventNames(evs []sseEvent) []string {
	var n []string
	for _, e := range evs {
		n = append(n, e.name)
	}
	return n
}

// block is what a test compares of a content block.
type block struct {
	Type, Text, Thinking, Signature, ID, Name string
	Input                                     any
}

// message is what a test compares of a message.
type message struct {
	ID, Model, StopReason, StopSequence  string
	Content                              []block
	Input, Output, CacheRead, CacheWrite int64
}

func view(t *testing.T, m anthropic.Message) message {
	t.Helper()
	v := message{ID: m.ID, Model: m.Model, StopReason: string(m.StopReason), StopSequence: m.StopSequence,
		Input: m.Usage.InputTokens, Output: m.Usage.OutputTokens, CacheRead: m.Usage.CacheReadInputTokens, CacheWrite: m.Usage.CacheCreationInputTokens}
	for _, b := range m.Content {
		cb := block{Type: b.Type, Text: b.Text, Thinking: b.Thinking, Signature: b.Signature, ID: b.ID, Name: b.Name}
		if b.Type == "tool_use" {
			if err := json.Unmarshal(b.Input, &cb.Input); err != nil {
				t.Fatalf("tool_use input %s: %v", b.Input, err)
			}
		}
		v.Content = append(v.Content, cb)
	}
	return v
}
