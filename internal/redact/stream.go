package redact

import (
	"errors"
	"io"
	"unicode/utf8"
	"unsafe"
)

// bytesPerChar bounds the length of a spelling the streaming Reader holds
// back, per byte of the form it spells: a character escaped as \uXXXX in a
// text escaped twice more (`\\\u002b`) takes eight.
const bytesPerChar = 8

// readSize is how much the Reader asks its source for at a time.
const readSize = 32 << 10

// Reader redacts a stream: what it reads from its source comes out with
// every configured secret replaced by Marker, as Redactor.Bytes would
// replace it in the whole stream, even when a secret is cut across two or
// more reads. It holds back only the end of what it has read that may be
// the start of a spelling of a secret (at most MaxHold bytes), and gives
// out everything before it as soon as it is read; the held bytes follow
// when the next read or the end of the source settles them. Ordinary text,
// and the blank line that ends an SSE event, is never held.
//
// The patterns (Patterns) are applied to each part given out on its own:
// a credential the gateway was not configured with, cut by a read of the
// source, may pass. When the source fails with an error other than io.EOF,
// the held bytes are dropped, since they may be the start of a secret.
// A Reader is owned by one goroutine.
type Reader struct {
	r   *Redactor
	src io.Reader
	// in holds the bytes read and not yet settled; out the bytes settled,
	// redacted, and not yet given out.
	in, out []byte
	// buf is where the settled bytes are written, reused.
	buf []byte
	err error
}

// NewReader returns a Reader of src that redacts with r (nil: the patterns
// only).
func NewReader(r *Redactor, src io.Reader) *Reader {
	return &Reader{r: r, src: src}
}

// MaxHold is the most bytes a Reader built on r holds back.
func (r *Redactor) MaxHold() int {
	if r == nil || len(r.forms) == 0 {
		return 0
	}
	return bytesPerChar * len(r.forms[0])
}

// Read gives out what is settled; it reads the source until something is.
func (z *Reader) Read(p []byte) (int, error) {
	for len(z.out) == 0 {
		if z.err != nil {
			return 0, z.err
		}
		z.fill()
	}
	n := copy(p, z.out)
	z.out = z.out[n:]
	return n, nil
}

// fill reads the source once and settles what it can.
func (z *Reader) fill() {
	if cap(z.in)-len(z.in) < readSize/2 {
		in := make([]byte, len(z.in), len(z.in)+readSize)
		copy(in, z.in)
		z.in = in
	}
	n, err := z.src.Read(z.in[len(z.in):cap(z.in)])
	z.in = z.in[:len(z.in)+n]
	if err != nil {
		z.err = err
	}
	final := errors.Is(err, io.EOF)
	s := unsafe.String(unsafe.SliceData(z.in), len(z.in))
	out, done := z.r.settle(z.buf[:0], s, !final)
	z.buf = out
	if err != nil {
		done = len(s) // on a failure the held bytes are dropped
	}
	if len(out) > 0 {
		o := unsafe.String(unsafe.SliceData(out), len(out))
		if p := Patterns(o); unsafe.StringData(p) != unsafe.StringData(o) {
			out = []byte(p)
		}
		z.out = out
	}
	// The held bytes go to the front, where the next read appends.
	z.in = z.in[:copy(z.in, z.in[done:])]
}

// Close closes the source when it is an io.Closer.
func (z *Reader) Close() error {
	if c, ok := z.src.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// settle appends s to dst with the secrets replaced, as values does, and
// returns how much of s it settled. When more is set, s may go on: it
// stops at the first place where a spelling may start and reaches the end
// of s (no more than MaxHold bytes from it), and leaves the rest.
func (r *Redactor) settle(dst []byte, s string, more bool) ([]byte, int) {
	if r == nil || len(r.forms) == 0 {
		return append(dst, s...), len(s)
	}
	hold := r.MaxHold()
	done := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !r.start[c] {
			continue
		}
		if c != '\\' && i+1 < len(s) && s[i+1] != '\\' && r.pairs[c][s[i+1]>>6]&(1<<(s[i+1]&63)) == 0 {
			continue
		}
		end := r.streamMatchAt(s, i, more && len(s)-i <= hold)
		if end == -1 {
			continue
		}
		dst = append(dst, s[done:i]...)
		if end == cut {
			return dst, i
		}
		dst = append(dst, Marker...)
		done = end
		i = end - 1
	}
	return append(dst, s[done:]...), len(s)
}

// streamMatchAt is matchAt for a text that may go on when more is set: it
// returns cut when what follows s decides, a form or its first character
// being cut by the end of s.
func (r *Redactor) streamMatchAt(s string, i int, more bool) int {
	first := s[i]
	if first == '\\' {
		if more && escapeCut(s[i:]) {
			return cut
		}
		if c, ok := unescape(s[i:]); ok && c < utf8.RuneSelf {
			first = byte(c)
		}
	}
	for _, f := range r.byFirst[first] {
		if end := matchForm(s, i, f, more); end != -1 {
			return end
		}
	}
	return -1
}

// escapeCut reports whether s, which starts with a backslash, ends inside
// a \uXXXX escape: the character it stands for is not known yet.
func escapeCut(s string) bool {
	j := 0
	for j < len(s) && s[j] == '\\' {
		j++
	}
	if j == len(s) {
		return true
	}
	if s[j] != 'u' || j+5 <= len(s) {
		return false
	}
	for _, c := range []byte(s[j+1:]) {
		if !('0' <= c && c <= '9' || 'a' <= lowerASCII(c) && lowerASCII(c) <= 'f') {
			return false
		}
	}
	return true
}
