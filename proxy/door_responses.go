package proxy

import (
	"net/http"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/responses"
)

// responsesDoor is OpenAI's Responses API (POST /v1/responses): the
// request, with the stored history of its previous_response_id and the
// items it references, is served as a chat completion request; each chunk
// of the answer is translated into Responses events as it is written, a
// whole answer into a response object, stored when the request asks.
// Errors are in OpenAI's shape. A resumable stream's log is kept under its
// response id (GET /v1/responses/{id}?stream=true).
var responsesDoor = door{
	name:   metrics.DoorResponses,
	paths:  []string{"/responses"},
	routes: (*Handler).responsesRoutes,
	read:   readResponses,
	ending: responsesEnding,
}

// readResponses reads and translates a POST /v1/responses; what its
// stored history and references add to its body is charged as the body
// is (see prepareResponses).
func readResponses(h *Handler, w http.ResponseWriter, r *http.Request) (doorRequest, error) {
	c, err := h.prepareResponses(w, r)
	if err != nil {
		return nil, err
	}
	c.h, c.r = h, r
	h.reportDropped(w, r, metrics.DoorResponses, c.dropped)
	c.resp = responses.NewResponse(c.req)
	c.resp.SealWith(h.sealer)
	return c, nil
}

func (c *responsesCall) chatBody() []byte { return c.translated }

// clientBody is the body as the client sent it, whose fields may name
// the request's session (proxy/session.go).
func (c *responsesCall) clientBody() []byte { return c.body }

func (c *responsesCall) logKey() (key, owner string) {
	return responsesStreamKey(c.owner, c.resp.ID), c.owner
}

// sink translates the answer as it is written: a stream's chunks into
// events, a whole answer into a response object. A response the request
// asks to store is stored before its last event or its body is written,
// so a client that sends the next turn at once finds it; a resumable
// stream's, also when it starts (read in_progress while it runs).
func (c *responsesCall) sink(w http.ResponseWriter, ew eventWriter, resumable bool) sink {
	var onEnd func(*responses.Response)
	if c.req.Stored() {
		refs := c.req.References()
		onEnd = func(resp *responses.Response) {
			reportStored(w, ew != nil, c.h.storeResponse(c.r.Context(), c.owner, resp, c.input, c.own, refs))
		}
	}
	render := func(completion []byte) ([]byte, error) {
		if err := responses.FromCompletion(c.resp, completion); err != nil {
			return nil, err
		}
		if onEnd != nil {
			onEnd(c.resp)
		}
		return c.resp.JSON(), nil
	}
	if ew == nil {
		return &jsonSink{w: w, render: render}
	}
	c.out = &responsesSink{w: w, ew: ew, stream: responses.NewStream(c.resp), onEnd: onEnd, render: render}
	if resumable {
		c.out.onStart = onEnd
	}
	return c.out
}

func (c *responsesCall) close() {
	if c.out != nil {
		c.out.cut()
	}
}

// responsesEnding ends a Responses stream the gateway cut with an error
// event, numbered as the event at position n is (sequence number n-1).
func responsesEnding(dst []byte, n int, e *chat.Error) []byte { return appendErrorEvent(dst, n-1, e) }

// responsesSink writes a chat completion stream as the Responses API's
// events: each chunk translated as it comes (responses.Stream), each event
// written through the door's eventWriter.
type responsesSink struct {
	w       http.ResponseWriter // for an answer passed on whole
	ew      eventWriter
	stream  *responses.Stream
	pending http.Header
	buf     []byte
	// onStart, when set, is told of the response before its first event;
	// onEnd before its last. told reports that onEnd was.
	onStart, onEnd func(*responses.Response)
	told           bool
	// render makes an answer passed on whole a response object.
	render func([]byte) ([]byte, error)
}

func (s *responsesSink) header(h http.Header) { s.pending = h }

// open starts the stream: response.created and response.in_progress.
func (s *responsesSink) open() error {
	if s.ew.opened() {
		return nil
	}
	if s.onStart != nil {
		s.onStart(s.stream.Response())
	}
	s.ew.open(s.pending)
	return s.write(s.stream.Start(s.buf[:0]))
}

// write writes the events of out one by one; the response is told to
// onEnd before the last is.
func (s *responsesSink) write(out []byte) error {
	s.buf = out
	if s.stream.Ended() {
		s.tell()
	}
	var err error
	for ev := range s.stream.Events(out) {
		if werr := s.ew.event(ev); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

func (s *responsesSink) tell() {
	if !s.told && s.onEnd != nil {
		s.told = true
		s.onEnd(s.stream.Response())
	}
}

// chunk translates one chunk; one the translation cannot read ends the
// stream with an error, and nothing after the end is written.
func (s *responsesSink) chunk(data, ext []byte) error {
	if err := s.open(); err != nil || s.stream.Ended() {
		return err
	}
	out, err := s.stream.Chunk(s.buf[:0], data, ext)
	if err != nil {
		out = s.stream.Fail(out, chat.AsError(err))
	}
	return s.write(out)
}

func (s *responsesSink) done() error {
	if err := s.open(); err != nil {
		return err
	}
	if !s.stream.Ended() {
		if err := s.write(s.stream.End(s.buf[:0])); err != nil {
			return err
		}
	}
	return s.ew.flush()
}

func (s *responsesSink) fail(e *chat.Error) {
	if s.open() == nil && !s.stream.Ended() {
		_ = s.write(s.stream.Fail(s.buf[:0], e))
	}
	_ = s.ew.flush()
}

func (s *responsesSink) comment(line []byte) error {
	if err := s.open(); err != nil {
		return err
	}
	return s.ew.comment(line)
}

func (s *responsesSink) finish() error   { return s.ew.flush() }
func (s *responsesSink) flush() error    { return s.ew.flush() }
func (s *responsesSink) committed() bool { return s.ew.opened() }
func (s *responsesSink) whole(status int, h http.Header, body []byte) error {
	return writeRendered(s.w, status, h, body, s.render, nil)
}

// cut stores, failed, a response that was stored in_progress when its
// stream started and did not end: its client left and it was not kept for
// a resume.
func (s *responsesSink) cut() {
	if s.ew.opened() && s.onStart != nil && !s.stream.Ended() {
		s.stream.Fail(nil, errStreamCut)
		s.tell()
	}
}

// errStreamCut is the error of a stored response whose stream ended
// before its end: its client left and the stream was not kept for a
// resume.
var errStreamCut = &chat.Error{Status: statusClientClosed, Type: chat.TypeServer, Code: "stream_cut",
	Message: "the stream of this response ended before its end: its client left"}
