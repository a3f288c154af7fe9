package protocol

import (
	"bytes"
	"encoding/json"
	"unsafe"

	"github.com/phasegate/phasegate/protocol/chat"
)

// textChunk reads a chunk in one pass without decoding it, for the guard's
// hot path. It reports ok when the chunk surely carries no tool call, no
// usage and no finish reason (each absent or null), and its content, if
// any, is a string or null; content is that string. A chunk without a
// "choices" key is not ok. Keys are recognised
// only as keys: every string is skipped whole, so text inside a value can
// never pass for one. Anything unusual (a key "content" whose value is not
// a string, as in logprobs) reports false, which only sends the chunk down
// the decoding path.
//
// The content of a chunk without escapes is returned without a copy: it
// shares data's memory, which the guard never writes to.
func textChunk(data []byte) (content string, ok bool) {
	content, _, _, _, ok = textChunkSpan(data)
	return content, ok
}

// textChunkSpan is textChunk, also giving where the content string's body
// lies in data (between its quotes; start is -1 when the content is not a
// string) and the length of the reasoning_content string as written.
func textChunkSpan(data []byte) (content string, start, end, reasoning int, ok bool) {
	start, end = -1, -1
	i := 0
	choices := false
	for {
		q := bytes.IndexByte(data[i:], '"')
		if q < 0 {
			// A chunk has choices; an object without them (an error
			// object, say) is not read here.
			return content, start, end, reasoning, choices
		}
		ks := i + q + 1 // a string: a key, or a value to skip
		ke, _ := stringEnd(data, ks)
		if ke < 0 {
			return "", -1, -1, 0, false
		}
		j := skipSpace(data, ke+1)
		if j >= len(data) || data[j] != ':' {
			i = ke + 1 // a string value
			continue
		}
		j = skipSpace(data, j+1)
		// Keys match as encoding/json matches them, ignoring case, so no
		// spelling the decoder would take for a tool call slips past.
		switch key := data[ks:ke]; {
		case bytes.EqualFold(key, keyChoices):
			choices = true
		case bytes.EqualFold(key, keyToolCalls), bytes.EqualFold(key, keyUsage), bytes.EqualFold(key, keyFinishReason):
			if !bytes.HasPrefix(data[j:], null) {
				return "", -1, -1, 0, false
			}
		case bytes.EqualFold(key, keyReasoning):
			if j < len(data) && data[j] == '"' {
				if rend, _ := stringEnd(data, j+1); rend > j {
					reasoning = rend - j - 1
					i = rend + 1
					continue
				}
			}
		case bytes.EqualFold(key, keyContent):
			switch {
			case bytes.HasPrefix(data[j:], null):
				content, start, end = "", -1, -1
			case j < len(data) && data[j] == '"':
				vend, vesc := stringEnd(data, j+1)
				if vend < 0 {
					return "", -1, -1, 0, false
				}
				start, end = j+1, vend
				switch {
				case vesc:
					// Its own variable: taking content's address would
					// move it to the heap on every call.
					var unquoted string
					if json.Unmarshal(data[j:vend+1], &unquoted) != nil {
						return "", -1, -1, 0, false
					}
					content = unquoted
				case vend > j+1:
					content = unsafe.String(&data[j+1], vend-j-1)
				default:
					content = ""
				}
				i = vend + 1
				continue
			default:
				return "", -1, -1, 0, false
			}
		}
		// A key spelled with escapes is compared as written: none of the
		// keys above needs one, and a miss only costs a decode.
		i = j
	}
}

var (
	null            = []byte("null")
	keyToolCalls    = []byte("tool_calls")
	keyUsage        = []byte("usage")
	keyFinishReason = []byte("finish_reason")
	keyContent      = []byte("content")
	keyChoices      = []byte("choices")
	keyReasoning    = []byte("reasoning_content")
)

