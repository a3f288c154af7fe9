package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/responses"
	"github.com/phasegate/phasegate/store"
)

// ResponseStore keeps the records of the Responses API by key
// (store.MemoryResponses, or store.RedisResponses shared by replicas).
// Get and Delete answer store.ErrNotFound for a key they do not hold.
type ResponseStore interface {
	Put(ctx context.Context, key string, val []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
	Delete(ctx context.Context, key string) error
}

// Defaults of the stored responses.
const (
	// DefaultResponsesTTL is RESPONSES_TTL's default: a week, long enough
	// for a conversation picked up after a weekend, short enough that the
	// gateway is not an archive of its clients' conversations (OpenAI keeps
	// them 30 days; a client that needs that long sends its history).
	DefaultResponsesTTL = store.DefaultResponsesTTL
	// DefaultResponsesMemoryBytes bounds the records kept in all, in this
	// process or on Redis: past it the oldest go first.
	DefaultResponsesMemoryBytes = 256 << 20
)

// record is what is stored of a response: the response object and its
// whole input (the history a previous_response_id brought included), so
// that the next turn's history is Input followed by the response's
// output.
type record struct {
	Response json.RawMessage  `json:"response"`
	Input    []responses.Item `json:"input"`
	// Items are the ids of the input items this response indexed for an
	// item_reference (its own, not those it referenced or a previous
	// response brought): a DELETE forgets them with its output.
	Items []string `json:"items,omitempty"`
	// size is the bytes the store held: what the history costs.
	size int64
}

var errResponsesUnavailable = &chat.Error{Status: http.StatusServiceUnavailable, Type: chat.TypeServer, Code: "store_unavailable",
	Message: "the store of responses is not available; retry, or send the history as input with store: false"}

// responsesRoutes serves the Responses API's routes other than POST
// /v1/responses (the door's) in the group of a chat route, behind the same
// middleware, with the store of Options.Responses, or one in this process.
func (h *Handler) responsesRoutes(g *gin.RouterGroup) {
	byID := func(serve func(http.ResponseWriter, *http.Request, string)) gin.HandlerFunc {
		return func(c *gin.Context) {
			if err := checkResponseID("response_id", c.Param("id")); err != nil {
				writeJSONError(c.Writer, err)
				return
			}
			serve(c.Writer, c.Request, c.Param("id"))
		}
	}
	g.GET("/responses/:id", byID(h.getResponse))
	g.DELETE("/responses/:id", byID(h.deleteResponse))
	g.GET("/responses/:id/input_items", byID(h.inputItems))
	g.POST("/responses/:id/cancel", byID(h.cancelResponse))
}

// cancelResponse serves POST /v1/responses/{id}/cancel, which OpenAI
// serves for background responses only: the gateway serves no background
// mode, so a response it holds is a 400 saying what stops one (any other
// a 404), rather than a request passed to the upstream, which knows no
// response of the gateway's.
func (h *Handler) cancelResponse(w http.ResponseWriter, r *http.Request, id string) {
	if _, err := h.record(r.Context(), h.responsesOwner(r), id); err != nil {
		writeJSONError(w, responseError(err, id))
		return
	}
	writeJSONError(w, &chat.Error{Status: http.StatusBadRequest, Type: chat.TypeInvalidRequest, Param: "response_id", Code: "unsupported_cancel",
		Message: "response '" + id + "' cannot be cancelled: only background responses can be, and this gateway does not serve background mode. " +
			"A stream that is not resumable stops when its client closes the connection; a resumable one runs to its end (DELETE /v1/responses/{id} then forgets it)"})
}

// maxResponseIDLen bounds a response id a client names: the gateway's
// own are 37 bytes (responses.NewID).
const maxResponseIDLen = 100

// checkResponseID refuses, as a 400 naming param, an id the gateway
// cannot have made: empty, over maxResponseIDLen, or with a byte other
// than a letter, digit, _ or -. It runs before the id is part of a key
// of a store.
func checkResponseID(param, id string) *chat.Error {
	ok := id != "" && len(id) <= maxResponseIDLen
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	if ok {
		return nil
	}
	return &chat.Error{Status: http.StatusBadRequest, Type: chat.TypeInvalidRequest, Param: param, Code: "invalid_response_id",
		Message: fmt.Sprintf("%s must be a response id of this gateway (letters, digits, _ and -, at most %d), got %.*q", param, maxResponseIDLen, maxResponseIDLen, id)}
}

// responsesOwner is who may read what a request stores: its client key
// when the gateway has client keys, else the bearer token the client
// sent (its own upstream key), else anyone ("").
func (h *Handler) responsesOwner(r *http.Request) string {
	if o := h.owner(r); o != "" {
		return o
	}
	if token, ok := cutBearer(r.Header.Get("Authorization")); ok {
		d := sha256.Sum256([]byte(token))
		return "t" + hex.EncodeToString(d[:12])
	}
	return ""
}

func responseKey(owner, id string) string { return "resp:" + owner + ":" + id }
func itemKey(owner, id string) string     { return "item:" + owner + ":" + id }

// deletedKey marks response id deleted, so that the events its resumable
// stream left in the store of streams are not replayed after it.
func deletedKey(owner, id string) string { return "deleted:" + owner + ":" + id }

// responsesCall is one POST /v1/responses as the Responses door read it:
// the request, its input with the stored history and references resolved
// (the request's own items from own), its owner, its body and the chat
// body it became, the response it makes and its sink once the stream
// started. It is owned by one request.
type responsesCall struct {
	h                *Handler
	r                *http.Request
	req              *responses.Request
	input            []responses.Item
	own              int
	owner            string
	body, translated []byte
	resp             *responses.Response
	out              *responsesSink
	// release gives back what the request charged against the bound of
	// requests in flight.
	release func()
	// dropped is what of the request the upstream does not get.
	dropped []chat.Drop
}

// prepareResponses reads and translates a POST /v1/responses; an error
// is the client's, answered as it is.
func (h *Handler) prepareResponses(r *http.Request) (*responsesCall, error) {
	c := &responsesCall{}
	var err error
	if c.body, err = io.ReadAll(r.Body); err != nil {
		return nil, err
	}
	if c.req, err = responses.ParseRequest(c.body); err != nil {
		return nil, err
	}
	c.owner = h.responsesOwner(r)
	if c.input, c.own, err = h.resolveInput(r.Context(), c.owner, c.req, int64(len(c.body))); err != nil {
		return nil, err
	}
	t := h.responsesTarget(h.cfg.provider(c.req.Model))
	if c.translated, err = responses.ChatBody(c.req, c.input, t); err != nil {
		return nil, err
	}
	c.dropped = c.req.Dropped(t)
	if int64(len(c.translated)) > h.cfg.MaxBodyBytes {
		return nil, h.conversationTooLarge(c.req, int64(len(c.translated)))
	}
	return c, nil
}

// resolveInput is the request's input with the stored history of its
// previous response before it and its item references resolved; the
// request's own items start at own. A history or referenced items that
// cannot fit in one body with the request's own (bodyBytes) are refused
// before they are assembled.
func (h *Handler) resolveInput(ctx context.Context, owner string, req *responses.Request, bodyBytes int64) (input []responses.Item, own int, err error) {
	if id := req.PreviousResponseID; id != "" {
		if err := checkResponseID("previous_response_id", id); err != nil {
			return nil, 0, err
		}
		rec, err := h.record(ctx, owner, id)
		if errors.Is(err, store.ErrNotFound) {
			return nil, 0, responses.NotFound("previous_response_id", "Previous response", id)
		}
		if err != nil {
			return nil, 0, err
		}
		if bodyBytes += rec.size; bodyBytes > h.cfg.MaxBodyBytes {
			return nil, 0, h.conversationTooLarge(req, bodyBytes)
		}
		var resp struct {
			Status string           `json:"status"`
			Output []responses.Item `json:"output"`
		}
		if err := json.Unmarshal(rec.Response, &resp); err != nil {
			return nil, 0, errResponsesUnavailable
		}
		if resp.Status == responses.StatusInProgress {
			return nil, 0, inProgress(id)
		}
		input = append(append(input, rec.Input...), resp.Output...)
	}
	own = len(input)
	refs := make(map[string]responses.Item)
	for _, id := range req.References() {
		b, err := h.stored.Get(ctx, itemKey(owner, id))
		if errors.Is(err, store.ErrNotFound) {
			continue // Resolve names it
		}
		if bodyBytes += int64(len(b)); bodyBytes > h.cfg.MaxBodyBytes {
			return nil, 0, h.conversationTooLarge(req, bodyBytes)
		}
		var it responses.Item
		if err != nil || json.Unmarshal(b, &it) != nil {
			h.log.Warn("store of responses failed", "error", err)
			return nil, 0, errResponsesUnavailable
		}
		refs[id] = it
	}
	items, err := responses.Resolve(req.Items(), refs)
	if err != nil {
		return nil, 0, err
	}
	return append(input, items...), own, nil
}

// conversationTooLarge is the 413 of a request that is small but whose
// conversation, with the history its previous_response_id or its
// item_reference items bring, is n bytes: more than one body may be.
func (h *Handler) conversationTooLarge(req *responses.Request, n int64) *chat.Error {
	param, what := "input", "the request with the items its item_reference items name"
	if req.PreviousResponseID != "" {
		param, what = "previous_response_id", "the conversation with the stored history of response '"+req.PreviousResponseID+"'"
	}
	return &chat.Error{Status: http.StatusRequestEntityTooLarge, Type: chat.TypeInvalidRequest, Param: param, Code: "conversation_too_large",
		Message: fmt.Sprintf("%s comes to %s, more than one request body may be (MAX_BODY_BYTES, %s); start a new conversation or send fewer items",
			what, protocol.FormatBytes(n), protocol.FormatBytes(h.cfg.MaxBodyBytes))}
}

// chargeInflight counts n bytes more of a request against the bound of
// requests in flight (MAX_INFLIGHT_BYTES) as boundBody does; false, and
// counted, when they do not fit. release gives them back.
func (h *Handler) chargeInflight(n int64) (release func(), ok bool) {
	n = max(n, 0) * InflightFactor
	if !h.inflight.TryAcquire(n) {
		h.metrics.Bounded(metrics.BoundInflightBytes)
		return nil, false
	}
	h.metrics.InflightBytes(n)
	return func() {
		h.inflight.Release(n)
		h.metrics.InflightBytes(-n)
	}, true
}

// record reads the stored record of response id.
func (h *Handler) record(ctx context.Context, owner, id string) (*record, error) {
	b, err := h.stored.Get(ctx, responseKey(owner, id))
	if errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	rec := record{size: int64(len(b))}
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		h.log.Warn("store of responses failed", "error", err)
		return nil, errResponsesUnavailable
	}
	return &rec, nil
}

