// Package redact removes credentials from text that leaves the gateway:
// error bodies, in-band errors, SSE comments, headers, log lines, spans.
//
// A Redactor is built once from the values of the secrets the gateway is
// configured with, and finds each of them however an upstream may have
// written it back: as it is, JSON-escaped (any character as \uXXXX in
// either case, "\/" for a slash, escaped more than once when a JSON
// document was quoted inside another), percent-encoded (as a query or a
// path escapes it, or every byte as %XX, its hex digits in either case),
// base64-encoded (standard or URL alphabet, alone or inside a longer
// base64 text), or without a leading "sk-"-like prefix when what remains
// is long enough to be unambiguous. Other encodings are not looked for:
// hex, a percent encoding of some bytes and not others or in mixed case,
// base64 of a key without its prefix, encodings nested in one another
// (JSON escapes aside). The patterns of API keys and bearer tokens (Patterns) are a
// second net for credentials the gateway was not configured with, such as
// a client's own key passed through.
//
// The package imports nothing of the gateway, so every other package may
// use it.
package redact

import (
	"encoding/base64"
	"net/url"
	"slices"
	"strings"
	"unsafe"
)

// Marker replaces every credential found.
const Marker = "[redacted]"

// minStripped is the shortest rest of a key, once its prefix is stripped,
// that is looked for on its own: shorter, it could be ordinary text.
const minStripped = 16

// Redactor replaces the configured secrets, then the patterns, with
// Marker. It is immutable once built and safe for concurrent use. The nil
// *Redactor applies the patterns only.
type Redactor struct {
	// forms are the spellings looked for, longest first.
	forms []string
	// find finds them all in one pass (nil without forms).
	find *automaton
}

// New returns the Redactor of secrets; empty values are ignored.
func New(secrets ...string) *Redactor {
	r := &Redactor{}
	seen := map[string]bool{}
	add := func(f string) {
		if f != "" && !seen[f] {
			seen[f] = true
			r.forms = append(r.forms, f)
		}
	}
	for _, s := range secrets {
		add(s)
		// Percent-encoded as a query or a path escapes it, with the hex
		// digits in either case.
		for _, e := range []string{url.QueryEscape(s), url.PathEscape(s)} {
			add(e)
			add(lowerHex(e))
		}
		for _, e := range encoded(s) {
			add(e)
		}
		for rest := s; ; {
			next, ok := stripPrefix(rest)
			if !ok || len(next) < minStripped {
				break
			}
			add(next)
			rest = next
		}
	}
	slices.SortFunc(r.forms, func(a, b string) int { return len(b) - len(a) })
	if len(r.forms) > 0 {
		r.find = newAutomaton(r.forms)
	}
	return r
}

// encoded returns the spellings of secret s in the encodings an upstream
// or a tool may write it back in, beyond JSON escapes (which every form is
// matched in): percent-encoded byte by byte (every byte as %XX, its hex
// digits upper or lower case, as a strict encoder writes a token), and
// base64, standard and URL alphabets, padded or not, alone or inside a
// longer base64 text ("user:key" encoded for Basic auth): the three
// alignments of its bytes to the groups of three, each the characters
// that depend on s alone (minStripped of them at least; a shorter secret
// has no base64 spelling looked for).
func encoded(s string) []string {
	var up, low strings.Builder
	for i := 0; i < len(s); i++ {
		const hexUp, hexLow = "0123456789ABCDEF", "0123456789abcdef"
		up.WriteString("%" + hexUp[s[i]>>4:s[i]>>4+1] + hexUp[s[i]&15:s[i]&15+1])
		low.WriteString("%" + hexLow[s[i]>>4:s[i]>>4+1] + hexLow[s[i]&15:s[i]&15+1])
	}
	out := []string{up.String(), low.String()}
	for shift := 0; shift < 3; shift++ {
		b := append(make([]byte, shift), s...)
		from, to := (8*shift+5)/6, 8*len(b)/6 // the characters of s's bits alone
		if to-from < minStripped {
			continue
		}
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			out = append(out, enc.EncodeToString(b)[from:to])
		}
	}
	return out
}

// lowerHex returns e, a percent-encoded text, with the hex digits of its
// escapes in lower case ("%2B" as "%2b").
func lowerHex(e string) string {
	b := []byte(e)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = lowerASCII(b[i+1]), lowerASCII(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// stripPrefix removes a leading prefix of 1 to 10 letters and a '-' or
// '_' ("sk-", "gsk_", "proj-"), the part of a key a provider may leave out
// when it quotes the key back.
func stripPrefix(s string) (string, bool) {
	for i := 0; i < len(s) && i <= 10; i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case (c == '-' || c == '_') && i > 0:
			return s[i+1:], true
		default:
			return s, false
		}
	}
	return s, false
}

// Len is the number of spellings r looks for.
func (r *Redactor) Len() int {
	if r == nil {
		return 0
	}
	return len(r.forms)
}

