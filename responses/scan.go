package responses

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/phasegate/phasegate/internal/jsonscan"
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

// chunkScan walks JSON the gateway itself wrote: chunks the pipeline
// passed on. It reads the few fields a translation needs and skips the
// rest without decoding them. What it cannot read as encoding/json would
// (a key with an escape, a known key in another case, a field given
// twice) sets slow, and the caller decodes with encoding/json.
type chunkScan struct {
	jsonscan.Walker
	slow bool
}

// leaves reports whether the chunk is left to encoding/json.
func (s *chunkScan) leaves() bool { return s.slow || s.EscapedKey() }

// skip skips the value of a key the caller does not read. encoding/json
// matches keys without regard to case: a key that is one of known in
// another case is left to it.
func (s *chunkScan) skip(key []byte, known ...string) {
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

// scanChunk reads the fields of a chunk, with encoding/json when the
// chunk holds what the scanner does not compare. head is what the
// members before "choices" were in the chunk of the stream that learned
// it: chunks of one stream repeat them (id, object, created, model), so a
// chunk that starts with the same bytes is read from "choices" on. It is
// learned when empty.
func scanChunk(data []byte, head *[]byte) (chunkFields, error) {
	var f chunkFields
	s := &chunkScan{Walker: jsonscan.Walk(data)}
	learn := head != nil && len(*head) == 0
	fields := func(key []byte) {
		switch string(key) {
		case "choices":
			if learn && !s.leaves() {
				*head = bytes.Clone(data[:s.MemberStart()])
			}
			f.choices(s)
		case "usage":
			f.usage = s.Value()
		case "error":
			f.err = s.Value()
		case "phasegate":
			f.phasegate(s)
		default:
			s.skip(key, "choices", "usage", "error", "phasegate")
			return
		}
		learn = false
	}
	if head != nil && len(*head) > 0 && bytes.HasPrefix(data, *head) {
		s.Members(len(*head), fields)
	} else {
		s.Object(fields)
	}
	s.End()
	if s.Err() != nil || s.leaves() {
		return decodeChunk(data)
	}
	return f, nil
}

// choices reads the choices, the first one only.
func (f *chunkFields) choices(s *chunkScan) {
	if f.calls != nil || f.content != nil || f.reasoning != nil || f.finish != nil {
		s.slow = true // a second choices: encoding/json keeps the last
	}
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

// phasegate reads the gateway's own member.
func (f *chunkFields) phasegate(s *chunkScan) {
	s.Object(func(key []byte) {
		if string(key) != "usage_estimated" {
			s.skip(key, "usage_estimated")
			return
		}
		// null leaves the value as it was, as encoding/json does.
		switch v := s.Value(); string(v) {
		case "true", "false":
			f.estimated = string(v) == "true"
		case "null":
		default:
			s.slow = true
		}
	})
}

// choice reads one field of the first choice.
func (f *chunkFields) choice(s *chunkScan, key []byte) {
	switch string(key) {
	case "delta":
		s.Object(func(key []byte) {
			switch string(key) {
			case "content":
				f.content = s.Value()
			case "reasoning_content":
				f.reasoning = s.Value()
			case "tool_calls":
				s.Array(func() { f.calls = append(f.calls, scanCall(s)) })
			default:
				s.skip(key, "content", "reasoning_content", "tool_calls")
			}
		})
	case "finish_reason":
		f.finish = s.Value()
	default:
		s.skip(key, "delta", "finish_reason")
	}
}

func scanCall(s *chunkScan) callDelta {
	var c callDelta
	s.Object(func(key []byte) {
		switch string(key) {
		case "index":
			n, err := strconv.Atoi(string(s.Value()))
			if err != nil {
				s.slow = true
			}
			c.index = n
		case "id":
			c.id = s.Value()
		case "function":
			s.Object(func(key []byte) {
				switch string(key) {
				case "name":
					c.name = s.Value()
				case "arguments":
					c.args = s.Value()
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
	f := chunkFields{usage: c.Usage, err: c.Error, estimated: c.Phasegate.estimated()}
	if len(c.Choices) > 0 {
		ch := &c.Choices[0]
		f.content, f.reasoning, f.finish = ch.Delta.Content, ch.Delta.ReasoningContent, ch.FinishReason
		for _, tc := range ch.Delta.ToolCalls {
			f.calls = append(f.calls, callDelta{index: tc.Index, id: tc.ID, name: tc.Function.Name, args: tc.Function.Arguments})
		}
	}
	return f, nil
}

// extensionEstimated reads usage_estimated from ext, the gateway's
// extension of a chunk, as it would be read from the chunk with ext added
// as its last phasegate member: ext's value when it has one, else
// estimated, what the chunk itself said.
func extensionEstimated(ext []byte, estimated bool) (bool, error) {
	var f chunkFields
	f.estimated = estimated
	s := &chunkScan{Walker: jsonscan.Walk(ext)}
	f.phasegate(s)
	s.End()
	if s.Err() == nil && !s.leaves() {
		return f.estimated, nil
	}
	g := gatewayView{UsageEstimated: estimated}
	if err := json.Unmarshal(ext, &g); err != nil {
		return estimated, err
	}
	return g.UsageEstimated, nil
}
