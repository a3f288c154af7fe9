// Package gather writes what is written to it later and together: the
// log lines of the gateway's requests (a guarded request writes a trace
// line per phase and a request line) gathered over a short delay reach
// the output in one write(2), off the path of the requests that wrote
// them.
package gather

import (
	"io"
	"sync"
	"time"
)

// DefaultDelay is how long a line waits, at most, before it is written.
const DefaultDelay = 50 * time.Millisecond

// maxGathered bounds what waits: a Write that brings the gathered bytes
// to it writes them at once, in its caller's time, so a burst of lines
// holds the memory of one bound and is slowed to what the output takes.
const maxGathered = 64 << 10

// Writer gathers writes and writes them to its output in order, together,
// at most a delay after the first of them; Flush and Close write what is
// gathered at once. Each Write is kept whole: the output sees every line
// a caller wrote in one piece. It is safe for concurrent use.
//
// A Write always succeeds: an error of the output is returned by the
// Flush or Close that met it, and lost when a timer's flush met it (a
// log with nowhere to write has nowhere to report it either).
type Writer struct {
	out   io.Writer
	delay time.Duration

	mu      sync.Mutex
	buf     []byte
	spare   []byte      // the buffer written last, reused
	pending *time.Timer // the flush to come; nil when nothing waits
	closed  bool

	writing sync.Mutex // held while writing to out, so writes stay in order
}

// New returns a Writer to out that writes what it gathered delay after
// the first write since the last flush; a delay of 0 or less writes every
// Write at once.
func New(out io.Writer, delay time.Duration) *Writer {
	return &Writer{out: out, delay: delay}
}

// Write gathers p.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closed || w.delay <= 0 {
		w.mu.Unlock()
		w.writing.Lock()
		defer w.writing.Unlock()
		return w.out.Write(p)
	}
	w.buf = append(w.buf, p...)
	full := len(w.buf) >= maxGathered
	if !full && w.pending == nil {
		w.pending = time.AfterFunc(w.delay, func() { _ = w.Flush() })
	}
	w.mu.Unlock()
	if full {
		return len(p), w.Flush()
	}
	return len(p), nil
}

// Flush writes what is gathered, if anything, in one write.
func (w *Writer) Flush() error {
	w.writing.Lock()
	defer w.writing.Unlock()
	w.mu.Lock()
	b := w.buf
	w.buf = w.spare[:0]
	w.spare = nil
	if w.pending != nil {
		w.pending.Stop()
		w.pending = nil
	}
	w.mu.Unlock()
	var err error
	if len(b) > 0 {
		_, err = w.out.Write(b)
	}
	w.mu.Lock()
	w.spare = b[:0]
	w.mu.Unlock()
	return err
}

// Close writes what is gathered; later writes go to the output at once.
// It does not close the output.
func (w *Writer) Close() error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	return w.Flush()
}
