package proxy

import (
	"context"
	"errors"
	"net/http"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/responses"
	"github.com/phasegate/phasegate/store"
)

// StoredHeader tells the client of a response that asked to be stored
// (store: true, the default) whether it was: "true" or "false", a header
// on a JSON answer, a trailer on a stream (whose headers left before the
// response was stored). A response served but not stored is a turn that
// previous_response_id cannot continue: the client sends its history as
// input instead.
const StoredHeader = "X-Phasegate-Stored"

// failedKey marks response id as served but not stored, with the reason,
// so that a previous_response_id naming it is told why.
func failedKey(owner, id string) string { return "failed:" + owner + ":" + id }

// Reasons a response was not stored, as the next previous_response_id
// naming it is told.
const (
	reasonTooLarge = "it was larger than this key's share of the store of responses"
	reasonFailed   = "the store of responses failed as it was written"
)

// storeFailed reports that response id of owner was served but not
// stored: logged, counted, and marked (a small record, itself best
// effort) for the next previous_response_id that names it.
func (h *Handler) storeFailed(ctx context.Context, owner, id string, err error) {
	h.metrics.StoreFailed(metrics.StoreResponses)
	h.log.Warn("response not stored", "response_id", id, "error", err)
	reason := reasonFailed
	if errors.Is(err, store.ErrTooLarge) {
		reason = reasonTooLarge
	}
	_ = h.stored.Put(ctx, failedKey(owner, id), []byte(reason))
}

// reportStored tells the client whether its response was stored (see
// StoredHeader).
// A stream's headers are written: it says so in a trailer.
func reportStored(w http.ResponseWriter, stream bool, err error) {
	v := "true"
	if err != nil {
		v = "false"
	}
	if stream {
		w.Header().Set(http.TrailerPrefix+StoredHeader, v)
		return
	}
	w.Header().Set(StoredHeader, v)
}

// previousNotFound is the 400 of a previous_response_id the store does
// not hold: why it was not stored when it was served but not stored,
// else not found.
func (h *Handler) previousNotFound(ctx context.Context, owner, id string) error {
	reason, err := h.stored.Get(ctx, failedKey(owner, id))
	if err != nil {
		return responses.NotFound("previous_response_id", "Previous response", id)
	}
	return &chat.Error{Status: http.StatusBadRequest, Type: chat.TypeInvalidRequest, Param: "previous_response_id", Code: "previous_response_not_stored",
		Message: "Previous response with id '" + id + "' was served but not stored: " + string(reason) + ". Send the conversation's history as input instead"}
}
