package proxy

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/jsonscan"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/store"
)

// ErrCancelled ends a resumable stream cancelled through POST
// /v1/phasegate/requests/{request_id}/cancel, on any replica.
var ErrCancelled = errors.New("request cancelled")

// resumable reports whether a streamed request opted in to be resumable;
// a header that is neither true nor false is a 400.
func (h *Handler) resumable(r *http.Request, stream bool) (bool, error) {
	v := r.Header.Get("X-Phasegate-Resumable")
	switch v {
	case "":
		return stream && h.cfg.Resume.All, nil
	case "true", "false":
		return stream && v == "true", nil
	}
	return false, chat.InvalidRequest("", "header X-Phasegate-Resumable must be true or false, got %q", v)
}

// owner is who may resume or cancel a stream the request starts: its
// client when the gateway has client keys, anyone ("") otherwise.
func (h *Handler) owner(r *http.Request) string {
	if len(h.keys.digests) == 0 {
		return ""
	}
	return clientID(r)
}

// streamKey is the key the stream a client calls id is kept under.
// Request ids are the clients' to choose, so with client keys each client
// has ids of its own: one that sends another's X-Request-Id neither
// collides with that stream nor learns that it exists. The chat route's
// keys have a namespace of their own, apart from the Responses API's
// (responsesStreamKey): no X-Request-Id names a Responses stream.
func (h *Handler) streamKey(r *http.Request, id string) string {
	return "chat:" + h.owner(r) + ":" + id
}

// startResumable opens the log of a resumable stream, under the key its
// door names, and detaches ctx from the client's connection: a client that
// leaves no longer ends the request, REQUEST_TIMEOUT, a cancel or a
// shutdown still do. It returns the door's sink inside the resumable
// wrapper, the context to run under, and a release func; a store that
// fails leaves the stream plain (the door's sink on sw, ctx unchanged),
// logged and counted.
func (c *chatRequest) startResumable(ctx context.Context, sw *sseWriter) (sink, context.Context, func()) {
	h := c.h
	key, owner := c.in.logKey()
	if err := h.streams.Start(ctx, key, owner); err != nil {
		h.metrics.Resumable(metrics.ResumeDegraded)
		switch {
		case errors.Is(err, store.ErrExists):
			c.log.Info("stream served without resume: its X-Request-Id already names a resumable stream")
		case errors.Is(err, store.ErrFull):
			h.metrics.Resumable(metrics.ResumeMemoryFull)
			c.log.Warn("stream served without resume: the events kept of resumable streams reached RESUME_MEMORY_BYTES")
		default:
			h.metrics.StoreFailed(metrics.StoreResume)
			c.log.Warn("shared store failed; stream served without resume", "error", err)
		}
		c.w.Header().Set("X-Phasegate-Resumable", "false")
		return c.in.sink(c.w, sw, false), ctx, func() {}
	}
	h.metrics.Resumable(metrics.ResumeStarted)
	c.w.Header().Set("X-Phasegate-Resumable", "true")
	detached, cancel, release := detach(ctx)
	unregister := h.running.add(key, cancel)
	rec := startRecorder(h, key, c.log, c.door.end)
	rw := &resumeWriter{sse: sw, rec: rec, ids: c.r.Header.Get("X-Phasegate-Event-Ids") == "true", maxBytes: h.cfg.Resume.MaxBytes, phase: -1}
	c.resume = &resumable{sink: c.in.sink(c.w, rw, true), w: rw}
	return c.resume, detached, func() {
		rec.close()
		unregister()
		release()
	}
}

// detach returns a context that a client leaving does not end: ctx's
// values and deadline, cancelled by cancel, or by a shutdown (with the
// cause the stream answers in-band). release frees what it holds.
func detach(ctx context.Context) (detached context.Context, cancel context.CancelCauseFunc, release func()) {
	base, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	detached, stopDeadline := base, context.CancelFunc(func() {})
	if d, ok := ctx.Deadline(); ok {
		detached, stopDeadline = context.WithDeadlineCause(base, d, ErrRequestTimeout)
	}
	stopShutdown := context.AfterFunc(ctx, func() {
		if cause := context.Cause(ctx); errors.Is(cause, protocol.ErrShuttingDown) {
			cancel(cause)
		}
	})
	return detached, cancel, func() {
		stopShutdown()
		stopDeadline()
		cancel(nil)
	}
}

