package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/session"
	"github.com/phasegate/phasegate/store"
)

// The routes of resumable streams (replay from a phase, cancel; after
// OpenAI's stream
// resumption: a request id and starting_after):
//
//	GET  /v1/phasegate/requests/{request_id}/events?starting_after=N
//	POST /v1/phasegate/requests/{request_id}/cancel
//	POST /two-stage/v1/resume  {"requestId", "resumeFromPhaseIndex"}
func (h *Handler) resumeRoutes(e *gin.Engine) {
	e.GET("/v1/phasegate/requests/:id/events", h.authorize, func(c *gin.Context) {
		after, err := startingAfter(c.Query("starting_after"))
		if err != nil {
			writeJSONError(c.Writer, err)
			return
		}
		h.serveEvents(c.Writer, c.Request, c.Param("id"), func(store.StreamInfo) (int, *chat.Error) { return after, nil })
	})
	e.POST("/v1/phasegate/requests/:id/cancel", h.authorize, func(c *gin.Context) { h.serveCancel(c.Writer, c.Request, c.Param("id")) })
	e.POST("/two-stage/v1/resume", h.authorize, func(c *gin.Context) { h.serveTwoStageResume(c.Writer, c.Request) })
}

// watchCancels starts watching the cancels of other replicas, when the
// event log is shared with them; Close ends it.
func (h *Handler) watchCancels() {
	w, ok := h.streams.(cancelWatcher)
	if !ok {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	h.stopWatch, h.watched = stop, make(chan struct{})
	ready := make(chan struct{})
	go func() {
		defer close(h.watched)
		w.Watch(ctx, h.running.cancel, func() { close(ready) })
	}()
	select {
	case <-ready:
	case <-h.watched:
	}
}

// Close ends what the handler runs in the background (the watch of other
// replicas' cancels), and charges the settlements of sessions the store
// still owes (see SessionStore.Owe). Requests in flight are not its
// concern: the server's shutdown is.
func (h *Handler) Close() {
	if h.stopWatch != nil {
		h.stopWatch()
		<-h.watched
	}
	ctx, cancel := context.WithTimeout(context.Background(), sessionFlushWait)
	defer cancel()
	h.flushSessions(ctx)
}

// sessionFlushWait bounds what Close waits for the owed settlements.
const sessionFlushWait = 2 * time.Second

// flushSessions charges the settlements the store of sessions owes, if
// it holds any back: at Close, and before an operator looks at or resets
// a session, so that what this replica served is counted.
func (h *Handler) flushSessions(ctx context.Context) {
	f, ok := h.sessions.(interface {
		Flush(ctx context.Context) ([]session.Ended, error)
	})
	if !ok {
		return
	}
	ended, err := f.Flush(ctx)
	for _, e := range ended {
		h.metrics.SessionEnded(string(e.Outcome), e.USD)
	}
	if err != nil {
		h.metrics.StoreFailed(metrics.StoreSession)
		h.log.Warn("session store failed; settlements of served requests not charged to their sessions", "error", err)
	}
}

// startingAfter reads a resume position: 0 when absent, a 400 naming
// starting_after when it is not a whole number from 0 to
// maxStartingAfter.
func startingAfter(v string) (int, *chat.Error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxStartingAfter {
		return 0, chat.InvalidRequest("starting_after", "starting_after must be a whole number from 0 to %d, got %.40q", maxStartingAfter, v)
	}
	return n, nil
}

// maxStartingAfter bounds a resume position: no stream holds as many
// events (RESUME_MAX_BYTES bounds its log), and a position past it, once
// made the next one, would overflow and replay the stream from its start.
const maxStartingAfter = 1 << 30

var (
	errResumeUnavailable = &chat.Error{Status: http.StatusServiceUnavailable, Type: chat.TypeServer, Code: "resume_unavailable",
		Message: "resumable streams are unavailable right now: the shared store does not answer; try again shortly"}
	errResumeBusy = &chat.Error{Status: http.StatusServiceUnavailable, Type: chat.TypeServer, Code: "resume_busy",
		Message: "this gateway follows as many resumed streams as it can right now; try again shortly"}
	errRequestCancelled = &chat.Error{Status: http.StatusConflict, Type: chat.TypeInvalidRequest, Code: "request_cancelled",
		Message: "this request was cancelled; it cannot be resumed"}
)

// streamInfo finds the stream id for the client of r: a 404 when it is
// unknown, expired, or another client's; a 503 when the store fails.
func (h *Handler) streamInfo(r *http.Request, id string) (store.StreamInfo, *chat.Error) {
	info, err := h.streams.Info(r.Context(), h.streamKey(r, id))
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		h.metrics.StoreFailed(metrics.StoreResume)
		h.log.Warn("shared store failed; resume answered 503", "request_id", id, "error", err)
		return info, errResumeUnavailable
	case info.Owner == h.owner(r):
		return info, nil
	}
	// Another client's stream is answered as one that does not exist.
	return info, &chat.Error{Status: http.StatusNotFound, Type: chat.TypeInvalidRequest, Code: "request_not_found",
		Message: "no resumable stream has request id " + strconv.Quote(id) + " (unknown, expired, or not resumable)"}
}

