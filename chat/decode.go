package chat

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/phasegate/phasegate/internal/jsonscan"
)

// walkChunk reads data into a Chunk in one pass of a jsonscan.Walker,
// without reflection. ok is false for what it leaves to encoding/json,
// which then decides: bytes that are not one JSON object, a key with an
// escape, a known key spelt in another case or given twice in one object
// (the decoder's rules for those are its own), a value of a type the
// field does not take. What it reads, it reads as encoding/json does; a
// fuzz test compares the two.
func walkChunk(data []byte) (Chunk, bool) {
	var c Chunk
	s := &chunkWalk{Walker: jsonscan.Walk(data)}
	if s.Peek() != '{' {
		return Chunk{}, false
	}
	var seen uint8
	s.Object(func(key []byte) {
		switch string(key) {
		case "id":
			s.once(&seen, 1)
			s.str(&c.ID)
		case "object":
			s.once(&seen, 2)
			s.str(&c.Object)
		case "created":
			s.once(&seen, 4)
			s.int64(&c.Created)
		case "model":
			s.once(&seen, 8)
			s.str(&c.Model)
		case "system_fingerprint":
			s.once(&seen, 16)
			s.str(&c.SystemFingerprint)
		case "choices":
			s.once(&seen, 32)
			s.choices(&c)
		case "usage":
			s.once(&seen, 64)
			c.Usage = bytes.Clone(s.Value())
		default:
			s.skip(key, "id", "object", "created", "model", "system_fingerprint", "choices", "usage")
		}
	})
	s.End()
	if s.Err() != nil || s.slow || s.EscapedKey() {
		return Chunk{}, false
	}
	return c, true
}

// chunkWalk is a Walker that notes what it leaves to encoding/json.
type chunkWalk struct {
	jsonscan.Walker
	slow bool
}

// once notes the member bit of an object; a member given twice is left
// to the decoder, which merges objects and keeps the last of the rest.
func (s *chunkWalk) once(seen *uint8, bit uint8) {
	if *seen&bit != 0 {
		s.slow = true
	}
	*seen |= bit
}

// skip skips the value of a key the walk does not read; a key that is
// one of known in another case is left to the decoder, which matches
// keys without regard to case.
func (s *chunkWalk) skip(key []byte, known ...string) {
	for _, k := range known {
		if jsonscan.KeyIs(key, false, k) {
			s.slow = true
		}
	}
	s.Value()
}

// str reads a string into *dst; null leaves it, as the decoder does.
func (s *chunkWalk) str(dst *string) {
	v := s.Value()
	switch {
	case len(v) == 0 || string(v) == "null":
	case v[0] == '"':
		*dst = unquote(v)
	default:
		s.slow = true
	}
}

// strPtr reads a string into a new *dst; null makes it nil.
func (s *chunkWalk) strPtr(dst **string) {
	v := s.Value()
	switch {
	case len(v) == 0:
	case string(v) == "null":
		*dst = nil
	case v[0] == '"':
		str := unquote(v)
		*dst = &str
	default:
		s.slow = true
	}
}

// unquote returns the string a JSON string literal holds: its body as it
// is when plain, else as encoding/json reads it (escapes, and invalid
// UTF-8 made replacement characters).
func unquote(v []byte) string {
	body := v[1 : len(v)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		return string(body)
	}
	var str string
	_ = json.Unmarshal(v, &str) // a string the walk validated
	return str
}

// int64 reads an integer into *dst; null leaves it.
func (s *chunkWalk) int64(dst *int64) {
	v := s.Value()
	if len(v) == 0 || string(v) == "null" {
		return
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		s.slow = true // a fraction, an exponent, a string: the decoder's error
	}
	*dst = n
}

// int reads an int as int64 does.
func (s *chunkWalk) int(dst *int) {
	n := int64(*dst)
	s.int64(&n)
	*dst = int(n)
}

// object reads an object with member; null leaves it.
func (s *chunkWalk) object(member func(key []byte)) {
	switch s.Peek() {
	case '{':
		s.Object(member)
	case 'n':
		s.Value()
	default:
		s.slow = true
		s.Value()
	}
}

// array reads an array with elem, into a slice made empty (not nil) at
// its start; null makes it nil, as the decoder does.
func (s *chunkWalk) array(start func(), null func(), elem func()) {
	switch s.Peek() {
	case '[':
		start()
		s.Array(elem)
	case 'n':
		s.Value()
		null()
	default:
		s.slow = true
		s.Value()
	}
}

// choices reads a chunk's choices.
func (s *chunkWalk) choices(c *Chunk) {
	s.array(func() { c.Choices = []ChunkChoice{} }, func() { c.Choices = nil }, func() {
		c.Choices = append(c.Choices, ChunkChoice{})
		ch := &c.Choices[len(c.Choices)-1]
		var seen uint8
		s.object(func(key []byte) {
			switch string(key) {
			case "index":
				s.once(&seen, 1)
				s.int(&ch.Index)
			case "delta":
				s.once(&seen, 2)
				var dseen uint8
				s.object(func(key []byte) { s.delta(&ch.Delta, key, &dseen) })
			case "finish_reason":
				s.once(&seen, 4)
				s.strPtr(&ch.FinishReason)
			default:
				s.skip(key, "index", "delta", "finish_reason")
			}
		})
	})
}

// delta reads one member of a choice's delta, whose members read so far
// are seen.
func (s *chunkWalk) delta(d *Delta, key []byte, seen *uint8) {
	switch string(key) {
	case "role":
		s.once(seen, 1)
		s.str(&d.Role)
	case "content":
		s.once(seen, 2)
		s.strPtr(&d.Content)
	case "reasoning_content":
		s.once(seen, 4)
		s.strPtr(&d.ReasoningContent)
	case "tool_calls":
		s.once(seen, 8)
		s.array(func() { d.ToolCalls = []ToolCallDelta{} }, func() { d.ToolCalls = nil }, func() {
			d.ToolCalls = append(d.ToolCalls, ToolCallDelta{})
			s.call(&d.ToolCalls[len(d.ToolCalls)-1])
		})
	default:
		s.skip(key, "role", "content", "reasoning_content", "tool_calls")
	}
}

// call reads one tool-call fragment.
func (s *chunkWalk) call(td *ToolCallDelta) {
	var seen uint8
	s.object(func(key []byte) {
		switch string(key) {
		case "index":
			s.once(&seen, 1)
			s.int(&td.Index)
		case "id":
			s.once(&seen, 2)
			s.str(&td.ID)
		case "type":
			s.once(&seen, 4)
			s.str(&td.Type)
		case "function":
			s.once(&seen, 8)
			var fseen uint8
			s.object(func(key []byte) {
				switch string(key) {
				case "name":
					s.once(&fseen, 1)
					s.str(&td.Function.Name)
				case "arguments":
					s.once(&fseen, 2)
					s.str(&td.Function.Arguments)
				default:
					s.skip(key, "name", "arguments")
				}
			})
		default:
			s.skip(key, "index", "id", "type", "function")
		}
	})
}
