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
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
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
	// forms are the spellings looked for, longest first, so that a key is
	// replaced whole rather than its stripped rest.
	forms []string
	// byFirst lists the forms by their first byte, in the order of forms.
	byFirst [256][]string
	// start marks the bytes a match may start with: the first byte of a
	// form, and the backslash of an escape.
	start [256]bool
	// pairs marks the first two bytes of each form (a bit set of 256 by
	// 256), so that most candidates are dismissed without a call.
	pairs [256][4]uint64
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
	for _, f := range r.forms {
		r.start[f[0]] = true
		r.byFirst[f[0]] = append(r.byFirst[f[0]], f)
		if len(f) > 1 {
			r.pairs[f[0]][f[1]>>6] |= 1 << (f[1] & 63)
		} else {
			r.pairs[f[0]] = [4]uint64{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}
		}
	}
	if len(r.forms) > 0 {
		r.start['\\'] = true
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

// values replaces the configured secrets in s.
func (r *Redactor) values(s string) string {
	if r == nil || len(r.forms) == 0 {
		return s
	}
	var b strings.Builder
	done := 0 // s[:done] is written to b, or nothing matched yet
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !r.start[c] {
			continue
		}
		if c != '\\' && i+1 < len(s) && s[i+1] != '\\' && r.pairs[c][s[i+1]>>6]&(1<<(s[i+1]&63)) == 0 {
			continue
		}
		end := r.matchAt(s, i)
		if end < 0 {
			continue
		}
		if b.Cap() == 0 {
			b.Grow(len(s))
		}
		b.WriteString(s[done:i])
		b.WriteString(Marker)
		done = end
		i = end - 1
	}
	if b.Cap() == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// matchAt returns the end of the first form found at s[i:], -1 if none.
func (r *Redactor) matchAt(s string, i int) int {
	first := s[i]
	if first == '\\' {
		// An escaped first character: the forms that start with it.
		if c, ok := unescape(s[i:]); ok && c < utf8.RuneSelf {
			first = byte(c)
		}
	}
	for _, f := range r.byFirst[first] {
		if end := matchForm(s, i, f, false); end >= 0 {
			return end
		}
	}
	return -1
}

// matchForm returns the end of form f written at s[i:], each of its
// characters as it is or JSON-escaped, -1 if f is not there. When more
// is set, s may go on: cut, returns when the answer depends on the bytes
// past its end (s[i:] is the start of a spelling of f, or a backslash
// run that ends f reaches the end of s and may be longer).
func matchForm(s string, i int, f string, more bool) int {
	for k := 0; k < len(f); {
		if i >= len(s) {
			return cutOr(more)
		}
		if s[i] == '\\' && f[k] == '\\' {
			// A backslash, escaped any number of times.
			for i < len(s) && s[i] == '\\' {
				i++
			}
			if i == len(s) && more {
				return cut
			}
			k++
			continue
		}
		if s[i] == f[k] {
			i, k = i+1, k+1
			continue
		}
		if s[i] != '\\' {
			return -1
		}
		c, size := utf8.DecodeRuneInString(f[k:])
		n := escape(s[i:], c)
		if n == cut {
			return cutOr(more)
		}
		if n == 0 {
			return -1
		}
		i, k = i+n, k+size
	}
	return i
}

// cut is what matchForm and escape return when s ends inside what may
// be a spelling.
const cut = -2

func cutOr(more bool) int {
	if more {
		return cut
	}
	return -1
}

// escape returns the length of a JSON escape of c at the start of s: one
// or more backslashes (a text escaped more than once), then "u" and four
// hex digits, or '"' or '/' for themselves; 0 if s does not start with
// one, cut if s ends inside what may be one.
func escape(s string, c rune) int {
	j := 0
	for j < len(s) && s[j] == '\\' {
		j++
	}
	if j == 0 {
		return 0
	}
	if j == len(s) {
		return cut
	}
	switch {
	case s[j] == 'u' && j+5 > len(s):
		if hexPrefix(s[j+1:], c) {
			return cut
		}
	case s[j] == 'u':
		if v, ok := hex4(s[j+1 : j+5]); ok && v == c {
			return j + 5
		}
	case (c == '"' || c == '/') && rune(s[j]) == c:
		return j + 1
	}
	return 0
}

// unescape returns the ASCII character a JSON escape at the start of s
// stands for; ok is false if s starts with none.
func unescape(s string) (c rune, ok bool) {
	j := 0
	for j < len(s) && s[j] == '\\' {
		j++
	}
	switch {
	case j == 0 || j == len(s):
		return 0, false
	case s[j] == 'u' && j+5 <= len(s):
		return hex4(s[j+1 : j+5])
	case s[j] == '"' || s[j] == '/':
		return rune(s[j]), true
	}
	return '\\', true // a backslash escaped, or a backslash before other text
}

// hexPrefix reports whether s, shorter than four bytes, starts the four
// hex digits of c, in either case.
func hexPrefix(s string, c rune) bool {
	const digits = "0123456789abcdef"
	for i := 0; i < len(s); i++ {
		if lowerASCII(s[i]) != digits[c>>(12-4*i)&15] {
			return false
		}
	}
	return true
}

func hex4(s string) (rune, bool) {
	var v rune
	for i := 0; i < 4; i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | rune(c)
	}
	return v, true
}

var (
	apiKeyPattern = regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{8,}`)
	// RFC 9110 §11.1: the auth scheme is case-insensitive; the token is
	// RFC 6750's b64token, so a quote or brace after it (a token quoted in
	// a JSON error body) is kept and the JSON stays JSON.
	bearerPattern = regexp.MustCompile(`(?i)\b(bearer)\s+[A-Za-z0-9._~+/-]+=*`)
)

// Patterns returns s with API keys ("sk-" and at least eight key
// characters, the shape of OpenAI and DeepSeek keys) and bearer tokens
// ("Bearer " and the token) replaced by Marker; s itself when there is
// none.
func Patterns(s string) string {
	if !mayMatch(s) {
		return s
	}
	out := apiKeyPattern.ReplaceAllString(bearerPattern.ReplaceAllString(s, "${1} "+Marker), Marker)
	if out == s {
		return s // the same string, not an equal copy: Bytes relies on it
	}
	return out
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