// serveEvents replays the events of stream id after the position from
// returns, then follows it live until it ends.
func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request, id string, from func(store.StreamInfo) (int, *chat.Error)) {
	info, cerr := h.streamInfo(r, id)
	if cerr == nil && info.Cancelled {
		cerr = errRequestCancelled
	}
	after := 0
	if cerr == nil {
		after, cerr = from(info)
	}
	if cerr != nil {
		writeJSONError(w, cerr)
		return
	}
	if info.Status != 0 {
		h.serveFailed(w, r, id, info.Status)
		return
	}
	release, ok := h.takeFollower(w)
	if !ok {
		return
	}
	defer release()
	h.metrics.Resumable(metrics.ResumeReplayed)
	var until time.Time
	if d := h.followLimit(); d > 0 {
		until = time.Now().Add(d)
	}
	sw := newSSEWriter(w)
	sw.coalesce = true // a batch read from the store is written at once
	sw.start(http.Header{"X-Phasegate-Resumed-After": {strconv.Itoa(after)}})
	_ = sw.rc.Flush() // the headers, before a wait for the first event
	last, err := h.follow(r.Context(), sw, h.streamKey(r, id), after, r.Header.Get("X-Phasegate-Event-Ids") == "true", until)
	// A log that ends with its own error (resume_incomplete,
	// resume_too_large, resume_memory_full) holds the door's ending, as
	// the door wrote it. A resume cut short ends as the chat door's
	// streams do, or, to an Anthropic client, as the Messages door's.
	if e := h.followEnded(r.Context(), id, last, err); e != nil {
		end := chatDoor.end
		if anthropicClient(r) {
			end = messagesEnding
		}
		_ = sw.event(end(nil, last+1, e))
	}
	_ = sw.flush()
}

// errFollowLimit ends a resume that followed a stream for followLimit.
var errFollowLimit = errors.New("resume followed the stream for its time limit")

// errResumeExpired is the in-band error a resume ends with when the log
// of the stream it follows is forgotten before its end: the store lost it
// (a Redis flushed or restarted) or was out of reach for RESUME_TTL.
var errResumeExpired = &chat.Error{Status: http.StatusServiceUnavailable, Type: chat.TypeServer, Code: "resume_expired",
	Message: "the events of this stream were forgotten before it ended (the shared store lost them, or was out of reach for RESUME_TTL); this resume ends here"}

// followEnded returns the in-band error a resume that followed stream id
// up to position last ends with, when err (what follow returned) cut it
// short; nil when the stream's log ended (with [DONE] or its own error)
// or the client left (ctx, the request's, is done).
func (h *Handler) followEnded(ctx context.Context, id string, last int, err error) *chat.Error {
	switch {
	case ctx.Err() != nil:
		return nil // nobody to tell
	case errors.Is(err, errFollowLimit):
		h.log.Info("resume reached its time limit before the stream ended", "request_id", id, "after", last)
		return &chat.Error{Status: http.StatusRequestTimeout, Type: chat.TypeTimeout, Code: "resume_timeout",
			Message: "this resume followed the stream for as long as one may (REQUEST_TIMEOUT, or RESUME_TTL without it); resume again with starting_after=" + strconv.Itoa(last) + " for the rest"}
	case errors.Is(err, store.ErrNotFound):
		h.metrics.StoreFailed(metrics.StoreResume)
		h.log.Warn("the log of a stream expired under its resume", "request_id", id, "after", last)
		return errResumeExpired
	case err != nil:
		h.metrics.StoreFailed(metrics.StoreResume)
		h.log.Warn("resume ended early", "request_id", id, "error", err)
		return errResumeUnavailable
	}
	return nil
}

// serveFailed answers the resume of stream id, which failed before its
// first event, as its client was answered: status, and the OpenAI error
// body the log keeps.
func (h *Handler) serveFailed(w http.ResponseWriter, r *http.Request, id string, status int) {
	evs, _, err := h.streams.Read(r.Context(), h.streamKey(r, id), 0, time.Millisecond)
	if err != nil || len(evs) == 0 {
		if err != nil {
			h.metrics.StoreFailed(metrics.StoreResume)
			h.log.Warn("shared store failed; resume answered 503", "request_id", id, "error", err)
		}
		writeJSONError(w, errResumeUnavailable)
		return
	}
	h.metrics.Resumable(metrics.ResumeReplayed)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(evs[0].Data)
}

// followLimit bounds how long one resume may follow a stream.
func (h *Handler) followLimit() time.Duration {
	if h.cfg.Timeouts.Request > 0 {
		return h.cfg.Timeouts.Request
	}
	return h.cfg.Resume.TTL
}

