// Package chunkscan reads, from the data of one chat.completion.chunk,
// the fields a front door translates into its own wire (the first
// choice's text, reasoning and tool-call fragments, its finish reason,
// the usage, an in-band error) without decoding the rest. It walks the
// bytes once with jsonscan.Walker; what the walk cannot read as
// encoding/json would (a key with an escape, a known key spelt in another
// case, a member given twice) it leaves to encoding/json, so a Scanner
// and Decode always agree on what they both read. Its fuzz test compares
// the two. Every door that translates chunks reads them here.
package chunkscan

import (
	"bytes"
	"strconv"
	"unicode/utf8"

	"github.com/phasegate/phasegate/internal/jsonscan"
)

// Fields is what a door reads of one chunk (or, from DecodeCompletion, of
// one chat.completion). Every []byte is a raw JSON value as the chunk
// wrote it (a string with its quotes), nil when the chunk does not hold
// it.
type Fields struct {
	// ID is the chunk's id.
	ID []byte
	// Content and Reasoning are the first choice's delta.content and
	// delta.reasoning_content.
	Content, Reasoning []byte
	Calls              []Call
	// Finish is the first choice's finish_reason.
	Finish []byte
	// StopReason is the first choice's stop_reason (vLLM) or
	// matched_stop (SGLang): the stop sequence that ended the answer,
	// where the upstream says.
	StopReason []byte
	Usage      []byte
	Error      []byte
	// Estimated is the gateway's own phasegate.usage_estimated.
	Estimated bool
}

// Call is one tool-call fragment of the first choice's delta.
type Call struct {
	Index               int
	ID, Name, Arguments []byte
}

// Scanner reads the chunks of one stream. Chunks of one stream repeat
// the members before "choices" (id, object, created, model): the first
// chunk teaches them (a jsonscan.Head), and a later chunk that starts
// with the same bytes is read from "choices" on. Its zero value is ready;
// it is not safe for concurrent use.
type Scanner struct {
	head jsonscan.Head
	id   []byte
}

// Read reads one chunk's data. An error means data is not a chunk
// encoding/json can decode.
func (sc *Scanner) Read(data []byte) (Fields, error) {
	var f Fields
	s := &walk{Walker: jsonscan.Walk(data)}
	learn := sc.head.Len() == 0
	member := func(key []byte) {
		switch string(key) {
		case "choices":
			if learn && !s.leaves() {
				sc.head.Learn(data, s.MemberStart())
				sc.id = bytes.Clone(f.ID)
			}
			f.choices(s)
		case "id":
			f.ID = s.Value()
			return // the head keeps it
		case "usage":
			f.Usage = s.Value()
		case "error":
			f.Error = s.Value()
		case "phasegate":
			f.phasegate(s)
		default:
			s.skip(key, "choices", "id", "usage", "error", "phasegate")
			return
		}
		learn = false // a head holds no member a chunk is read for
	}
	if n := sc.head.Of(data); n > 0 {
		f.ID = sc.id
		s.Members(n, member)
	} else {
		s.Object(member)
	}
	s.End()
	if s.Err() != nil || s.leaves() {
		return Decode(data)
	}
	return f, nil
}

// walk is a Walker that notes what it leaves to encoding/json.
type walk struct {
	jsonscan.Walker
	slow bool
	// seen notes members the decoder would take the last of, where the
	// walk would take both.
	seenChoices, seenCalls bool
}

func (s *walk) leaves() bool { return s.slow || s.EscapedKey() }

// skip skips the value of a key the caller does not read. encoding/json
// matches keys without regard to case: a key that is one of known in
// another case is left to it.
func (s *walk) skip(key []byte, known ...string) {
	for _, k := range known {
		// A key whose first byte is ASCII and not k's first letter in
		// either case is not k in any case; any other is compared whole
		// (a non-ASCII byte may fold to an ASCII letter, as the long s
		// folds to s).
		if len(key) == 0 || key[0] < utf8.RuneSelf && key[0]|0x20 != k[0] {
			continue
		}
		if bytes.EqualFold(key, []byte(k)) {
			s.slow = true
		}
	}
	s.Value()
}

// choices reads the first choice; later ones are skipped.
func (f *Fields) choices(s *walk) {
	if s.seenChoices {
		s.slow = true // encoding/json keeps the last
	}
	s.seenChoices = true
	first := true
	s.Array(func() {
		if !first {
			s.Value()
			return
		}
		first = false
		s.Object(func(key []byte) { f.choice(s, key) })
	})
}

// choice reads one member of the first choice.
func (f *Fields) choice(s *walk, key []byte) {
	switch string(key) {
	case "delta":
		s.Object(func(key []byte) { f.delta(s, key) })
	case "finish_reason":
		f.Finish = s.Value()
	case "stop_reason", "matched_stop":
		if f.StopReason != nil {
			s.slow = true // which one wins is the decoder's to say
		}
		f.StopReason = s.Value()
	default:
		s.skip(key, "delta", "finish_reason", "stop_reason", "matched_stop")
	}
}

func (f *Fields) delta(s *walk, key []byte) {
	switch string(key) {
	case "content":
		f.Content = s.Value()
	case "reasoning_content":
		f.Reasoning = s.Value()
	case "tool_calls":
		if s.seenCalls {
			s.slow = true
		}
		s.seenCalls = true
		s.Array(func() { f.Calls = append(f.Calls, s.call()) })
	default:
		s.skip(key, "content", "reasoning_content", "tool_calls")
	}
}

func (s *walk) call() Call {
	var c Call
	s.Object(func(key []byte) {
		switch string(key) {
		case "index":
			n, err := strconv.Atoi(string(s.Value()))
			if err != nil {
				s.slow = true
			}
			c.Index = n
		case "id":
			c.ID = s.Value()
		case "function":
			s.Object(func(key []byte) {
				switch string(key) {
				case "name":
					c.Name = s.Value()
				case "arguments":
					c.Arguments = s.Value()
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

// phasegate reads the gateway's own member.
func (f *Fields) phasegate(s *walk) {
	s.Object(func(key []byte) {
		if string(key) != "usage_estimated" {
			s.skip(key, "usage_estimated")
			return
		}
		// null leaves the value as it was, as encoding/json does.
		switch v := s.Value(); string(v) {
		case "true", "false":
			f.Estimated = string(v) == "true"
		case "null":
		default:
			s.slow = true
		}
	})
}

// Extension reads usage_estimated from ext, the gateway's extension of a
// chunk, as it would be read from the chunk with ext added as its last
// phasegate member: ext's value when it has one, else estimated, what
// the chunk itself said.
func Extension(ext []byte, estimated bool) (bool, error) {
	f := Fields{Estimated: estimated}
	s := &walk{Walker: jsonscan.Walk(ext)}
	f.phasegate(s)
	s.End()
	if s.Err() == nil && !s.leaves() {
		return f.Estimated, nil
	}
	return decodeExtension(ext, estimated)
}
