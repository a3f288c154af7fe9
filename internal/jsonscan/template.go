package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// Template reads the one string a stream's chunks of one shape carry:
// upstreams write every text chunk (or argument fragment) of an answer
// with the same bytes around the string's body, so once a caller has
// decoded one such chunk and found the body where the decoder read it, a
// later chunk with the same bytes before and after the body differs from
// it only in that string. The zero Template has learned nothing; a
// Template is not safe for concurrent use.
type Template struct {
	prefix, suffix []byte // around the body: its opening quote last, its closing quote first
	// Raw keeps invalid UTF-8 in a body with nothing else to decode as
	// its bytes, where the decoder reads each such byte as U+FFFD: text
	// cut inside a character, one chunk ending in its first bytes and the
	// next starting with the rest, is joined again by its reader.
	Raw bool
}

// Learn keeps the bytes of data around the string body data[start:end],
// without a copy: data must not change while the template reads by it. The
// body must be a JSON string's, its quotes at start-1 and end; anything
// else leaves the template as it was.
func (t *Template) Learn(data []byte, start, end int) {
	if start < 1 || end < start || end >= len(data) || data[start-1] != '"' || data[end] != '"' {
		return
	}
	t.prefix, t.suffix = data[:start:start], data[end:]
}

// Learned reports whether the template has a shape.
func (t *Template) Learned() bool { return t.prefix != nil }

// Read returns the string of data when data has the learned shape: the
// learned bytes before the body and after it, and between them the body
// of one JSON string that ends where the bytes after it begin, decoded as
// encoding/json decodes it. A body with nothing to decode (no escape, no
// invalid UTF-8) is returned as a string sharing data's bytes, valid as
// long as data is not changed; with Raw, so is a body whose only
// difference from the decoder's reading is invalid UTF-8. FuzzTemplate
// holds it to encoding/json.
func (t *Template) Read(data []byte) (string, bool) {
	if t.prefix == nil || len(data) < len(t.prefix)+len(t.suffix) ||
		!bytes.HasPrefix(data, t.prefix) || !bytes.HasSuffix(data, t.suffix) {
		return "", false
	}
	end := len(data) - len(t.suffix)
	mid := data[len(t.prefix):end]
	if plainString(mid, t.Raw) {
		if len(mid) == 0 {
			return "", true
		}
		return unsafe.String(&mid[0], len(mid)), true
	}
	// Escapes, or bytes the decoder replaces: the string must still end
	// exactly where the suffix starts.
	if StringClose(data, len(t.prefix)) != end {
		return "", false
	}
	var s string
	if json.Unmarshal(data[len(t.prefix)-1:end+1], &s) != nil {
		return "", false
	}
	return s, true
}

// plainString reports whether b, as a JSON string's body, decodes to its
// own bytes: no quote, backslash or control character, and valid UTF-8
// unless raw.
func plainString(b []byte, raw bool) bool {
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return raw || utf8.Valid(b)
}

// Unescaped is the string a JSON string body without escapes decodes to,
// as encoding/json reads it: its bytes, with each byte of invalid UTF-8
// read as U+FFFD.
func Unescaped(body []byte) string {
	var b strings.Builder
	for len(body) > 0 {
		r, n := utf8.DecodeRune(body)
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.Write(body[:n])
		}
		body = body[n:]
	}
	return b.String()
}
