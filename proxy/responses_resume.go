package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/store"
)

// A resumable Responses stream is logged as any door's (see resumable):
// the log, under a key of the response id, holds each Responses event as
// its client got it, position N for sequence_number N-1, and a replay
// writes them back byte for byte.

// responsesStreamKey is the key of the log of response id in the store
// of streams: its own namespace, so no X-Request-Id of the chat route
// names it.
func responsesStreamKey(owner, id string) string { return "responses:" + owner + ":" + id }

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
	// A stream that failed before its first event never told its
	// response id.
	case err == nil && (info.Owner != owner || info.Status != 0), errors.Is(err, store.ErrNotFound):
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
	sw.coalesce = true
	sw.start(nil)
	_ = sw.rc.Flush() // the headers, before a wait for the first event
	last, err := h.follow(r.Context(), sw, key, after, r.Header.Get("X-Phasegate-Event-Ids") == "true", until)
	if e := h.followEnded(r.Context(), key, last, err); e != nil {
		_ = sw.event(responsesEnding(nil, last+1, e))
	}
	_ = sw.flush()
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
