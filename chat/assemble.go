package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/phasegate/phasegate/internal/jsonscan"
)

// Assembler turns the chunks of a stream into the one chat.completion a
// non-streaming client expects: content, reasoning_content and tool calls
// of choice 0 concatenated, the last finish reason and usage, and the last
// value of every other top-level field (the gateway's phase metadata among
// them). It is not safe for concurrent use.
type Assembler struct {
	header    ChunkHeader
	role      string
	content   strings.Builder
	hasText   bool
	reasoning strings.Builder
	hasReason bool
	calls     map[int]*ToolCall
	finish    *string
	usage     json.RawMessage
	extra     map[string]json.RawMessage
	// tpl reads text chunks without decoding them (see learn).
	tpl chunkTemplate
	// decodeAll turns tpl off: the reference it is tested against.
	decodeAll bool
}

// chunkTemplate is the shape of a text chunk: the bytes before its content
// string's body and after it (jsonscan.Template), and what the chunk
// decoded to. A chunk with the same bytes around one JSON string's body
// decodes to the same chunk but for that content, so it is added as the
// decoded one with its own content.
type chunkTemplate struct {
	tpl   jsonscan.Template
	chunk Chunk
	extra []member
}

// member is a top-level member of a chunk, its key unescaped.
type member struct {
	key string
	val json.RawMessage
}

// read returns the content of data when it has the learned shape, as a
// string sharing data's bytes when it has no escape.
func (t *chunkTemplate) read(data []byte) (string, bool) { return t.tpl.Read(data) }

// learn learns the shape of data, a chunk decoded as c with top-level
// members extra beside the known ones, when it is a text chunk: one choice, index 0, a content of
// plain text, no tool calls (whose fragments are not idempotent). The
// content's body must be the unescaped string of data's one "content"
// key (at any depth, as the decoder matches keys); that it
// is where the decoder read the content from is checked by decoding data
// with another body there. Called until one chunk of an answer is learned.
func (t *chunkTemplate) learn(data []byte, c Chunk, extra []member) {
	if len(c.Choices) != 1 || c.Choices[0].Index != 0 {
		return
	}
	d := &c.Choices[0].Delta
	if d.Content == nil || *d.Content == "" || len(d.ToolCalls) > 0 {
		return
	}
	start, end, n := 0, 0, 0
	for k := jsonscan.Scan(data); k.Next(); {
		if !k.Is("content") {
			continue
		}
		n++
		if body, esc, ok := k.StringValue(); ok && !esc && string(body) == *d.Content {
			start = k.Value() + 1
			end = start + len(body)
		}
	}
	if n != 1 || end == 0 {
		return // the content needs escapes, or the chunk has another: its chunks are decoded
	}
	const probe = "phasegate-probe"
	test := append(append(append([]byte{}, data[:start]...), probe...), data[end:]...)
	pc, err := DecodeChunk(test)
	if err != nil || len(pc.Choices) != 1 || pc.Choices[0].Delta.Content == nil || *pc.Choices[0].Delta.Content != probe {
		return
	}
	t.tpl.Learn(bytes.Clone(data), start, end) // data is the caller's, and may be reused
	t.chunk, t.extra = c, extra
}

var chunkKnown = map[string]bool{"id": true, "object": true, "created": true, "model": true, "system_fingerprint": true, "choices": true, "usage": true}

// Add takes the data of one chunk. A text chunk with the shape of one
// decoded before is read without decoding (see chunkTemplate); data is
// not kept.
func (a *Assembler) Add(data []byte) error {
	if text, ok := a.tpl.read(data); ok {
		a.apply(&a.tpl.chunk, a.tpl.extra, &text)
		return nil
	}
	c, err := DecodeChunk(data)
	if err != nil {
		return err
	}
	extra, ok := a.extraMembers(data)
	if !ok {
		if extra, err = decodeExtra(data); err != nil {
			return err
		}
	}
	a.apply(&c, extra, nil)
	if !a.tpl.tpl.Learned() && !a.decodeAll {
		a.tpl.learn(data, c, extra)
	}
	return nil
}

// extraMembers returns the top-level members of data, a chunk that
// decoded, whose keys are not chunkKnown, with their values copied, in
// the order they come (a later one of a key given twice wins, as in a
// map). Not ok leaves data to decodeExtra: a key with an escape, or not
// valid UTF-8, which the decoder would not read as written.
func (a *Assembler) extraMembers(data []byte) ([]member, bool) {
	if a.decodeAll {
		return nil, false
	}
	var extra []member
	w := jsonscan.Walk(data)
	plain := true
	w.Object(func(key []byte) {
		v := w.Value()
		if chunkKnown[string(key)] {
			return
		}
		plain = plain && utf8.Valid(key)
		extra = append(extra, member{key: string(key), val: bytes.Clone(v)})
	})
	w.End()
	if w.Err() != nil || w.EscapedKey() || !plain {
		return nil, false
	}
	return extra, true
}

// decodeExtra is extraMembers by encoding/json, in no particular order.
func decodeExtra(data []byte) ([]member, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("decode chunk: %w", err)
	}
	var extra []member
	for k, v := range top {
		if !chunkKnown[k] {
			extra = append(extra, member{key: k, val: v})
		}
	}
	return extra, nil
}

// apply adds a decoded chunk c, whose top-level members beside the known
// ones are extra; content, when set, stands for the content of its
// choice 0.
func (a *Assembler) apply(c *Chunk, extra []member, content *string) {
	for _, m := range extra {
		if a.extra == nil {
			a.extra = map[string]json.RawMessage{}
		}
		a.extra[m.key] = m.val
	}
	if a.header.ID == "" {
		a.header = ChunkHeader{ID: c.ID, Created: c.Created, Model: c.Model, SystemFingerprint: c.SystemFingerprint}
	}
	if c.HasUsage() {
		a.usage = c.Usage
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		if content != nil {
			ch.Delta.Content = content
		}
		a.delta(&ch.Delta)
		if ch.FinishReason != nil {
			r := *ch.FinishReason
			a.finish = &r
		}
	}
}

// delta adds the delta of choice 0.
func (a *Assembler) delta(d *Delta) {
	if d.Role != "" {
		a.role = d.Role
	}
	if d.Content != nil {
		a.content.WriteString(*d.Content)
		a.hasText = a.hasText || *d.Content != ""
	}
	if d.ReasoningContent != nil {
		a.reasoning.WriteString(*d.ReasoningContent)
		a.hasReason = true
	}
	for _, td := range d.ToolCalls {
		if a.calls == nil {
			a.calls = map[int]*ToolCall{}
		}
		tc := a.calls[td.Index]
		if tc == nil {
			tc = &ToolCall{Type: "function"}
			a.calls[td.Index] = tc
		}
		if td.ID != "" {
			tc.ID = td.ID
		}
		if td.Type != "" {
			tc.Type = td.Type
		}
		tc.Function.Name += td.Function.Name
		tc.Function.Arguments += td.Function.Arguments
	}
}