// running are the resumable streams this replica serves, by request id,
// so a cancel (from this replica or another) can stop them.
type running struct {
	mu   sync.Mutex
	byID map[string]context.CancelCauseFunc
}

func (r *running) add(id string, cancel context.CancelCauseFunc) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = map[string]context.CancelCauseFunc{}
	}
	r.byID[id] = cancel
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.byID, id)
	}
}

// cancel stops the stream id if this replica serves it.
func (r *running) cancel(id string) {
	r.mu.Lock()
	cancel := r.byID[id]
	r.mu.Unlock()
	if cancel != nil {
		cancel(ErrCancelled)
	}
}

// resumable is the wrapper that makes any door's stream resumable. The
// door's sink writes its events to a resumeWriter, which numbers and logs
// each, byte for byte as the client reads it, and writes it to the client
// while it is there: one log, of the door's own events, kept by one owner.
// A client that leaves does not end the stream; RESUME_MAX_BYTES does.
// The wrapper adds what only a resumable stream does: the phase each
// event starts (for a resume from a phase), the end of a cancelled
// stream, and the answer of one that failed before its first event.
type resumable struct {
	sink // the door's, writing to w
	w    *resumeWriter
	// first is the first chunk, for the header of a finish the gateway
	// writes on a cancel; finished that a finish was written.
	first    []byte
	finished bool
}

func (s *resumable) identify(i *identity) { identify(s.sink, i) }

func (s *resumable) chunk(data, ext []byte) error {
	if s.first == nil {
		s.first = bytes.Clone(data)
	}
	s.finished = s.finished || hasFinish(data)
	meta := ext // the guard writes some chunks with their metadata in them
	if meta == nil {
		meta = data
	}
	if i, ok := phaseIndex(meta); ok {
		s.w.phase = i
	}
	err := s.sink.chunk(data, ext)
	s.w.phase = -1
	return err
}

// cancelled ends a stream cancelled through the cancel route as the door
// ends its streams: one finish, unless one was written, and its end.
func (s *resumable) cancelled() {
	if !s.finished {
		var hdr chat.Chunk
		if s.first != nil {
			hdr, _ = chat.DecodeChunk(s.first)
		}
		stop := "stop"
		out := chat.ChunkHeader{ID: hdr.ID, Created: hdr.Created, Model: hdr.Model}.NewChunk()
		out.Choices = []chat.OutChoice{{Delta: chat.OutDelta{}, FinishReason: &stop}}
		if b, err := out.AppendJSON(nil); err == nil {
			_ = s.sink.chunk(b, nil)
		}
	}
	_ = s.sink.done()
}

// refused keeps the answer of a stream that failed before its first
// event: a resume answers the error this client gets.
func (s *resumable) refused(status int, body []byte) { s.w.rec.failed(status, body) }

// resumeWriter is the eventWriter of a resumable stream: every event is
// numbered and kept, and written to the client while it is there.
type resumeWriter struct {
	sse *sseWriter
	rec *eventRecorder
	// ids writes an "id: N" line before each event
	// (X-Phasegate-Event-Ids: true).
	ids bool
	// gone reports that the client left.
	gone     bool
	maxBytes int64
	// full reports that the kept events reached maxBytes.
	full bool
	// phase is the phase index of the chunk being written, -1 when none:
	// its first event starts that phase, if it is new.
	phase int
}

// errResumeTooLarge ends a stream whose client left once its events
// outgrow RESUME_MAX_BYTES; errResumeTooLargeEvent is the in-band error a
// resume of it ends with.
var (
	errResumeTooLarge      = errors.New("resumable stream outgrew RESUME_MAX_BYTES")
	errResumeTooLargeEvent = &chat.Error{Status: http.StatusInsufficientStorage, Type: chat.TypeServer, Code: "resume_too_large",
		Message: "this stream outgrew the events the gateway keeps for a resume (RESUME_MAX_BYTES); its later events were not kept"}
)

func (w *resumeWriter) open(h http.Header) { w.sse.start(h) }
func (w *resumeWriter) opened() bool       { return w.sse.started }

