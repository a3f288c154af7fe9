// Package jsonscan reads JSON bytes without decoding them: where a string
// ends, where a value ends, which strings are keys and whether a key is
// the one encoding/json would match, whether a growing buffer holds one
// complete value, a field of an object replaced in place, and a walk that
// validates as it reads (Walker). It is the one place the gateway proves
// that a key cannot be read inside a string; its fuzz tests compare every
// function with encoding/json.
//
// Only Walker validates JSON. The other functions answer where the
// decoder would look; a caller that needs the decoder's verdict asks the
// decoder, or walks with a Walker.
package jsonscan

import (
	"bytes"
	"encoding/json"
)

// StringEnd returns the index of the quote that closes the JSON string
// whose body starts at start (just after its opening quote), and whether
// the body holds a backslash; -1 when the string does not close in data.
func StringEnd(data []byte, start int) (end int, escaped bool) {
	end = StringClose(data, start)
	if end < 0 {
		return -1, false
	}
	return end, bytes.IndexByte(data[start:end], '\\') >= 0
}

// StringClose returns the index of the quote that closes the JSON string
// whose body starts at start, or -1: StringEnd without the question of
// escapes, for a walk that skips the string.
func StringClose(data []byte, start int) int {
	for pos := start; ; {
		k := bytes.IndexByte(data[pos:], '"')
		if k < 0 {
			return -1
		}
		end := pos + k
		// The quote is escaped when an odd run of backslashes precedes it.
		n := 0
		for b := end - 1; b >= start && data[b] == '\\'; b-- {
			n++
		}
		if n%2 == 0 {
			return end
		}
		pos = end + 1
	}
}

