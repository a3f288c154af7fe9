package proxy

import (
	"bytes"
	"context"
	"net/http"
	"strings"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/responses"
)

// responsesWriter is the response writer the chat pipeline writes to for
// a request that came by the Responses door: it translates, as they are
// written, a chat stream's events into Responses events and a
// chat.completion into a response object. Anything else (an error before
// the first byte, in OpenAI's shape on both APIs) passes through. It is
// owned by one request.
type responsesWriter struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	stream *responses.Stream
	// onEnd, when set, is told of the response before its last event or
	// its body is written; onStart of a stream's response before its
	// first event.
	onEnd, onStart func(*responses.Response)
	// resume, when set, keeps the stream's events for a resume and keeps
	// it going when the client leaves; nil once its log was refused.
	resume *responsesLog
	ctx    context.Context
	mode   writerMode
	// in holds the bytes written and not yet translated: a partial event
	// of a stream, or the whole body of a completion.
	in  []byte
	out []byte
	err error
}

type writerMode int

const (
	modeUndecided writerMode = iota
	modePass
	modeStream
	modeJSON
)

func newResponsesWriter(ctx context.Context, w http.ResponseWriter, resp *responses.Response) *responsesWriter {
	return &responsesWriter{ctx: ctx, w: w, rc: http.NewResponseController(w), stream: responses.NewStream(resp)}
}

func (rw *responsesWriter) Header() http.Header { return rw.w.Header() }

// WriteHeader decides the translation by what the pipeline answers: an
// event stream, a JSON completion, or an error that passes.
func (rw *responsesWriter) WriteHeader(status int) {
	if rw.mode != modeUndecided {
		return
	}
	ct := rw.w.Header().Get("Content-Type")
	switch {
	case status != http.StatusOK:
		rw.mode = modePass
		rw.w.WriteHeader(status)
	case strings.HasPrefix(ct, "text/event-stream"):
		rw.mode = modeStream
		rw.w.Header().Del("Content-Length")
		if rw.resume != nil && !rw.resume.start(rw.ctx, rw.w.Header(), rw.stream.Response().ID) {
			rw.resume = nil
		}
		if rw.onStart != nil {
			rw.onStart(rw.stream.Response())
		}
		rw.w.WriteHeader(status)
		rw.out = rw.stream.Start(rw.out[:0])
		rw.emit()
	default:
		rw.mode = modeJSON
	}
}

func (rw *responsesWriter) Write(b []byte) (int, error) {
	if rw.mode == modeUndecided {
		rw.WriteHeader(http.StatusOK)
	}
	switch rw.mode {
	case modePass:
		return rw.w.Write(b)
	case modeJSON:
		rw.in = append(rw.in, b...)
		return len(b), nil
	}
	rw.in = append(rw.in, b...)
	rw.out = rw.out[:0]
	start := 0
	for {
		i := bytes.Index(rw.in[start:], []byte("\n\n"))
		if i < 0 {
			break
		}
		rw.event(rw.in[start : start+i])
		start += i + 2
	}
	rw.in = append(rw.in[:0], rw.in[start:]...)
	rw.emit()
	if rw.err != nil {
		return 0, rw.err
	}
	return len(b), nil
}

// event translates one SSE event of the chat stream onto out. Comments
// (keep-alives) pass as they are.
func (rw *responsesWriter) event(ev []byte) {
	if len(ev) > 0 && ev[0] == ':' {
		rw.out = append(append(rw.out, ev...), "\n\n"...)
		return
	}
	// One data line is the rule (the gateway writes chunks as one line);
	// only several are joined, in a copy.
	var data []byte
	lines := 0
	for line := range bytes.SplitSeq(ev, []byte("\n")) {
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			if lines++; lines == 1 {
				data = d
			} else {
				data = append(append(bytes.Clone(data), '\n'), d...)
			}
		}
	}
	if data == nil || rw.stream.Ended() {
		return
	}
	if string(data) == chat.Done {
		rw.end()
		return
	}
	out, err := rw.stream.Chunk(rw.out, data, nil)
	if err != nil {
		out = rw.stream.Fail(out, chat.AsError(err))
	}
	rw.out = out
	if rw.stream.Ended() && rw.onEnd != nil {
		rw.onEnd(rw.stream.Response())
	}
}

// end ends a stream that finished: the response stored, then its last
// events.
func (rw *responsesWriter) end() {
	rw.out = rw.stream.End(rw.out)
	if rw.onEnd != nil {
		rw.onEnd(rw.stream.Response())
	}
}

func (rw *responsesWriter) emit() {
	if rw.err != nil || len(rw.out) == 0 {
		return
	}
	if l := rw.resume; l != nil {
		rw.err = l.keep(rw.out)
		if !l.gone {
			_, err := rw.w.Write(rw.out)
			l.left(err)
		}
		rw.out = rw.out[:0]
		return
	}
	_, rw.err = rw.w.Write(rw.out)
	rw.out = rw.out[:0]
}

// FlushError flushes what was translated to the client; for a resumable
// stream, a client gone is no failure.
func (rw *responsesWriter) FlushError() error {
	if rw.mode == modeJSON {
		return nil
	}
	if l := rw.resume; l != nil {
		if !l.gone {
			l.left(rw.rc.Flush())
		}
		return nil
	}
	return rw.rc.Flush()
}

// close ends the translation once the pipeline is done: a completion is
// translated and written whole.
func (rw *responsesWriter) close() {
	if rw.resume != nil {
		rw.resume.close()
	}
	if rw.mode == modeStream && rw.onStart != nil && !rw.stream.Ended() {
		// Stored in_progress at its start, it is stored failed, not left
		// running.
		rw.stream.Fail(nil, errStreamCut)
		rw.onEnd(rw.stream.Response())
	}
	if rw.mode != modeJSON {
		return
	}
	resp := rw.stream.Response()
	if err := responses.FromCompletion(resp, rw.in); err != nil {
		writeJSONError(rw.w, &chat.Error{Status: http.StatusBadGateway, Type: chat.TypeUpstream, Code: "bad_upstream_response",
			Message: "the upstream's answer could not be read as a chat completion"})
		return
	}
	if rw.onEnd != nil {
		rw.onEnd(resp)
	}
	rw.w.Header().Del("Content-Length")
	rw.w.WriteHeader(http.StatusOK)
	_, _ = rw.w.Write(resp.JSON())
}

// errStreamCut is the error of a stored response whose stream ended
// before its end: its client left and the stream was not kept for a
// resume.
var errStreamCut = &chat.Error{Status: statusClientClosed, Type: chat.TypeServer, Code: "stream_cut",
	Message: "the stream of this response ended before its end: its client left"}