// storeResponse keeps a response and its input, and indexes the items an
// item_reference may name: its output, and the request's own input items
// (input[own:]; the history a previous response brought was indexed
// when it was stored, the items named by refs when the response that
// made them was), unless it was deleted while it ran.
// It runs before the response's last event is written, so a client that
// sends the next turn at once finds it. A failure is logged: the answer
// stands, only a later reference to it fails.
func (h *Handler) storeResponse(ctx context.Context, owner string, resp *responses.Response, input []responses.Item, own int, refs []string) {
	ctx = context.WithoutCancel(ctx)
	if err := h.notDeleted(ctx, owner, resp.ID); err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			h.log.Warn("response not stored", "response_id", resp.ID, "error", err)
		}
		return // deleted while it ran: it stays deleted
	}
	rec := record{Response: resp.JSON(), Input: input}
	var index []responses.Item
	for i := range input {
		if input[i].ID == "" && input[i].Type != responses.TypeItemReference {
			input[i].ID = responses.ItemID(input[i].Type)
		}
		if i >= own && !slices.Contains(refs, input[i].ID) {
			index = append(index, input[i])
			rec.Items = append(rec.Items, input[i].ID)
		}
	}
	b, err := json.Marshal(rec)
	if err == nil {
		err = h.stored.Put(ctx, responseKey(owner, resp.ID), b)
	}
	for id, item := range resp.OutputJSON() { // as rendered: it decodes as resp.Output()
		if err != nil {
			break
		}
		err = h.stored.Put(ctx, itemKey(owner, id), item)
	}
	for _, it := range index {
		if err != nil {
			break
		}
		var ib []byte
		if ib, err = json.Marshal(it); err == nil {
			err = h.stored.Put(ctx, itemKey(owner, it.ID), ib)
		}
	}
	if err != nil {
		h.log.Warn("response not stored", "response_id", resp.ID, "error", err)
	}
}