// event keeps one event and writes it to the client, if there.
func (w *resumeWriter) event(b []byte) error {
	n, kept := w.rec.add(bytes.Clone(b), w.phase, w.maxBytes)
	w.phase = -1
	if !kept && !w.full {
		// The last event kept says why a resume ends here.
		w.full = true
		w.rec.keepEnding(errResumeTooLargeEvent)
		w.rec.h.metrics.Resumable(metrics.ResumeTooLarge)
		w.rec.log.Warn("resumable stream outgrew RESUME_MAX_BYTES; its later events are not kept", "max_bytes", w.maxBytes)
	}
	if w.gone {
		if w.full {
			return errResumeTooLarge
		}
		return nil
	}
	w.sse.start(nil)
	if w.ids {
		w.sse.buf = append(append(w.sse.buf, "id: "...), strconv.Itoa(n)...)
		w.sse.buf = append(w.sse.buf, '\n')
	}
	w.clientFailed(w.sse.event(b))
	return nil
}

// comment writes a comment to the client, if there; it is not kept.
func (w *resumeWriter) comment(line []byte) error {
	if !w.gone {
		w.clientFailed(w.sse.comment(line))
	}
	return nil
}

// flush writes what was gathered to the client, if there; a failed write
// means the client left, not that the stream failed.
func (w *resumeWriter) flush() error {
	if !w.gone {
		w.clientFailed(w.sse.flush())
	}
	return nil
}

// clientFailed notes a failed write: the client left, the stream goes on.
func (w *resumeWriter) clientFailed(err error) {
	if err != nil && !w.gone {
		w.gone = true
		w.rec.h.metrics.Resumable(metrics.ResumeClientGone)
		w.rec.log.Info("client left a resumable stream; reading on for a resume")
	}
}

// eventRecorder numbers the events of a resumable stream and appends them
// to the log in batches, from a goroutine of its own that close waits for:
// the stream never waits on the store's round trips. A batch the store
// fails to take is sent again with the next ones (appends skip what is
// stored), for up to storeRetryFor; past that the stream goes on, its
// later events are dropped, and the log ends with an in-band error
// (resume_incomplete) and its end, so a resume ends rather than waits.
type eventRecorder struct {
	h   *Handler
	id  string
	log *slog.Logger
	// ending is the door's (door.end): the log's own error, when it ends
	// short, is written as the door writes it.
	ending func(dst []byte, n int, e *chat.Error) []byte
	n      int
	// kept is the position of the last event kept (the stream's
	// goroutine's); stored that of the last the store took (run's).
	kept, stored int
	bytes        int64
	ch           chan store.Event
	done         chan struct{}
	phase        int
	// full reports that an event was not kept: RESUME_MAX_BYTES.
	full bool
	// lost, when set, is why some events were not kept, other than a
	// store that failed (errResumeIncomplete): the in-band error the log
	// ends with.
	lost *chat.Error
	// failStatus and failBody are the error of a stream that failed
	// before its first event (see failed).
	failStatus int
	failBody   []byte
}

// failed notes that the stream failed before its first event, answered
// status and body: the log keeps them (store's Fail) instead of an empty
// end. Called before close, from the stream's goroutine.
func (r *eventRecorder) failed(status int, body []byte) {
	if r.n == 0 {
		r.failStatus, r.failBody = status, body
	}
}

func startRecorder(h *Handler, id string, log *slog.Logger, ending func([]byte, int, *chat.Error) []byte) *eventRecorder {
	r := &eventRecorder{h: h, id: id, log: log, ending: ending, ch: make(chan store.Event, 1024), done: make(chan struct{}), phase: -1}
	go r.run()
	return r
}

// add numbers and queues one event, which starts phase when that is a
// phase index other than the last one's (-1: none); false when it would
// pass maxBytes, and is not kept.
func (r *eventRecorder) add(data []byte, phase int, maxBytes int64) (int, bool) {
	r.n++
	ev := store.Event{N: r.n, Data: data}
	if phase >= 0 && phase != r.phase {
		r.phase = phase
		ev.PhaseStart, ev.PhaseIndex = true, phase
	}
	if r.full || r.bytes+int64(len(data)) > maxBytes {
		r.full = true // nothing after a gap is kept
		return r.n, false
	}
	r.bytes += int64(len(data))
	r.kept = r.n
	r.ch <- ev
	return r.n, true
}

