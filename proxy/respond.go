package proxy

import (
	"bytes"
	"net/http"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/protocol"
)

// sink is where the events of a strategy go, written as its door's wire:
// a stream for a client that asked to stream, one body for one that did
// not. Headers are committed with the first byte, so a failure before it
// still gets a real status (the door's refusal). A sink is owned by one
// request. What only a resumable stream does (a log, a client that may
// leave, a cancel) is the resumable wrapper's, around any door's sink.
type sink interface {
	// header stores headers to send with the first byte.
	header(h http.Header)
	// chunk writes one chat.completion.chunk; ext, when set, is the
	// gateway's extension of it (protocol.ExtensionKey's value).
	chunk(data, ext []byte) error
	// done ends a stream that finished.
	done() error
	// comment writes a comment line (a keep-alive) of a stream.
	comment(line []byte) error
	// finish ends a successful response.
	finish() error
	// flush writes what the sink gathered: the gateway is about to wait.
	flush() error
	// committed reports whether any byte reached the client.
	committed() bool
	// fail writes e, an error after the response was committed, in-band.
	fail(e *chat.Error)
	// whole writes an answer passed on whole, with its status and headers
	// (the standard protocol's non-streaming answers).
	whole(status int, h http.Header, body []byte) error
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

// doneEvent is the event that ends a chat completion stream.
var doneEvent = appendData(nil, []byte(chat.Done))

// streamSink writes a chat completion stream: each chunk an SSE event,
// the gateway's extension added to it as its protocol.ExtensionKey member.
type streamSink struct {
	w       http.ResponseWriter // for an answer passed on whole
	ew      eventWriter
	pending http.Header
	// ext is the phase metadata of the last chunk the guard wrote, for
	// the in-band error of a stream that fails after it.
	ext []byte
	buf []byte // the event being written
	// ident, when set, gives each chunk the response's identity.
	ident *identity
}

// identified is a sink that writes each chunk with a response's identity,
// in the pass that adds the gateway's extension: the chat door's.
type identified interface{ identify(i *identity) }

// identify has out write its chunks with i (nil: as they come), when it
// is a sink that can.
func identify(out sink, i *identity) {
	if s, ok := out.(identified); ok {
		s.identify(i)
	}
}

func (s *streamSink) identify(i *identity) { s.ident = i }

func (s *streamSink) header(h http.Header) { s.pending = h }

func (s *streamSink) open() {
	if !s.ew.opened() {
		s.ew.open(s.pending)
	}
}

func (s *streamSink) chunk(data, ext []byte) error {
	s.open()
	if ext != nil {
		s.ext = ext
	}
	s.buf = appendDataExt(s.buf[:0], data, ext, s.ident)
	return s.ew.event(s.buf)
}

func (s *streamSink) done() error {
	s.open()
	if err := s.ew.event(doneEvent); err != nil {
		return err
	}
	return s.ew.flush()
}

func (s *streamSink) comment(line []byte) error { s.open(); return s.ew.comment(line) }
func (s *streamSink) finish() error             { return s.ew.flush() }
func (s *streamSink) flush() error              { return s.ew.flush() }
func (s *streamSink) committed() bool           { return s.ew.opened() }
func (s *streamSink) whole(status int, h http.Header, body []byte) error {
	return writeWhole(s.w, status, h, body)
}

func (s *streamSink) fail(e *chat.Error) {
	s.open()
	s.buf = appendDataExt(s.buf[:0], e.Body(), s.ext, nil)
	_ = s.ew.event(s.buf)
	_ = s.ew.flush()
}

// writeRendered writes an answer passed on whole as writeWhole does, or,
// when render is set and the answer is a 200, what render makes of its
// body (a door's answer made of a chat.completion); a body render cannot
// read is the gateway's 502, in the shape of door d (nil: OpenAI's).
func writeRendered(w http.ResponseWriter, status int, h http.Header, body []byte, render func([]byte) ([]byte, error), d *door) error {
	if render == nil || status != http.StatusOK {
		return writeWhole(w, status, h, body)
	}
	out, err := render(body)
	copyHeader(w.Header(), h)
	w.Header().Del("Content-Encoding")
	w.Header().Del("Content-Length")
	if err != nil {
		if d == nil {
			d = &chatDoor
		}
		d.refuse(w, protocol.Failure{Error: errBadCompletion})
		return nil
	}
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(out)
	return err
}

// errBadCompletion answers a 200 whose body is not a chat completion a
// door can render.
var errBadCompletion = &chat.Error{Status: http.StatusBadGateway, Type: chat.TypeUpstream, Code: "bad_upstream_response",
	Message: "the upstream's answer could not be read as a chat completion"}

// jsonSink assembles the chunks of a guarded stream into one
// chat.completion for a client that did not ask to stream.
type jsonSink struct {
	w       http.ResponseWriter
	pending http.Header
	asm     chat.Assembler
	wrote   bool
	// render, when set, makes the door's answer of a chat.completion (see
	// writeRendered); nil writes the completion.
	render func([]byte) ([]byte, error)
	// door shapes the error of a completion render cannot read; nil is
	// OpenAI's.
	door *door
	// ident, when set, gives each chunk the response's identity.
	ident *identity
	buf   []byte // a chunk with its identity and extension, reused: asm keeps no data
}

func (s *jsonSink) identify(i *identity) { s.ident = i }

func (s *jsonSink) header(h http.Header) { s.pending = h }
func (s *jsonSink) chunk(data, ext []byte) error {
	if ext != nil || s.ident != nil {
		s.buf = s.ident.appendChunk(s.buf[:0], data, ext)
		data = s.buf
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
	return writeRendered(s.w, http.StatusOK, nil, body, s.render, s.door)
}

func (s *jsonSink) fail(*chat.Error) {}
func (s *jsonSink) whole(status int, h http.Header, body []byte) error {
	s.wrote = true
	return writeRendered(s.w, status, h, body, s.render, s.door)
}

// appendDataExt appends the event whose data is the chunk data with the
// response's identity i (nil: as it came) and ext, when set, added as the
// protocol.ExtensionKey member, built in place in one pass. Chunk data is
// one JSON line, as the guard only passes on decodable chunks.
func appendDataExt(dst, data, ext []byte, i *identity) []byte {
	if ext == nil && i == nil {
		return appendData(dst, data)
	}
	n := len(dst)
	dst = i.appendChunk(append(dst, "data: "...), data, ext)
	if bytes.IndexByte(dst[n+6:], '\n') >= 0 {
		line := bytes.Clone(dst[n+6:])
		return appendData(dst[:n], line)
	}
	return append(dst, '\n', '\n')
}
