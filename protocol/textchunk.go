package protocol

import (
	"bytes"
	"unicode/utf8"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/jsonscan"
)

// span is where a JSON string value's body lies in a chunk, between its
// quotes; start is -1 when the key is absent or its value null.
type span struct {
	start, end int
	escaped    bool
}

// textSpans reads a chunk in one pass without decoding it and finds the
// string values of its "content" and "reasoning_content" keys. It reports
// ok only when the chunk surely carries no tool call, no usage and no
// finish reason (each absent or null), each of the two keys appears at
// most once with a string or null value, and it has a "choices" key. Keys
// are recognised only as keys: every string is skipped whole, so text
// inside a value can never pass for one; they match ignoring case, as
// encoding/json matches them. It recognises keys, not JSON: callers learn
// only from chunks the decoder read.
func textSpans(data []byte) (content, reasoning span, ok bool) {
	content, reasoning = span{start: -1}, span{start: -1}
	choices, seenContent, seenReasoning := false, false, false
	k := jsonscan.Scan(data)
	for k.Next() {
		j := k.Value()
		var sp *span
		switch {
		case k.Is("choices"):
			choices = true
		case k.Is("tool_calls"), k.Is("usage"), k.Is("finish_reason"):
			if !bytes.HasPrefix(data[j:], null) {
				return content, reasoning, false
			}
		case k.Is("content"):
			if seenContent {
				return content, reasoning, false
			}
			seenContent, sp = true, &content
		case k.Is("reasoning_content"):
			if seenReasoning {
				return content, reasoning, false
			}
			seenReasoning, sp = true, &reasoning
		}
		if sp != nil && !bytes.HasPrefix(data[j:], null) {
			body, esc, isString := k.StringValue()
			if !isString {
				return content, reasoning, false // logprobs' "content" is an array
			}
			*sp = span{start: j + 1, end: j + 1 + len(body), escaped: esc}
		}
	}
	return content, reasoning, choices && !k.Unclosed()
}

var null = []byte("null")

// textTemplates are the two shapes of an answer's text chunks: content,
// and reasoning_content with no content. Each reads the plain text chunks
// of one upstream answer without decoding them (jsonscan.Template), once
// learned from one the decoder read. Not safe for concurrent use.
type textTemplates struct {
	content, reasoning jsonscan.Template
}

// read reads a text chunk of a learned shape: its content, or its
// reasoning.
func (t *textTemplates) read(data []byte) (content, reasoning string, ok bool) {
	if content, ok := t.content.Read(data); ok {
		return content, "", true
	}
	if reasoning, ok := t.reasoning.Read(data); ok {
		return "", reasoning, true
	}
	return "", "", false
}

// learn learns from data, a plain text chunk whose delta the decoder read
// as d and whose one-pass spans are cs and rs (textSpans said ok). The
// spans are the delta's: each key appears once, and the decoder found it
// in the delta. Escaped text is not learned from; it is read by the
// template all the same.
func (t *textTemplates) learn(data []byte, d *chat.Delta, cs, rs span) {
	hasContent := d.Content != nil && *d.Content != ""
	switch {
	case hasContent && d.ReasoningContent == nil && rs.start < 0 && spanIs(data, cs, *d.Content):
		t.content.Raw = true // a character cut between chunks is joined by the scanners
		t.content.Learn(data, cs.start, cs.end)
	case !hasContent && d.ReasoningContent != nil && spanIs(data, rs, *d.ReasoningContent):
		t.reasoning.Raw = true
		t.reasoning.Learn(data, rs.start, rs.end)
	}
}

var unicodeEscape = []byte(`\u`)

// spanIs reports whether sp is surely the string the decoder read as
// decoded: an unescaped string with those bytes (invalid UTF-8 aside,
// which the decoder replaces), and no \u escape elsewhere in data, which
// could spell a key the one-pass read did not recognise (a "con\u0074ent"
// the decoder takes for content, beside a decoy it does not).
func spanIs(data []byte, sp span, decoded string) bool {
	if sp.start <= 0 || sp.escaped || decoded == "" {
		return false
	}
	raw := data[sp.start:sp.end]
	if string(raw) != decoded && (utf8.Valid(raw) || jsonscan.Unescaped(raw) != decoded) {
		return false
	}
	return !bytes.Contains(data[:sp.start], unicodeEscape) && !bytes.Contains(data[sp.end:], unicodeEscape)
}

// argsTemplate reads the argument fragments of one streamed tool call the
// way the text templates read text: the fragments after the first carry only
// the call's index and a piece of its arguments, with the same bytes
// around that piece every time. It learns from a fragment the decoder read
// (learn) and then reads fragments of the same shape without decoding
// them. Not safe for concurrent use.
type argsTemplate struct {
	tpl   jsonscan.Template
	index int
}

// learn remembers the shape of data, a chunk whose decoded form is d: one
// choice, no finish, no usage, no content, and one tool-call delta with an
// index and arguments only, the arguments key appearing once (in any case
// of letters, as the decoder matches it) with a string whose bytes are
// the arguments decoded. Other chunks are not learned from.
func (t *argsTemplate) learn(data []byte, c *chat.Chunk) {
	if c.HasUsage() || len(c.Choices) != 1 || c.FinishReason() != "" {
		return
	}
	d := c.Choices[0].Delta
	if len(d.ToolCalls) != 1 || d.Content != nil || d.ReasoningContent != nil || d.Role != "" {
		return
	}
	td := d.ToolCalls[0]
	if td.ID != "" || td.Type != "" || td.Function.Name != "" {
		return
	}
	j, n := keyValue(data, "arguments")
	if n != 1 || j >= len(data) || data[j] != '"' {
		return
	}
	end, esc := jsonscan.StringEnd(data, j+1)
	if end < 0 || !spanIs(data, span{start: j + 1, end: end, escaped: esc}, td.Function.Arguments) {
		return
	}
	t.tpl.Learn(data, j+1, end)
	t.index = td.Index
}

// keyValue finds the keys of data spelled key (ignoring case, as the
// decoder matches them): how many there are, and where the value of the
// last one starts. A string value is never taken for a key: only a string
// followed by ':' is one.
func keyValue(data []byte, key string) (value, n int) {
	for k := jsonscan.Scan(data); k.Next(); {
		if k.Is(key) {
			n++
			value = k.Value()
		}
	}
	return value, n
}

// read returns the tool-call delta of an argument fragment of the learned
// shape; false means: decode the chunk.
func (t *argsTemplate) read(data []byte) (chat.ToolCallDelta, bool) {
	var td chat.ToolCallDelta
	args, ok := t.tpl.Read(data)
	if !ok {
		return td, false
	}
	// The arguments share the event's bytes, which are the reader's to
	// keep and never change, as the text templates' text does.
	td.Index, td.Function.Arguments = t.index, args
	return td, true
}