// keepEnding queues, past maxBytes, one last event: the door's ending
// with e, at the next position.
func (r *eventRecorder) keepEnding(e *chat.Error) {
	r.n++
	r.ch <- store.Event{N: r.n, Data: r.ending(nil, r.kept+1, e)}
	r.kept = r.n
}

// close queues the end and waits for every event to be stored (or
// dropped): at most a round trip per batch, each bounded by the store's
// timeouts.
func (r *eventRecorder) close() {
	close(r.ch)
	<-r.done
}

func (r *eventRecorder) run() {
	defer close(r.done)
	ctx := context.Background()
	var pending []store.Event // taken from r.ch, not stored yet
	var failingSince time.Time
	broken := false
	batch := make([]store.Event, 0, appendBatch)
	keep := time.NewTicker(r.keepEvery())
	defer keep.Stop()
	for {
		var more bool
		batch, more = r.next(batch[:0], keep.C)
		if !more {
			break
		}
		if broken {
			continue
		}
		pending = append(pending, batch...)
		start := time.Now()
		err := r.append(ctx, pending, false) // none: keeps the log
		keep.Reset(r.keepEvery())
		if err == nil {
			pending, failingSince = pending[:0], time.Time{}
			continue
		}
		if r.lostTo(err) {
			broken = true
			continue
		}
		if failingSince.IsZero() {
			failingSince = start
		}
		if time.Since(failingSince) >= storeRetryFor {
			broken = true
			r.gaveUp()
		}
	}
	r.end(ctx, pending, broken, failingSince)
}

// end stores what the recording loop left: the events still pending and
// the end of the log, or, when the log was lost or broken, the error it
// ends with after the events it has.
func (r *eventRecorder) end(ctx context.Context, pending []store.Event, broken bool, failingSince time.Time) {
	if r.failStatus != 0 {
		r.fail(ctx)
		return
	}
	if !broken {
		if failingSince.IsZero() {
			failingSince = time.Now()
		}
		if r.appendRetrying(ctx, pending, true, failingSince.Add(storeRetryFor)) {
			return
		}
		if r.lost == nil {
			r.gaveUp()
		}
	}
	if r.lost == errResumeExpired {
		return // no log left to end
	}
	// The log misses events: it ends with an error after those it has.
	lost := r.lost
	if lost == nil {
		lost = errResumeIncomplete
	}
	r.n++
	r.appendRetrying(ctx, []store.Event{{N: r.n, Data: r.ending(nil, r.stored+1, lost)}}, true, time.Now().Add(storeRetryFor))
}

