package jsonscan

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Counted names a top-level array of a JSON object whose elements Count
// counts, and the most it may hold.
type Counted struct {
	// Name is the member's name, matched as the decoder that reads the
	// body afterwards matches it: exactly (a decoder into a map), or, with
	// FoldCase, as encoding/json matches a struct field's name (Unicode
	// case folding: "Tools" and "toolſ" are "tools"). An escaped spelling
	// ("messag\u0065s") names the member it decodes to.
	Name     string
	FoldCase bool
	Max      int
}

// DepthError is Count's answer to JSON that nests objects and arrays
// deeper than its bound.
type DepthError struct{ Max int }

func (e *DepthError) Error() string {
	return fmt.Sprintf("JSON nests objects and arrays more than %d deep", e.Max)
}

// CountError is Count's answer to a counted array with more elements than
// its Max. Count is how many it has: the scan goes on to the array's end.
type CountError struct {
	Name       string
	Count, Max int
}

func (e *CountError) Error() string {
	return fmt.Sprintf("array %q has %d elements, more than %d", e.Name, e.Count, e.Max)
}

// Count checks, in one pass over body and before anything is decoded,
// what decoding would otherwise pay for first: the nesting depth of
// objects and arrays (encoding/json recurses that deep; maxDepth, 0 for
// no bound), and the elements of the top-level arrays named in arrays (a
// decoder builds every one of them, about 16 times the bytes of 500,000
// tiny ones, before their number could be looked at). It answers a
// *DepthError, a *CountError for the first array over its Max, or nil.
//
// Count does not validate: on JSON that is not valid it answers what the
// same walk finds, and the decoder that follows reports the syntax. Each
// array is counted as written, a member given twice counted twice.
func Count(body []byte, maxDepth int, arrays ...Counted) error {
	s := countScan{arrays: arrays}
	for i := 0; i < len(body); i++ {
		c := body[i]
		if s.depth == 2 && s.counting != nil {
			switch c {
			case ',':
				s.commas++
			case ' ', '\t', '\r', '\n', ']':
			default:
				s.nonEmpty = true
			}
		}
		switch c {
		case '"':
			end := StringClose(body, i+1)
			if end < 0 {
				end = len(body) // it does not close: nothing more nests
			}
			if s.depth == 1 {
				s.key = body[i+1 : end] // a key, or a value no array follows
			}
			i = end
		case '{', '[':
			if s.depth++; maxDepth > 0 && s.depth > maxDepth {
				return &DepthError{Max: maxDepth}
			}
			if s.depth == 2 && c == '[' {
				s.counting, s.commas, s.nonEmpty = s.named(s.key), 0, false
			}
		case '}', ']':
			if s.depth == 2 && s.counting != nil {
				if err := s.counted(); err != nil {
					return err
				}
			}
			s.depth--
		}
	}
	return nil
}

// countScan is the state of Count: its depth, and the top-level array
// whose elements it counts.
type countScan struct {
	arrays   []Counted
	depth    int
	key      []byte   // the last string closed at depth 1
	counting *Counted // the array at depth 2, nil when it is not counted
	commas   int
	nonEmpty bool
}

// counted checks the count of the array just closed.
func (s *countScan) counted() error {
	n := s.commas
	if s.nonEmpty {
		n++
	}
	a := s.counting
	s.counting = nil
	if n > a.Max {
		return &CountError{Name: a.Name, Count: n, Max: a.Max}
	}
	return nil
}

// named returns the array of s.arrays the member whose key is raw (as
// written, without its quotes) names, or nil. A key with escapes, or not
// UTF-8, is decoded first, as the decoder would read it.
func (s *countScan) named(raw []byte) *Counted {
	name, ok := string(raw), true
	if strings.IndexByte(name, '\\') >= 0 || !utf8.ValidString(name) {
		name, ok = unquote(raw)
	}
	for i := range s.arrays {
		a := &s.arrays[i]
		if ok && (name == a.Name || a.FoldCase && strings.EqualFold(name, a.Name)) {
			return a
		}
	}
	return nil
}

// unquote decodes the body of a JSON string that holds escapes.
func unquote(raw []byte) (string, bool) {
	var name string
	err := json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &name)
	return name, err == nil
}