// SkipSpace returns the index of the first byte at or after i that is not
// JSON whitespace, or len(data).
func SkipSpace(data []byte, i int) int {
	for i < len(data) && isSpace(data[i]) {
		i++
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// ValueEnd returns the index just past the JSON value whose first byte is
// at start: past the closing quote of a string, the bracket closing an
// object or array, or the last byte of a scalar (which runs to the first
// whitespace, comma, colon or bracket, or to the end of data); -1 when a
// string or container does not close in data, or no value starts at
// start.
func ValueEnd(data []byte, start int) int {
	if start >= len(data) {
		return -1
	}
	switch data[start] {
	case '"':
		end := StringClose(data, start+1)
		if end < 0 {
			return -1
		}
		return end + 1
	case '{', '[':
		return containerEnd(data, start)
	}
	i := start
	for i < len(data) && !isSpace(data[i]) && !isDelim(data[i]) {
		i++
	}
	if i == start {
		return -1 // no value starts here
	}
	return i
}

func isDelim(c byte) bool {
	return c == ',' || c == ':' || c == '{' || c == '}' || c == '[' || c == ']' || c == '"'
}

// containerEnd is ValueEnd for an object or array.
func containerEnd(data []byte, start int) int {
	depth := 0
	for i := start; i < len(data); i++ {
		switch data[i] {
		case '"':
			end := StringClose(data, i+1)
			if end < 0 {
				return -1
			}
			i = end
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// KeyIs reports whether raw, a key's body as written between its quotes,
// names name as encoding/json matches a key to a field: the same letters
// ignoring case (with Unicode's simple folds: the Kelvin sign is a k),
// once escapes are read. name is ASCII; Keys.Is takes it in lower case.
func KeyIs(raw []byte, escaped bool, name string) bool {
	if escaped {
		var s string
		if json.Unmarshal(quoted(raw), &s) != nil {
			return false
		}
		raw = []byte(s)
	}
	if len(raw) == len(name) && string(raw) == name {
		return true
	}
	// An ASCII letter folds from at most 3 bytes (the Kelvin sign).
	if len(raw) < len(name) || len(raw) > 3*len(name) {
		return false
	}
	return bytes.EqualFold(raw, []byte(name))
}

func quoted(raw []byte) []byte {
	b := make([]byte, 0, len(raw)+2)
	return append(append(append(b, '"'), raw...), '"')
}

// Keys walks the keys of data at every depth, in order, without decoding:
// a string is a key when a colon follows it (after whitespace), and every
// other string is skipped whole, so text inside a value never passes for
// a key. Start it with Scan; it stops at the end of data or at a string
// that does not close.
type Keys struct {
	data     []byte
	next     int
	key      []byte
	escaped  bool
	folds    bool // the key has a letter another spelling matches
	value    int
	unclosed bool
}

// Scan returns a walk over the keys of data.
func Scan(data []byte) Keys { return Keys{data: data} }

// Next moves to the next key and reports whether there is one.
func (k *Keys) Next() bool {
	data := k.data
	for k.next < len(data) {
		q := bytes.IndexByte(data[k.next:], '"')
		if q < 0 {
			break
		}
		start := k.next + q + 1
		end := StringClose(data, start)
		if end < 0 {
			k.unclosed = true
			break
		}
		j := SkipSpace(data, end+1)
		if j >= len(data) || data[j] != ':' {
			k.next = end + 1 // a string value
			continue
		}
		k.key = data[start:end]
		k.escaped, k.folds = spelling(k.key)
		k.value = SkipSpace(data, j+1)
		k.next = k.value
		return true
	}
	k.next, k.key = len(data), nil
	return false
}

// Unclosed reports whether the walk stopped at a string that does not
// close: data is not JSON, and keys after that point went unseen.
func (k *Keys) Unclosed() bool { return k.unclosed }

// Is reports whether the current key names name, in lower case, as
// encoding/json reads it (see KeyIs).
func (k *Keys) Is(name string) bool {
	if !k.folds && !k.escaped {
		return string(k.key) == name // names are lower case
	}
	return KeyIs(k.key, k.escaped, name)
}

// spelling reports whether a key's body holds an escape, and whether it
// holds a byte that could fold to a lower-case ASCII letter it is not:
// an upper-case letter, or a byte of a multi-byte character (the Kelvin
// sign, the long s).
func spelling(key []byte) (escaped, folds bool) {
	for _, c := range key {
		switch {
		case c == '\\':
			escaped = true
		case c >= 'A' && c <= 'Z' || c >= 0x80:
			folds = true
		}
	}
	return escaped, folds
}

// Value returns the index of the first byte of the current key's value
// (len(data) when data ends first).
func (k *Keys) Value() int { return k.value }

// StringValue returns the body of the current key's value when it is a
// string that closes in data, and whether it is one and holds a
// backslash. The walk goes on after the string.
func (k *Keys) StringValue() (body []byte, escaped, ok bool) {
	v := k.value
	if v >= len(k.data) || k.data[v] != '"' {
		return nil, false, false
	}
	end, esc := StringEnd(k.data, v+1)
	if end < 0 {
		return nil, false, false
	}
	k.next = end + 1
	return k.data[v+1 : end], esc, true
}

// FindKey returns the index of the value of the first key at or after
// from spelled exactly name (no escape, no other case; name is ASCII with
// no quote or backslash), whitespace around its colon or not, and -1 when
// there is none. It searches for the name with bytes.Index, so it costs
// about one pass over data,
// and takes a hit for a key only when its opening quote is not escaped
// and a colon follows: in valid JSON such a hit is a key, never text
// inside a string. It is for the keys that writers spell one way (the
// gateway's own, and the wire's finish_reason as clients read it); Scan
// finds every spelling the decoder reads.
func FindKey(data []byte, name string, from int) int {
	for from < len(data) {
		i := bytes.Index(data[from:], []byte(name+`"`))
		if i < 0 {
			return -1
		}
		q := from + i - 1 // the opening quote
		from += i + len(name) + 1
		if v := keyValueAt(data, q, from); v >= 0 {
			return v
		}
	}
	return -1
}

// LastKey is FindKey for the last such key, searched from the end: the
// cost of the bytes after it.
func LastKey(data []byte, name string) int {
	for end := len(data); end > 0; {
		i := bytes.LastIndex(data[:end], []byte(name+`"`))
		if i < 0 {
			return -1
		}
		end = i
		if v := keyValueAt(data, i-1, i+len(name)+1); v >= 0 {
			return v
		}
	}
	return -1
}

// keyValueAt returns the index of the value of the key whose opening
// quote should be at data[q] and whose closing quote ends before after,
// or -1 when that is not a key: no unescaped quote at q, or no colon.
func keyValueAt(data []byte, q, after int) int {
	if q < 0 || data[q] != '"' || escapedQuote(data, q) {
		return -1
	}
	if j := SkipSpace(data, after); j < len(data) && data[j] == ':' {
		return SkipSpace(data, j+1)
	}
	return -1
}

// escapedQuote reports whether the quote at data[q] follows an odd run of
// backslashes.
func escapedQuote(data []byte, q int) bool {
	n := 0
	for b := q - 1; b >= 0 && data[b] == '\\'; b-- {
		n++
	}
	return n%2 == 1
}