// getResponse serves GET /v1/responses/{id}: the response as it stands
// (in_progress while its stream runs), or with stream=true its events
// (see streamResponse).
func (h *Handler) getResponse(w http.ResponseWriter, r *http.Request, id string) {
	if r.URL.Query().Get("stream") == "true" {
		h.streamResponse(w, r, id)
		return
	}
	rec, err := h.record(r.Context(), h.responsesOwner(r), id)
	if err != nil {
		writeJSONError(w, responseError(err, id))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(rec.Response)
}

// deleteResponse serves DELETE /v1/responses/{id}: the response, its
// output items and the input items it indexed are forgotten.
func (h *Handler) deleteResponse(w http.ResponseWriter, r *http.Request, id string) {
	owner := h.responsesOwner(r)
	rec, err := h.record(r.Context(), owner, id)
	if err == nil {
		err = h.stored.Delete(r.Context(), responseKey(owner, id))
	}
	if err == nil {
		err = h.stored.Put(r.Context(), deletedKey(owner, id), nil)
	}
	if err != nil {
		writeJSONError(w, responseError(err, id))
		return
	}
	var resp struct {
		Output []responses.Item `json:"output"`
	}
	_ = json.Unmarshal(rec.Response, &resp)
	ids := rec.Items
	for _, it := range resp.Output {
		ids = append(ids, it.ID)
	}
	for _, id := range ids {
		_ = h.stored.Delete(r.Context(), itemKey(owner, id)) // gone already is as good
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"id":` + strconv.Quote(id) + `,"object":"response","deleted":true}`))
}

// responseError is the error of a read of response id: a 404 for one the
// client's key does not hold.
func responseError(err error, id string) *chat.Error {
	if errors.Is(err, store.ErrNotFound) {
		return &chat.Error{Status: http.StatusNotFound, Type: chat.TypeInvalidRequest, Param: "response_id", Code: "not_found",
			Message: "Response with id '" + id + "' not found."}
	}
	return chat.AsError(err)
}

// inputItems serves GET /v1/responses/{id}/input_items: the response's
// input as item resources (responses.Resource), newest first unless
// order=asc, limit items (1 to 100, default 20) after the item named by
// after.
func (h *Handler) inputItems(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeJSONError(w, chat.InvalidRequest("limit", "limit must be a whole number from 1 to 100, got %q", v))
			return
		}
		limit = n
	}
	order := q.Get("order")
	if order != "" && order != "asc" && order != "desc" {
		writeJSONError(w, chat.InvalidRequest("order", "order must be asc or desc, got %q", order))
		return
	}
	rec, err := h.record(r.Context(), h.responsesOwner(r), id)
	if err != nil {
		writeJSONError(w, responseError(err, id))
		return
	}
	items := slices.Clone(rec.Input)
	if order != "asc" {
		slices.Reverse(items)
	}
	if after := q.Get("after"); after != "" {
		i := slices.IndexFunc(items, func(it responses.Item) bool { return it.ID == after })
		if i < 0 {
			writeJSONError(w, chat.InvalidRequest("after", "after names no input item of response '%s': %q", id, after))
			return
		}
		items = items[i+1:]
	}
	more := len(items) > limit
	items = items[:min(limit, len(items))]
	list := struct {
		Object  string           `json:"object"`
		Data    []responses.Item `json:"data"`
		FirstID string           `json:"first_id"`
		LastID  string           `json:"last_id"`
		HasMore bool             `json:"has_more"`
	}{Object: "list", Data: items, HasMore: more}
	for i := range items {
		items[i] = responses.Resource(items[i])
	}
	if len(items) > 0 {
		list.FirstID, list.LastID = items[0].ID, items[len(items)-1].ID
	}
	b, _ := json.Marshal(list)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