// fail stores the error of a stream that failed before its first event,
// sending it again after a failure for up to storeRetryFor.
func (r *eventRecorder) fail(ctx context.Context) {
	deadline := time.Now().Add(storeRetryFor)
	for {
		err := r.h.streams.Fail(ctx, r.id, r.failStatus, r.failBody)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.gaveUp()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lostTo reports whether err means the store takes no more of this
// stream's events: its memory is full (RESUME_MEMORY_BYTES), or it
// forgot the log. It notes why in r.lost, once.
func (r *eventRecorder) lostTo(err error) bool {
	why := errResumeMemoryFull
	switch {
	case errors.Is(err, store.ErrFull):
	case errors.Is(err, store.ErrNotFound):
		why = errResumeExpired
	default:
		return false
	}
	if r.lost != nil {
		return true
	}
	r.lost = why
	if why == errResumeExpired {
		r.h.metrics.StoreFailed(metrics.StoreResume)
		r.log.Warn("the shared store forgot the events of a running stream; the rest of it cannot be resumed")
		return true
	}
	r.h.metrics.Resumable(metrics.ResumeMemoryFull)
	r.log.Warn("the events kept of resumable streams reached RESUME_MEMORY_BYTES; the rest of this stream cannot be resumed")
	return true
}

// errResumeIncomplete is the in-band error a resume ends with when the
// store failed to take some of the stream's events.
var errResumeIncomplete = &chat.Error{Status: http.StatusServiceUnavailable, Type: chat.TypeServer, Code: "resume_incomplete",
	Message: "the shared store failed while this stream was recorded; its later events were not kept, so this resume ends here"}

// errResumeMemoryFull is the in-band error a resume ends with when the
// events of all streams kept in this process reached RESUME_MEMORY_BYTES
// while this one was recorded.
var errResumeMemoryFull = &chat.Error{Status: http.StatusInsufficientStorage, Type: chat.TypeServer, Code: "resume_memory_full",
	Message: "the gateway's memory for resumable streams was full (RESUME_MEMORY_BYTES); this stream's later events were not kept, so this resume ends here"}

// storeRetryFor is how long the recorder sends again what the store failed
// to take before it gives up, and then how long it tries to store the
// error and the end: with a store that hangs, close waits about twice
// that, plus a round trip's timeouts.
const storeRetryFor = 3 * time.Second

func (r *eventRecorder) gaveUp() {
	r.h.metrics.StoreFailed(metrics.StoreResume)
	r.log.Warn("shared store failed; the rest of this stream cannot be resumed")
}

// appendRetrying stores batch, sending it again after a failure until
// deadline; true when it was stored. A store that is full, or forgot the
// log, is not asked again.
func (r *eventRecorder) appendRetrying(ctx context.Context, batch []store.Event, end bool, deadline time.Time) bool {
	for {
		err := r.append(ctx, batch, end)
		if err == nil {
			return true
		}
		if r.lostTo(err) {
			return false
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Events are appended in batches of up to appendBatch, each sent at most
// appendLinger after its first event: a model streams a token every few
// tens of milliseconds, and a round trip per token would cost more CPU
// than the event itself. A resume following live sees events that much
// later; the end of a stream is sent at once.
const (
	appendBatch  = 256
	appendLinger = 50 * time.Millisecond
)

// next waits for the stream's next events and adds them to batch; false
// once the stream ended. A stream may be quiet for longer than RESUME_TTL
// (a model that thinks, a held request): when keep ticks first, next
// returns no event, and the empty append that follows keeps the log
// another RESUME_TTL.
func (r *eventRecorder) next(batch []store.Event, keep <-chan time.Time) ([]store.Event, bool) {
	select {
	case ev, ok := <-r.ch:
		if !ok {
			return batch, false
		}
		return r.collect(append(batch, ev)), true
	case <-keep:
		return batch, true
	}
}

// keepEvery is how long the recorder lets the log of a quiet stream go
// without an append: a third of RESUME_TTL, so two may fail before the
// log expires.
func (r *eventRecorder) keepEvery() time.Duration {
	return max(r.h.cfg.Resume.TTL/3, time.Millisecond)
}

// collect adds to batch the events that come within appendLinger, up to
// a batch's worth, or until the stream ends.
func (r *eventRecorder) collect(batch []store.Event) []store.Event {
	t := time.NewTimer(appendLinger)
	defer t.Stop()
	for len(batch) < cap(batch) {
		select {
		case ev, ok := <-r.ch:
			if !ok {
				return batch
			}
			batch = append(batch, ev)
		case <-t.C:
			return batch
		}
	}
	return batch
}

// append stores a batch.
func (r *eventRecorder) append(ctx context.Context, batch []store.Event, end bool) error {
	err := r.h.streams.Append(ctx, r.id, batch, end)
	if err == nil && len(batch) > 0 {
		r.stored = batch[len(batch)-1].N
	}
	if err != nil && !errors.Is(err, store.ErrFull) && !errors.Is(err, store.ErrNotFound) {
		r.log.Debug("shared store failed to take events; they are sent again", "events", len(batch), "error", err)
	}
	return err
}

// hasFinish reports whether a chunk has a finish reason: a key
// finish_reason, whitespace around its colon or not, whose value is a
// string.
func hasFinish(chunk []byte) bool { return jsonscan.HasString(chunk, "finish_reason") }

// phaseIndex reads the phase_index of a chunk's phase metadata without
// decoding it: the value of the last key of that name (the metadata comes
// last, written by the gateway).
func phaseIndex(chunk []byte) (int, bool) {
	v := jsonscan.LastKey(chunk, "phase_index")
	if v < 0 {
		return 0, false
	}
	end := jsonscan.ValueEnd(chunk, v)
	if end < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(string(chunk[v:end]))
	return n, err == nil
}

// followWait is how long one read of a stream's log waits for an event
// before the follower checks the stream is still there.
const followWait = time.Second
