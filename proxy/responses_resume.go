package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/store"
)

// A resumable Responses stream keeps its events as its client got them:
// the log (the same store and recorder as a chat stream's, under a key of
// the response id) holds the data of each translated event, position N
// for sequence_number N-1. The translation runs once, live, and a replay
// writes back what it made, byte for byte; the chat chunks the pipeline
// wrote to the translator are not kept (the chat route's log of the same
// request is off), so the stream has one log and one owner of it: this
// door.

// responsesStreamKey is the key of the log of response id in the store
// of streams: its own namespace, so no X-Request-Id of the chat route
// names it.
func responsesStreamKey(owner, id string) string { return "responses:" + owner + ":" + id }

// responsesLog records the events of one resumable Responses stream and
// tells whether its client is still there. It is owned by one request.
type responsesLog struct {
	h     *Handler
	owner string
	log   *slog.Logger
	rec   *eventRecorder
	// gone reports that the client left; full that the events kept
	// reached RESUME_MAX_BYTES.
	gone, full bool
}

// start opens the log of response id when its stream starts, and says
// so in header; false when the store refuses it (logged and counted), and
// the stream goes on without resume.
func (l *responsesLog) start(ctx context.Context, header http.Header, id string) bool {
	h := l.h
	key := responsesStreamKey(l.owner, id)
	l.log = h.log.With("response_id", id)
	if err := h.streams.Start(ctx, key, l.owner); err != nil {
		h.metrics.Resumable(metrics.ResumeDegraded)
		if errors.Is(err, store.ErrFull) {
			h.metrics.Resumable(metrics.ResumeMemoryFull)
		} else {
			h.metrics.StoreFailed(metrics.StoreResume)
		}
		l.log.Warn("stream served without resume: the store of streams refused it", "error", err)
		header.Set("X-Phasegate-Resumable", "false")
		return false
	}
	h.metrics.Resumable(metrics.ResumeStarted)
	header.Set("X-Phasegate-Resumable", "true")
	l.rec = startRecorder(h, key, l.log, func(dst []byte, _ int, e *chat.Error) []byte { return append(dst, e.Body()...) })
	return true
}

// keep records the events of out (whole events; comments are the
// connection's own and are not kept). Its error ends the stream: its
// client left and its events outgrew RESUME_MAX_BYTES.
func (l *responsesLog) keep(out []byte) error {
	for ev := range bytes.SplitSeq(out, []byte("\n\n")) {
		_, data, ok := bytes.Cut(ev, []byte("\ndata: "))
		if !ok {
			continue
		}
		if _, kept := l.rec.add(bytes.Clone(data), -1, l.h.cfg.Resume.MaxBytes); !kept && !l.full {
			l.full = true
			l.rec.keepEnding(errResumeTooLargeEvent)
			l.h.metrics.Resumable(metrics.ResumeTooLarge)
			l.log.Warn("resumable stream outgrew RESUME_MAX_BYTES; its later events are not kept", "max_bytes", l.h.cfg.Resume.MaxBytes)
		}
	}
	if l.gone && l.full {
		return errResumeTooLarge
	}
	return nil
}

// left notes that a write to the client failed: it left, the stream
// goes on.
func (l *responsesLog) left(err error) {
	if err != nil && !l.gone {
		l.gone = true
		l.h.metrics.Resumable(metrics.ResumeClientGone)
		l.log.Info("client left a resumable stream; reading on for a resume")
	}
}

// close stores the log's end and waits for it.
func (l *responsesLog) close() {
	if l.rec != nil {
		l.rec.close()
	}
}

