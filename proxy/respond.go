package proxy

import (
	"bytes"
	"net/http"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/protocol"
)

// sink is where the events of a strategy go: an SSE stream for a client
// that asked to stream, one JSON body for one that did not. Headers are
// committed with the first byte, so a failure before it still gets a real
// status. A sink is owned by one request.
type sink interface {
	// header stores headers to send with the first byte.
	header(h http.Header)
	// chunk writes one chunk; ext, when set, is added to it as the
	// top-level protocol.ExtensionKey field.
	chunk(data, ext []byte) error
	done() error
	comment(line []byte) error
	// finish ends a successful response.
	finish() error
	// flush writes what the sink gathered: the gateway is about to wait.
	flush() error
	// committed reports whether any byte reached the client.
	committed() bool
	// fail reports an error after the response was committed.
	fail(e *chat.Error)
	// whole writes an answer passed on whole, with its status and headers
	// (the standard protocol's non-streaming answers).
	whole(status int, h http.Header, body []byte) error
	// refused keeps the answer of a request that failed before its first
	// byte (status and JSON body, redacted), for a resume to answer the
	// same; only a resumable stream keeps it.
	refused(status int, body []byte)
	// cancelled ends a stream cancelled through the cancel route as
	// streams end; false when the sink cannot be cancelled so (only a
	// resumable stream can).
	cancelled() bool
}

// writeWhole writes an answer passed on whole to w. The body was decoded
// by the transport: its encoding no longer applies.
func writeWhole(w http.ResponseWriter, status int, h http.Header, body []byte) error {
	copyHeader(w.Header(), h)
	w.Header().Del("Content-Encoding")
	w.WriteHeader(status)
	_, err := w.Write(body)
	return err
}

// streamSink writes events as they come.
type streamSink struct {
	w       *sseWriter
	pending http.Header
	// ext is the phase metadata of the last chunk the guard wrote, for
	// the in-band error of a stream that fails after it.
	ext []byte
}

func (s *streamSink) header(h http.Header) { s.pending = h }

func (s *streamSink) open() {
	if !s.w.started {
		s.w.start(s.pending)
	}
}

func (s *streamSink) chunk(data, ext []byte) error {
	s.open()
	if ext != nil {
		s.ext = ext
		return s.w.dataExt(data, ext)
	}
	return s.w.data(data)
}
func (s *streamSink) done() error {
	s.open()
	if err := s.w.data([]byte(chat.Done)); err != nil {
		return err
	}
	return s.w.flush()
}
func (s *streamSink) comment(line []byte) error { s.open(); return s.w.comment(line) }
func (s *streamSink) finish() error             { return s.w.flush() }
func (s *streamSink) flush() error              { return s.w.flush() }
func (s *streamSink) committed() bool           { return s.w.started }
func (s *streamSink) refused(int, []byte)       {}
func (s *streamSink) cancelled() bool           { return false }
func (s *streamSink) whole(status int, h http.Header, body []byte) error {
	return writeWhole(s.w.w, status, h, body)
}
func (s *streamSink) fail(e *chat.Error) {
	if s.ext != nil {
		_ = s.w.dataExt(e.Body(), s.ext)
	} else {
		_ = s.w.data(e.Body())
	}
	_ = s.w.flush()
}

// jsonSink assembles the chunks of a guarded stream into one
// chat.completion for a client that did not ask to stream.
type jsonSink struct {
	w       http.ResponseWriter
	pending http.Header
	asm     chat.Assembler
	wrote   bool
}

func (s *jsonSink) header(h http.Header) { s.pending = h }
func (s *jsonSink) chunk(data, ext []byte) error {
	if ext != nil {
		data = chat.WithExtension(data, protocol.ExtensionKey, ext)
	}
	if err := s.asm.Add(data); err != nil {
		// Not the client going away: the guard passed on a chunk it could
		// not have decoded itself.
		return &protocol.GuardError{Err: err}
	}
	return nil
}
func (s *jsonSink) done() error          { return nil }
func (s *jsonSink) flush() error         { return nil }
func (s *jsonSink) comment([]byte) error { return nil }
func (s *jsonSink) committed() bool      { return s.wrote }

func (s *jsonSink) finish() error {
	body, err := s.asm.Completion()
	if err != nil {
		return err
	}
	copyHeader(s.w.Header(), s.pending)
	s.w.Header().Del("Content-Length")
	s.w.Header().Del("Content-Encoding")
	s.w.Header().Set("Content-Type", "application/json")
	s.wrote = true
	s.w.WriteHeader(http.StatusOK)
	_, err = s.w.Write(body)
	return err
}

func (s *jsonSink) fail(*chat.Error)    {}
func (s *jsonSink) refused(int, []byte) {}
func (s *jsonSink) cancelled() bool     { return false }
func (s *jsonSink) whole(status int, h http.Header, body []byte) error {
	s.wrote = true
	return writeWhole(s.w, status, h, body)
}

// dataExt writes one event whose data is the chunk data with ext added as
// the protocol.ExtensionKey field, built in the writer's own buffer. Chunk
// data is one JSON line, as the guard only passes on decodable chunks.
func (s *sseWriter) dataExt(data, ext []byte) error {
	s.start(nil)
	n := len(s.buf)
	s.buf = append(s.buf, "data: "...)
	s.buf = chat.AppendExtension(s.buf, data, protocol.ExtensionKey, ext)
	if bytes.IndexByte(s.buf[n+6:], '\n') >= 0 {
		s.buf = s.buf[:n]
		return s.data(chat.WithExtension(data, protocol.ExtensionKey, ext))
	}
	s.buf = append(s.buf, '\n', '\n')
	return s.queued()
}
