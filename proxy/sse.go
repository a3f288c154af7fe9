package proxy

import (
	"bytes"
	"net/http"
)

// maxPending bounds the events an sseWriter gathers before it writes them
// anyway.
const maxPending = 32 << 10

// sseWriter writes a text/event-stream response. With coalesce set, events
// are gathered and written together, with one flush, when flush is called:
// the gateway calls it whenever it is about to wait (for the upstream's
// next bytes, or for an upstream call), so a burst of events the upstream
// delivered at once costs one write(2), while a paced stream is still
// written event by event, each as soon as the next has to be waited for.
// Without coalesce, every event is written and flushed at once. A failed
// write fails every later one. It is owned by one request.
type sseWriter struct {
	w        http.ResponseWriter
	rc       *http.ResponseController
	started  bool
	coalesce bool
	buf      []byte // events not yet written
	err      error
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// start commits the response headers: the upstream's passed-on headers
// first, then the stream's own.
func (s *sseWriter) start(upstream http.Header) {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	copyHeader(h, upstream)
	h.Del("Content-Length")
	h.Del("Content-Encoding")
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
}

// appendData appends the event whose data is b. A newline in b starts
// another data line of the same event, as the SSE format requires.
func appendData(dst, b []byte) []byte {
	dst = append(dst, "data: "...)
	if bytes.IndexByte(b, '\n') < 0 {
		dst = append(dst, b...)
	} else {
		dst = append(dst, bytes.ReplaceAll(b, []byte("\n"), []byte("\ndata: "))...)
	}
	return append(dst, '\n', '\n')
}

// open, opened and event make an sseWriter the eventWriter of a door's
// sink.
func (s *sseWriter) open(h http.Header) { s.start(h) }
func (s *sseWriter) opened() bool       { return s.started }

// event writes one whole event, b, as it is.
func (s *sseWriter) event(b []byte) error {
	s.start(nil)
	s.buf = append(s.buf, b...)
	return s.queued()
}

// comment writes an SSE comment line, line starting with ':'.
func (s *sseWriter) comment(line []byte) error {
	s.start(nil)
	s.buf = append(append(s.buf, line...), '\n', '\n')
	return s.queued()
}

// queued ends an event added to buf: written now unless it may wait for
// flush.
func (s *sseWriter) queued() error {
	if s.err != nil || !s.coalesce || len(s.buf) >= maxPending {
		return s.flush()
	}
	return nil
}

// flush writes the events gathered, if any, and flushes them to the
// client.
func (s *sseWriter) flush() error {
	if s.err != nil || len(s.buf) == 0 {
		s.buf = s.buf[:0]
		return s.err
	}
	_, err := s.w.Write(s.buf)
	s.buf = s.buf[:0]
	if err == nil {
		err = s.rc.Flush()
	}
	s.err = err
	return err
}