// streamResponse serves GET /v1/responses/{id}?stream=true: the events of
// the resumable stream of response id after sequence number
// starting_after (all of them without it), then the live stream until it
// ends, from the store any replica writes to.
func (h *Handler) streamResponse(w http.ResponseWriter, r *http.Request, id string) {
	after := 0
	if v := r.URL.Query().Get("starting_after"); v != "" {
		n, cerr := startingAfter(v)
		if cerr != nil {
			writeJSONError(w, cerr)
			return
		}
		after = n + 1 // sequence number n is at position n+1
	}
	owner := h.responsesOwner(r)
	key := responsesStreamKey(owner, id)
	info, err := h.streams.Info(r.Context(), key)
	if err == nil {
		err = h.notDeleted(r.Context(), owner, id)
	}
	switch {
	case err == nil && info.Owner != owner, errors.Is(err, store.ErrNotFound):
		writeJSONError(w, responseError(store.ErrNotFound, id))
		return
	case err != nil:
		h.metrics.StoreFailed(metrics.StoreResume)
		h.log.Warn("shared store failed; resume answered 503", "response_id", id, "error", err)
		writeJSONError(w, errResumeUnavailable)
		return
	}
	release, ok := h.takeFollower(w)
	if !ok {
		return
	}
	defer release()
	h.followResponse(w, r, key, after)
}

// notDeleted is nil unless response id was deleted (store.ErrNotFound)
// or the store of responses fails.
func (h *Handler) notDeleted(ctx context.Context, owner, id string) error {
	_, err := h.stored.Get(ctx, deletedKey(owner, id))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err == nil:
		return store.ErrNotFound
	}
	return err
}

// followResponse writes the log key after position after, and follows it.
func (h *Handler) followResponse(w http.ResponseWriter, r *http.Request, key string, after int) {
	h.metrics.Resumable(metrics.ResumeReplayed)
	var until time.Time
	if d := h.followLimit(); d > 0 {
		until = time.Now().Add(d)
	}
	sw := newSSEWriter(w)
	sw.coalesce, sw.named, sw.seq = true, true, after
	sw.start(nil)
	_ = sw.rc.Flush() // the headers, before a wait for the first event
	last, err := h.follow(r.Context(), sw, key, after, false, until)
	if e := h.followEnded(r.Context(), key, last, err); e != nil {
		sw.buf = appendErrorEvent(sw.buf, sw.seq, e)
	}
	_ = sw.flush()
}

// replay writes one event read from a stream's log. A Responses log
// holds the data of each event, whose type its event: line repeats; an
// error the gateway kept in the chat shape (a log cut short) is written
// as a Responses error event, numbered next after the event before it.
func (s *sseWriter) replay(ev store.Event) error {
	if !s.named {
		return s.event(ev.Data)
	}
	s.start(nil)
	typ, ok := eventType(ev.Data)
	if !ok {
		var body struct {
			Error *chat.Error `json:"error"`
		}
		if json.Unmarshal(ev.Data, &body) != nil || body.Error == nil {
			body.Error = errResumeIncomplete
		}
		s.buf = appendErrorEvent(s.buf, s.seq, body.Error)
		s.seq++
		return s.queued()
	}
	s.seq = ev.N // the event at position N is sequence number N-1
	s.buf = append(append(append(s.buf, "event: "...), typ...), "\ndata: "...)
	s.buf = append(append(s.buf, ev.Data...), '\n', '\n')
	return s.queued()
}

// eventType is the type of a Responses event's data: its first key.
func eventType(data []byte) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"type":"`))
	if !ok {
		return nil, false
	}
	i := bytes.IndexByte(rest, '"')
	return rest[:max(i, 0)], i > 0
}

// appendErrorEvent appends the Responses error event e, sequence number
// seq.
func appendErrorEvent(dst []byte, seq int, e *chat.Error) []byte {
	b, _ := json.Marshal(struct {
		Type           string  `json:"type"`
		SequenceNumber int     `json:"sequence_number"`
		Code           *string `json:"code"`
		Message        string  `json:"message"`
		Param          *string `json:"param"`
	}{Type: "error", SequenceNumber: seq, Code: nonEmpty(e.Code), Message: e.Message, Param: nonEmpty(e.Param)})
	return append(append(append(dst, "event: error\ndata: "...), b...), '\n', '\n')
}

// nonEmpty is v when it is a string other than "", else nil.
func nonEmpty(v any) *string {
	if s, ok := v.(string); ok && s != "" {
		return &s
	}
	return nil
}

// inProgress is the error of a previous_response_id whose response is
// still generating.
func inProgress(id string) *chat.Error {
	return chat.InvalidRequest("previous_response_id", "Previous response with id %s is still in progress; wait for it to complete", strconv.Quote(id))
}
