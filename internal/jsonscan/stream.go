package jsonscan

import (
	"encoding/json"
	"strings"
)

// Stream tells, incrementally, whether a growing buffer holds one complete
// JSON value. It tracks only what decides where a value ends (whether it
// is inside a string, the container depth) over the newly appended bytes,
// so feeding n bytes in any fragmentation costs O(n), not the O(n²) of
// re-validating the buffer per fragment; json.Valid runs once, when the
// top-level value closes, to confirm it. A top-level number, true, false
// or null never closes here: only the end of the stream tells where it
// ends. The zero Stream is ready.
type Stream struct {
	state    streamState
	depth    int
	inString bool
	// valid is json.Valid of the buffer when the value closed.
	valid bool
}

type streamState uint8

const (
	streamBefore   streamState = iota // only whitespace so far
	streamValue                       // inside a container or top-level string
	streamScalar                      // a top-level scalar: never closes
	streamClosed                      // the value closed; whitespace may follow
	streamTrailing                    // non-whitespace followed the closed value
)

// Feed reads buf[start:], the bytes appended since the last Feed; buf is
// the whole buffer, of which buf[:start] was fed before.
func (s *Stream) Feed(buf string, start int) {
	for i := start; i < len(buf); i++ {
		c := buf[i]
		switch s.state {
		case streamBefore:
			switch c {
			case ' ', '\t', '\n', '\r':
			case '{', '[':
				s.state, s.depth = streamValue, 1
			case '"':
				s.state, s.inString = streamValue, true
			default:
				s.state = streamScalar
				return
			}
		case streamValue:
			i = s.inValue(buf, i)
		case streamClosed:
			if !isSpace(c) {
				s.state = streamTrailing
				return
			}
		default: // streamScalar, streamTrailing: nothing more to learn
			return
		}
	}
}

// inValue reads buf[i] inside the value and returns the index of the last
// byte it read.
func (s *Stream) inValue(buf string, i int) int {
	if s.inString {
		// Only a quote matters inside a string, and it ends the string
		// unless an odd run of backslashes escapes it. The run is counted
		// in the whole buffer, so a fragment may end anywhere in it;
		// IndexByte skips the rest quickly.
		j := strings.IndexByte(buf[i:], '"')
		if j < 0 {
			return len(buf)
		}
		i += j
		if escapedAt(buf, i) {
			return i
		}
		s.inString = false
		if s.depth == 0 {
			s.close(buf[:i+1])
		}
		return i
	}
	switch buf[i] {
	case '"':
		s.inString = true
	case '{', '[':
		s.depth++
	case '}', ']':
		s.depth--
		if s.depth == 0 {
			s.close(buf[:i+1])
		}
	}
	return i
}

// escapedAt reports whether the quote at buf[i], inside a string, is
// escaped: preceded by an odd number of backslashes. The string's opening
// quote bounds the run.
func escapedAt(buf string, i int) bool {
	n := 0
	for i--; i >= 0 && buf[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

func (s *Stream) close(value string) {
	s.state = streamClosed
	s.valid = json.Valid([]byte(value))
}

// Complete reports whether the buffer fed so far is one complete, valid
// JSON object, array or string, whitespace around it aside.
func (s *Stream) Complete() bool {
	return s.state == streamClosed && s.valid
}