// String returns s with every secret and every pattern replaced by
// Marker; s itself when there is none.
func (r *Redactor) String(s string) string {
	return Patterns(r.values(s))
}

// Bytes is String for b; it returns b itself when there is nothing to
// replace, and never changes b.
func (r *Redactor) Bytes(b []byte) []byte {
	s := unsafe.String(unsafe.SliceData(b), len(b))
	out := r.String(s)
	if len(out) == len(s) && unsafe.StringData(out) == unsafe.StringData(s) {
		return b
	}
	return []byte(out)
}

// values replaces the configured secrets in s: every part where a form
// is found, overlapping ones as one, by one Marker.
func (r *Redactor) values(s string) string {
	if r == nil || r.find == nil || len(s) < r.find.minLen {
		return s
	}
	sc := r.find.scanner()
	defer r.find.release(sc)
	sc.read(s, false)
	if len(sc.spans) == 0 {
		return s
	}
	return string(marked(make([]byte, 0, len(s)+len(sc.spans)*len(Marker)), s, sc.spans, len(s)))
}

// marked appends s[:to] to dst with each of spans (sorted, apart, within
// s[:to]) replaced by Marker.
func marked(dst []byte, s string, spans []span, to int) []byte {
	done := 0
	for _, sp := range spans {
		dst = append(append(dst, s[done:sp.start]...), Marker...)
		done = sp.end
	}
	return append(dst, s[done:to]...)
}

// hexDigit is the value of a hex digit, in either case.
func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// hex4 reads the four hex digits of s.
func hex4(s string) (rune, bool) {
	var v rune
	for i := 0; i < 4; i++ {
		d, ok := hexDigit(s[i])
		if !ok {
			return 0, false
		}
		v = v<<4 | rune(d)
	}
	return v, true
}

// Patterns returns s with API keys ("sk-" after a word boundary, and at
// least eight key characters: letters, digits, '_' and '-', the shape of
// OpenAI and DeepSeek keys) and bearer tokens ("Bearer", in any case,
// after a word boundary, white space, then RFC 6750's b64token: letters,
// digits, "-._~+/" and trailing '=') replaced by Marker, the word
// "Bearer" kept as written; s itself when there is none. A quote or a
// brace after a token is kept, so a token quoted in a JSON body leaves
// the JSON valid. Each is found in one pass, in time linear in s.
func Patterns(s string) string {
	if !mayMatch(s) {
		return s
	}
	return apiKeys(bearers(s))
}

// bearers replaces the bearer tokens of s (see Patterns); s itself when
// there is none.
func bearers(s string) string {
	var out []byte
	done := 0
	for i := 0; i+len("bearer") <= len(s); i++ {
		if s[i] != 'b' && s[i] != 'B' || !strings.EqualFold(s[i:i+6], "bearer") || i > 0 && isWord(s[i-1]) {
			continue
		}
		j := i + 6
		for j < len(s) && isSpace(s[j]) {
			j++
		}
		k := j
		for k < len(s) && isTokenChar(s[k]) {
			k++
		}
		if j == i+6 || k == j {
			continue
		}
		for k < len(s) && s[k] == '=' {
			k++
		}
		out = append(append(append(out, s[done:i+6]...), ' '), Marker...)
		done, i = k, k-1
	}
	if out == nil {
		return s
	}
	return string(append(out, s[done:]...))
}

// apiKeys replaces the API keys of s (see Patterns); s itself when there
// is none.
func apiKeys(s string) string {
	var out []byte
	done := 0
	for i := 0; i < len(s); {
		k := strings.Index(s[i:], "sk-")
		if k < 0 {
			break
		}
		k += i
		e := k + 3
		for e < len(s) && (isWord(s[e]) || s[e] == '-') {
			e++
		}
		if k > 0 && isWord(s[k-1]) || e-k-3 < 8 {
			i = k + 1
			continue
		}
		out = append(append(out, s[done:k]...), Marker...)
		done, i = e, e
	}
	if out == nil {
		return s
	}
	return string(append(out, s[done:]...))
}

// isWord reports whether c is a character of \w: a letter, a digit or '_'.
func isWord(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// isSpace reports whether c is white space as \s reads it.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r' }

// isTokenChar reports whether c may be in a b64token but for its
// trailing '=' (RFC 6750 §2.1).
func isTokenChar(c byte) bool {
	return isWord(c) || c == '-' || c == '.' || c == '~' || c == '+' || c == '/'
}

// mayMatch is a cheap test that spares the regular expressions the
// strings that cannot match them, which are nearly all.
func mayMatch(s string) bool {
	if strings.Contains(s, "sk-") {
		return true
	}
	for _, b := range []byte{'b', 'B'} {
		for rest := s; ; {
			i := strings.IndexByte(rest, b)
			if i < 0 || i+6 > len(rest) {
				break
			}
			if strings.EqualFold(rest[i:i+6], "bearer") {
				return true
			}
			rest = rest[i+1:]
		}
	}
	return false
}