// follow writes the events of id after position after as they come,
// until the stream ends, its log expires (store.ErrNotFound), until
// passes (errFollowLimit; zero: no limit) or ctx is done; it returns the
// position of the last event written. The limit is checked between
// reads, each waiting no later than it, rather than put on ctx: a store
// whose read a deadline cuts fails with its own error, not the limit's.
func (h *Handler) follow(ctx context.Context, sw *sseWriter, id string, after int, ids bool, until time.Time) (int, error) {
	// write writes evs; false when the client left.
	write := func(evs []store.Event) bool {
		for _, ev := range evs {
			if ids {
				sw.buf = append(append(sw.buf, "id: "...), strconv.Itoa(ev.N)...)
				sw.buf = append(sw.buf, '\n')
			}
			_ = sw.event(ev.Data) // as the door wrote it; the flush below tells of a client gone
			after = ev.N
		}
		return sw.flush() == nil
	}
	for ctx.Err() == nil {
		wait := followWait
		if !until.IsZero() {
			left := time.Until(until)
			if left <= 0 {
				return after, errFollowLimit
			}
			wait = min(wait, left)
		}
		evs, ended, err := h.streams.Read(ctx, id, after, wait)
		if err != nil {
			return after, err
		}
		if !write(evs) || ended {
			return after, nil // the client left, or the stream ended
		}
		if len(evs) != 0 {
			continue
		}
		info, err := h.streams.Info(ctx, id)
		if err != nil {
			return after, err // store.ErrNotFound: expired
		}
		if info.Ended {
			// The stream ended after the read above: its last events
			// (and [DONE]) may have been stored in between. One more
			// read, without waiting, writes them; past its end (a
			// starting_after beyond it) it returns none.
			evs, _, err := h.streams.Read(ctx, id, after, time.Millisecond)
			if err != nil {
				return after, err
			}
			write(evs)
			return after, nil
		}
	}
	return after, ctx.Err()
}

// serveCancel cancels stream id: its upstream stops on whichever replica
// runs it, and later resumes answer 409.
func (h *Handler) serveCancel(w http.ResponseWriter, r *http.Request, id string) {
	if _, cerr := h.streamInfo(r, id); cerr != nil {
		writeJSONError(w, cerr)
		return
	}
	if err := h.streams.Cancel(r.Context(), h.streamKey(r, id)); err != nil {
		h.metrics.StoreFailed(metrics.StoreResume)
		h.log.Warn("shared store failed; cancel answered 503", "request_id", id, "error", err)
		writeJSONError(w, errResumeUnavailable)
		return
	}
	h.running.cancel(h.streamKey(r, id))
	h.metrics.Resumable(metrics.ResumeCancelled)
	h.log.Info("stream cancelled", "request_id", id)
	w.Header().Set("Content-Type", "application/json")
	b, _ := json.Marshal(map[string]string{"id": id, "object": "phasegate.request", "status": "cancelled"})
	_, _ = w.Write(b)
}

// serveTwoStageResume is the seed's form of a resume: the events from
// the first of phase resumeFromPhaseIndex on (0 or absent: all).
func (h *Handler) serveTwoStageResume(w http.ResponseWriter, r *http.Request) {
	var req struct {
		RequestID  string `json:"requestId"`
		PhaseIndex *int   `json:"resumeFromPhaseIndex"`
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	switch {
	case err != nil:
		writeJSONError(w, chat.InvalidRequest("", "the body must be a JSON object {\"requestId\": string, \"resumeFromPhaseIndex\": number}"))
		return
	case req.RequestID == "":
		writeJSONError(w, chat.InvalidRequest("requestId", "requestId is required"))
		return
	case req.PhaseIndex != nil && *req.PhaseIndex < 0:
		writeJSONError(w, chat.InvalidRequest("resumeFromPhaseIndex", "resumeFromPhaseIndex must be 0 or more"))
		return
	}
	h.serveEvents(w, r, req.RequestID, func(info store.StreamInfo) (int, *chat.Error) {
		if req.PhaseIndex == nil || *req.PhaseIndex == 0 {
			return 0, nil
		}
		n, ok := info.Phases[*req.PhaseIndex]
		if !ok {
			return 0, chat.InvalidRequest("resumeFromPhaseIndex", "request %q has no phase %d (yet)", req.RequestID, *req.PhaseIndex)
		}
		return n - 1, nil
	})
}

// takeFollower takes one of the replica's slots for following a resumed
// stream live, and returns its release. When every slot is taken it
// answers 503 resume_busy with a Retry-After itself and reports false.
func (h *Handler) takeFollower(w http.ResponseWriter) (release func(), ok bool) {
	if h.followers == nil {
		return func() {}, true
	}
	select {
	case h.followers <- struct{}{}:
		return func() { <-h.followers }, true
	default:
		w.Header().Set("Retry-After", "1")
		writeJSONError(w, errResumeBusy)
		return nil, false
	}
}
