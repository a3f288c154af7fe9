package jsonscan

import (
	"bytes"
	"errors"
)

// ErrSyntax is a Walker's error on bytes that are not one JSON value.
var ErrSyntax = errors.New("malformed JSON")

// maxDepth is encoding/json's nesting limit: json.Valid refuses deeper
// values, and so does a Walker.
const maxDepth = 10000

// Walker reads one JSON value and validates it as it goes, in one pass
// and without decoding: it accepts exactly what json.Valid accepts. The
// caller drives it. Object calls a function with the key of each member,
// and that function reads the member's value: Value takes it raw, Object
// or Array goes inside it. Array calls a function that reads each
// element. End checks that nothing but whitespace follows the value.
//
// A malformed byte sets Err and moves the walk to the end of data, so
// every later call returns at once; the caller checks Err once, after
// End, and ignores what it read when it is set.
//
// Keys are given as written between their quotes. A key with an escape
// cannot be compared as raw bytes; the walk notes it (EscapedKey), and a
// caller that compares keys leaves such data to encoding/json. Matching
// keys without regard to case, as the decoder does, is the caller's
// concern (KeyIs).
type Walker struct {
	data       []byte
	i          int
	err        error
	depth      int
	escapedKey bool
	member     int
}

// Walk returns a walk over data, at its first byte.
func Walk(data []byte) Walker { return Walker{data: data} }

// Err returns ErrSyntax once the walk has met a malformed byte.
func (w *Walker) Err() error { return w.err }

// EscapedKey reports whether a key walked so far holds an escape.
func (w *Walker) EscapedKey() bool { return w.escapedKey }

// MemberStart returns the index of the opening quote of the key of the
// member Object is reading.
func (w *Walker) MemberStart() int { return w.member }

// Peek returns the first byte of the value the walk is at, whitespace
// skipped, or 0 at the end of data or after an error: a caller that
// takes any value looks to choose between Object, Array and Value.
func (w *Walker) Peek() byte {
	w.ws()
	if w.i >= len(w.data) {
		return 0
	}
	return w.data[w.i]
}

// End checks that only whitespace follows the value walked.
func (w *Walker) End() {
	if w.ws(); w.i != len(w.data) {
		w.fail()
	}
}

func (w *Walker) ws() {
	for w.i < len(w.data) && isSpace(w.data[w.i]) {
		w.i++
	}
}

func (w *Walker) fail() { w.err, w.i = ErrSyntax, len(w.data) }

// Value reads any value and returns it raw (a string with its quotes),
// or nil on an error. The value shares the walked bytes, and its capacity
// ends where it ends, so an append to it never writes into them (the
// walked bytes may be an upstream event's, which no reader writes).
func (w *Walker) Value() []byte {
	w.ws()
	if w.i >= len(w.data) {
		w.fail()
		return nil
	}
	start := w.i
	switch w.data[w.i] {
	case '"':
		return w.str()
	case '{':
		w.Object(func([]byte) { w.Value() })
	case '[':
		w.Array(func() { w.Value() })
	default:
		w.literal()
	}
	if w.err != nil {
		return nil
	}
	return w.data[start:w.i:w.i]
}

// literal reads a number, true, false or null.
func (w *Walker) literal() {
	start := w.i
	for w.i < len(w.data) && !isSpace(w.data[w.i]) && w.data[w.i] != ',' && w.data[w.i] != ']' && w.data[w.i] != '}' {
		w.i++
	}
	switch lit := w.data[start:w.i]; string(lit) {
	case "null", "true", "false":
	default:
		if !isNumber(lit) {
			w.fail()
		}
	}
}

// str reads a string and returns it with its quotes, its capacity
// ending with it (see Value).
func (w *Walker) str() []byte {
	w.ws()
	if w.i >= len(w.data) || w.data[w.i] != '"' {
		w.fail()
		return nil
	}
	start := w.i
	for w.i++; w.i < len(w.data); w.i++ {
		switch c := w.data[w.i]; {
		case c == '\\':
			w.i++
			if !w.escape() {
				w.fail()
				return nil
			}
		case c == '"':
			w.i++
			return w.data[start:w.i:w.i]
		case c < 0x20:
			w.fail()
			return nil
		}
	}
	w.fail()
	return nil
}

// escape checks the escape whose letter is at w.i, leaving w.i on its
// last byte.
func (w *Walker) escape() bool {
	if w.i >= len(w.data) {
		return false
	}
	switch w.data[w.i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return true
	case 'u':
		if w.i+4 >= len(w.data) {
			return false
		}
		for _, c := range w.data[w.i+1 : w.i+5] {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
		w.i += 4
		return true
	}
	return false
}

// isNumber reports whether b is a JSON number.
func isNumber(b []byte) bool {
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

// Object reads an object, calling member with each key as written
// between its quotes; member must read the key's value.
func (w *Walker) Object(member func(key []byte)) {
	if w.open('{') {
		w.members(member)
	}
}

// Members reads the rest of an object from data[at], where the key of a
// member starts, to its closing brace, calling member as Object does. It
// is for data whose first at bytes the caller knows to be an object's
// opening and whole members, each with its comma: the prefix of another
// value the caller walked. They are not read again.
func (w *Walker) Members(at int, member func(key []byte)) {
	w.i, w.depth = at, w.depth+1
	w.members(member)
}

// open reads the opening byte of a container and reports whether members
// or elements follow; it reads an empty container whole.
func (w *Walker) open(c byte) bool {
	w.ws()
	if w.i >= len(w.data) || w.data[w.i] != c || w.depth >= maxDepth {
		w.fail()
		return false
	}
	w.i++
	w.ws()
	if w.i < len(w.data) && w.data[w.i] == c+2 { // } is { + 2, ] is [ + 2
		w.i++
		return false
	}
	w.depth++
	return true
}

// members reads the members of an object from w.i, where a key starts,
// to its closing brace.
func (w *Walker) members(member func(key []byte)) {
	for w.err == nil {
		w.member = w.i
		k := w.str()
		w.ws()
		if w.err != nil || w.i >= len(w.data) || w.data[w.i] != ':' {
			w.fail()
			return
		}
		w.i++
		key := k[1 : len(k)-1 : len(k)-1] // see Value: an append never writes the closing quote
		if bytes.IndexByte(key, '\\') >= 0 {
			w.escapedKey = true
		}
		member(key)
		if !w.next('}') {
			return
		}
		w.ws()
	}
}

// Array reads an array, calling elem for each element; elem must read
// it.
func (w *Walker) Array(elem func()) {
	if !w.open('[') {
		return
	}
	for w.err == nil {
		elem()
		if !w.next(']') {
			return
		}
	}
}

// next reads a comma (true: more follow) or the closing byte.
func (w *Walker) next(closing byte) bool {
	w.ws()
	switch {
	case w.err != nil || w.i >= len(w.data):
		w.fail()
	case w.data[w.i] == ',':
		w.i++
		return true
	case w.data[w.i] == closing:
		w.i++
		w.depth--
	default:
		w.fail()
	}
	return false
}
