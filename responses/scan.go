package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
)

// chunkFields is what the translation reads of a chat.completion.chunk:
// raw JSON values, strings with their quotes, nil when absent.
type chunkFields struct {
	content, reasoning []byte
	calls              []callDelta
	finish             []byte
	usage              []byte
	estimated          bool
	err                []byte
}

// callDelta is one tool call fragment.
type callDelta struct {
	index          int
	id, name, args []byte
}

var errSyntax = errors.New("malformed JSON")

// scanner walks JSON the gateway itself wrote: chunks the pipeline
// passed on. It reads the few fields a translation needs and skips the
// rest without decoding them. A key it cannot compare as raw bytes (one
// with an escape) sets slow, and the caller decodes with encoding/json.
type scanner struct {
	b    []byte
	i    int
	err  error
	slow bool
	// key is where the key of the member being read starts.
	key int
}

func (s *scanner) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\n' || s.b[s.i] == '\t' || s.b[s.i] == '\r') {
		s.i++
	}
}

func (s *scanner) fail() { s.err, s.i = errSyntax, len(s.b) }

// str reads a string and returns it with its quotes.
func (s *scanner) str() []byte {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		s.fail()
		return nil
	}
	start := s.i
	for s.i++; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '\\':
			s.i++
			if !s.escape() {
				s.fail()
				return nil
			}
		case c == '"':
			s.i++
			return s.b[start:s.i]
		case c < 0x20:
			s.fail()
			return nil
		}
	}
	s.fail()
	return nil
}

// escape checks the escape whose letter is at s.i, leaving s.i on its
// last byte.
func (s *scanner) escape() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return true
	case 'u':
		if s.i+4 >= len(s.b) {
			return false
		}
		for _, c := range s.b[s.i+1 : s.i+5] {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
		s.i += 4
		return true
	}
	return false
}

// value skips any value and returns it raw.
func (s *scanner) value() []byte {
	s.ws()
	if s.i >= len(s.b) {
		s.fail()
		return nil
	}
	start := s.i
	switch s.b[s.i] {
	case '"':
		return s.str()
	case '{':
		s.object(func([]byte) { s.value() })
	case '[':
		s.array(func() { s.value() })
	default:
		for s.i < len(s.b) && bytes.IndexByte([]byte(",]} \n\t\r"), s.b[s.i]) < 0 {
			s.i++
		}
		if lit := s.b[start:s.i]; string(lit) != "null" && string(lit) != "true" && string(lit) != "false" && !number(lit) {
			s.fail()
		}
	}
	if s.err != nil {
		return nil
	}
	return s.b[start:s.i]
}

// number reports whether b is a JSON number.
func number(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i, n = i+1, n+1
		}
		return n
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(b)
}

// object reads an object, calling field with each key (raw, without
// quotes); field must read the key's value.
func (s *scanner) object(field func(key []byte)) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		s.fail()
		return
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return
	}
	s.members(field)
}

// members reads the members of an object from s.i, where a key starts,
// to its closing brace.
func (s *scanner) members(field func(key []byte)) {
	for s.err == nil {
		s.key = s.i
		k := s.str()
		s.ws()
		if s.err != nil || s.i >= len(s.b) || s.b[s.i] != ':' {
			s.fail()
			return
		}
		s.i++
		key := k[1 : len(k)-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			s.slow = true
		}
		field(key)
		if !s.next('}') {
			return
		}
		s.ws()
	}
}

// array reads an array, calling elem for each element.
func (s *scanner) array(elem func()) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '[' {
		s.fail()
		return
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return
	}
	for s.err == nil {
		elem()
		if !s.next(']') {
			return
		}
	}
}

// next reads a comma (true: more follow) or the closing byte.
func (s *scanner) next(closing byte) bool {
	s.ws()
	switch {
	case s.err != nil || s.i >= len(s.b):
		s.fail()
	case s.b[s.i] == ',':
		s.i++
		return true
	case s.b[s.i] == closing:
		s.i++
	default:
		s.fail()
	}
	return false
}

// skip skips the value of a key the caller does not read. encoding/json
// matches keys without regard to case: a key that is one of known in
// another case is left to it.
func (s *scanner) skip(key []byte, known ...string) {
	for _, k := range known {
		if bytes.EqualFold(key, []byte(k)) {
			s.slow = true
		}
	}
	s.value()
}

