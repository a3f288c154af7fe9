package redact

import (
	"errors"
	"io"
	"unsafe"
)

// bytesPerChar bounds the length of a spelling the streaming Reader holds
// back, per byte of the form it spells: a character escaped as \uXXXX in a
// text escaped three times over takes twelve (maxRun backslashes, then
// "u" and four hex digits).
const bytesPerChar = maxRun + 5

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
	if r == nil || r.find == nil {
		return 0
	}
	return bytesPerChar * r.find.maxLen
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
// stops where the end of s may start a spelling (no more than MaxHold
// bytes from the end) and leaves the rest, to be read again with what
// follows.
func (r *Redactor) settle(dst []byte, s string, more bool) ([]byte, int) {
	if r == nil || r.find == nil {
		return append(dst, s...), len(s)
	}
	sc := r.find.scanner()
	cut := sc.read(s, more)
	if !more {
		return marked(dst, s, sc.spans, len(s)), len(s)
	}
	done := sc.held(cut, len(s))
	if floor := len(s) - r.MaxHold(); done < floor {
		// Only a chain of overlapping spellings reaches back so far: the
		// part found so far is settled as found.
		done = floor
		for len(sc.spans) > 0 && sc.spans[len(sc.spans)-1].start >= done {
			sc.spans = sc.spans[:len(sc.spans)-1]
		}
		if n := len(sc.spans); n > 0 && sc.spans[n-1].end > done {
			done = sc.spans[n-1].end
		}
	}
	return marked(dst, s, sc.spans, done), done
}