// stringEnd returns the index of the quote that closes the JSON string
// whose first byte is at start, and whether the string holds an escape;
// -1 when it does not close.
func stringEnd(data []byte, start int) (int, bool) {
	escaped := false
	for pos := start; ; {
		k := bytes.IndexByte(data[pos:], '"')
		if k < 0 {
			return -1, false
		}
		end := pos + k
		// The quote is escaped when an odd run of backslashes precedes it.
		n := 0
		for b := end - 1; b >= start && data[b] == '\\'; b-- {
			n++
		}
		if n > 0 || !escaped && bytes.IndexByte(data[start:end], '\\') >= 0 {
			escaped = true
		}
		if n%2 == 0 {
			return end, escaped
		}
		pos = end + 1
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// textTemplate reads the plain text chunks of one upstream answer faster
// than textChunk: upstreams send every text chunk of an answer with the
// same bytes around the content string (id, model, created, the null
// finish reason), so once one chunk was read whole, a chunk with the same
// prefix and suffix, and nothing between them that could end the string,
// differs from it only in its content. Not safe for concurrent use.
type textTemplate struct {
	prefix, suffix []byte // around the content string's body, quotes included
}

// read returns the content of a plain text chunk, as textChunk, and the
// length of its reasoning_content.
func (t *textTemplate) read(data []byte) (string, int, bool) {
	if t.prefix != nil && len(data) >= len(t.prefix)+len(t.suffix) &&
		bytes.HasPrefix(data, t.prefix) && bytes.HasSuffix(data, t.suffix) {
		mid := data[len(t.prefix) : len(data)-len(t.suffix)]
		switch {
		case bytes.IndexByte(mid, '"') < 0 && bytes.IndexByte(mid, '\\') < 0 && !hasControl(mid):
			if len(mid) == 0 {
				return "", 0, true
			}
			return unsafe.String(&mid[0], len(mid)), 0, true
		default:
			// Escapes: the string must still end exactly at the suffix.
			if end, _ := stringEnd(data, len(t.prefix)); end == len(data)-len(t.suffix) {
				var unquoted string
				if json.Unmarshal(data[len(t.prefix)-1:end+1], &unquoted) == nil {
					return unquoted, 0, true
				}
			}
		}
	}
	content, start, end, reasoning, ok := textChunkSpan(data)
	// The one-pass read recognises keys, not JSON: a chunk it reads must
	// also be JSON before it may be forwarded as it is, or learned from.
	ok = ok && json.Valid(data)
	if ok && start > 0 && reasoning == 0 {
		t.prefix, t.suffix = data[:start], data[end:]
	}
	return content, reasoning, ok
}

var argumentsKey = []byte(`"arguments":`)

// argsTemplate reads the argument fragments of one streamed tool call the
// way textTemplate reads text: the fragments after the first carry only
// the call's index and a piece of its arguments, with the same bytes
// around that piece every time. It learns from a fragment the decoder read
// (learn) and then reads fragments of the same shape without decoding
// them. Not safe for concurrent use.
type argsTemplate struct {
	prefix, suffix []byte // around the arguments string's body, quotes included
	index          int
}

// learn remembers the shape of data, a chunk whose decoded form is d: one
// choice, no finish, no usage, no content, and one tool-call delta with an
// index and arguments only. Other chunks are not learned from.
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
	// The key cannot occur unescaped inside a string value, so a single
	// occurrence is the one key.
	i := bytes.Index(data, argumentsKey)
	if i < 0 || bytes.Index(data[i+len(argumentsKey):], argumentsKey) >= 0 {
		return
	}
	j := skipSpace(data, i+len(argumentsKey))
	if j >= len(data) || data[j] != '"' {
		return
	}
	end, _ := stringEnd(data, j+1)
	if end < 0 {
		return
	}
	t.prefix, t.suffix, t.index = data[:j+1], data[end:], td.Index
}

// read returns the tool-call delta of an argument fragment of the learned
// shape; false means: decode the chunk.
func (t *argsTemplate) read(data []byte) (chat.ToolCallDelta, bool) {
	var td chat.ToolCallDelta
	if t.prefix == nil || len(data) < len(t.prefix)+len(t.suffix) ||
		!bytes.HasPrefix(data, t.prefix) || !bytes.HasSuffix(data, t.suffix) {
		return td, false
	}
	// The arguments string must end exactly where the suffix starts.
	end, escaped := stringEnd(data, len(t.prefix))
	if end != len(data)-len(t.suffix) {
		return td, false
	}
	td.Index = t.index
	mid := data[len(t.prefix):end]
	for _, b := range mid {
		if b < 0x20 {
			return td, false // not valid JSON: the decoder says what is wrong
		}
	}
	if !escaped {
		td.Function.Arguments = string(mid)
		return td, true
	}
	var args string
	if json.Unmarshal(data[len(t.prefix)-1:end+1], &args) != nil {
		return td, false
	}
	td.Function.Arguments = args
	return td, true
}

// hasControl reports a byte JSON forbids unescaped inside a string.
func hasControl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}