// scanChunk reads the fields of a chunk, with encoding/json when the
// chunk holds what the scanner does not compare. head is what the
// members before "choices" were in the chunk of the stream that learned
// it: chunks of one stream repeat them (id, object, created, model), so a
// chunk that starts with the same bytes is read from "choices" on. It is
// learned when empty.
func scanChunk(data []byte, head *[]byte) (chunkFields, error) {
	var f chunkFields
	s := &scanner{b: data}
	learn := head != nil && len(*head) == 0
	fields := func(key []byte) {
		switch string(key) {
		case "choices":
			if learn && !s.slow {
				*head = bytes.Clone(data[:s.key])
			}
			f.choices(s)
		case "usage":
			f.usage = s.value()
		case "error":
			f.err = s.value()
		case "phasegate":
			f.phasegate(s)
		default:
			s.skip(key, "choices", "usage", "error", "phasegate")
			return
		}
		learn = false
	}
	if head != nil && len(*head) > 0 && bytes.HasPrefix(data, *head) {
		s.i = len(*head)
		s.members(fields)
	} else {
		s.object(fields)
	}
	if s.err == nil {
		s.ws()
		if s.i != len(s.b) {
			s.fail()
		}
	}
	if s.err != nil || s.slow {
		return decodeChunk(data)
	}
	return f, nil
}

// choices reads the choices, the first one only.
func (f *chunkFields) choices(s *scanner) {
	if f.calls != nil || f.content != nil || f.reasoning != nil || f.finish != nil {
		s.slow = true // a second choices: encoding/json keeps the last
	}
	first := true
	s.array(func() {
		if !first {
			s.value()
			return
		}
		first = false
		s.object(func(key []byte) { f.choice(s, key) })
	})
}

// phasegate reads the gateway's own member.
func (f *chunkFields) phasegate(s *scanner) {
	s.object(func(key []byte) {
		if string(key) != "usage_estimated" {
			s.skip(key, "usage_estimated")
			return
		}
		v := s.value()
		if string(v) != "true" && string(v) != "false" && string(v) != "null" {
			s.slow = true
		}
		f.estimated = string(v) == "true"
	})
}

// choice reads one field of the first choice.
func (f *chunkFields) choice(s *scanner, key []byte) {
	switch string(key) {
	case "delta":
		s.object(func(key []byte) {
			switch string(key) {
			case "content":
				f.content = s.value()
			case "reasoning_content":
				f.reasoning = s.value()
			case "tool_calls":
				s.array(func() { f.calls = append(f.calls, scanCall(s)) })
			default:
				s.skip(key, "content", "reasoning_content", "tool_calls")
			}
		})
	case "finish_reason":
		f.finish = s.value()
	default:
		s.skip(key, "delta", "finish_reason")
	}
}

func scanCall(s *scanner) callDelta {
	var c callDelta
	s.object(func(key []byte) {
		switch string(key) {
		case "index":
			n, err := strconv.Atoi(string(s.value()))
			if err != nil {
				s.slow = true
			}
			c.index = n
		case "id":
			c.id = s.value()
		case "function":
			s.object(func(key []byte) {
				switch string(key) {
				case "name":
					c.name = s.value()
				case "arguments":
					c.args = s.value()
				default:
					s.skip(key, "name", "arguments")
				}
			})
		default:
			s.skip(key, "index", "id", "function")
		}
	})
	return c
}

// decodeChunk reads the fields of a chunk with encoding/json: the way
// for chunks the scanner leaves, and the reference it is fuzzed against.
func decodeChunk(data []byte) (chunkFields, error) {
	var c chunkView
	if err := json.Unmarshal(data, &c); err != nil {
		return chunkFields{}, err
	}
	f := chunkFields{usage: c.Usage, err: c.Error, estimated: c.Phasegate != nil && c.Phasegate.UsageEstimated}
	if len(c.Choices) > 0 {
		ch := &c.Choices[0]
		f.content, f.reasoning, f.finish = ch.Delta.Content, ch.Delta.ReasoningContent, ch.FinishReason
		for _, tc := range ch.Delta.ToolCalls {
			f.calls = append(f.calls, callDelta{index: tc.Index, id: tc.ID, name: tc.Function.Name, args: tc.Function.Arguments})
		}
	}
	return f, nil
}
