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
	"github.com/phasegate/phasegate/internal/jsonscan"
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
	if _, err := h.record(r.Context(), h.responsesOwner(r), id, false); err != nil {
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
	// dropped is what of the request the upstream does not get.
	dropped []chat.Drop
}

// prepareResponses reads and translates a POST /v1/responses; an error
// is the client's, answered as it is. What the stored history and the
// referenced items add to the request is charged, as its body is,
// against the bound of requests in flight and its client's share of it
// (chargeRequest), before it is decoded, until the request ends.
func (h *Handler) prepareResponses(w http.ResponseWriter, r *http.Request) (*responsesCall, error) {
	c := &responsesCall{}
	var err error
	if c.body, err = io.ReadAll(r.Body); err != nil {
		return nil, err
	}
	if err = checkResponsesBody(c.body, h.cfg.Limits); err != nil {
		return nil, err
	}
	if c.req, err = responses.ParseRequest(c.body); err != nil {
		return nil, err
	}
	c.owner = h.responsesOwner(r)
	var charged int64
	charge := func(n int64) error {
		if err := h.chargeRequest(w, r, n); err != nil {
			return err
		}
		charged += n
		return nil
	}
	if c.input, c.own, err = h.resolveInput(r.Context(), c.owner, c.req, int64(len(c.body)), charge); err != nil {
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
	// The chat body the pipeline serves is charged as a body would be:
	// what it holds beyond the client's body and what was charged.
	if more := int64(len(c.translated)-len(c.body)) - charged; more > 0 {
		if err := charge(more); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// resolveInput is the request's input with the stored history of its
// previous response before it and its item references resolved; the
// request's own items start at own. What they bring is charged (charge)
// before it is decoded; a history or referenced items that cannot fit in
// one body with the request's own (bodyBytes) are refused before they
// are read where the store tells their size first, else before they are
// decoded.
func (h *Handler) resolveInput(ctx context.Context, owner string, req *responses.Request, bodyBytes int64, charge func(int64) error) (input []responses.Item, own int, err error) {
	if req.PreviousResponseID != "" {
		var n int64
		if input, n, err = h.history(ctx, owner, req, bodyBytes, charge); err != nil {
			return nil, 0, err
		}
		bodyBytes += n
	}
	own = len(input)
	refs, err := h.lookupItems(ctx, owner, req.References(), bodyBytes, charge, func(n int64) error { return h.conversationTooLarge(req, n) })
	if err != nil {
		return nil, 0, err
	}
	items, err := responses.Resolve(req.Items(), refs)
	if err != nil {
		return nil, 0, err
	}
	return append(input, items...), own, nil
}

// history is the stored history req's previous_response_id brings, the
// input and output of that response, and the bytes of its record. The
// record is bounded with the request's own bytes (bodyBytes: a 413 past
// MAX_BODY_BYTES) and charged (charge) before it is read where the store
// tells its size first, else before it is decoded; its items, with the
// request's own, are counted against the limit of input items and its
// nesting against the depth limit while it is scanned, before it is
// decoded (see checkHistory); and it is decoded once.
func (h *Handler) history(ctx context.Context, owner string, req *responses.Request, bodyBytes int64, charge func(int64) error) ([]responses.Item, int64, error) {
	id := req.PreviousResponseID
	if err := checkResponseID("previous_response_id", id); err != nil {
		return nil, 0, err
	}
	b, err := h.getCharged(ctx, responseKey(owner, id), func(n int64) error {
		if bodyBytes+n > h.cfg.MaxBodyBytes {
			return h.conversationTooLarge(req, bodyBytes+n)
		}
		return charge(n)
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, 0, h.previousNotFound(ctx, owner, id)
	}
	if err != nil {
		return nil, 0, h.storeError(err)
	}
	rec, resp, err := h.decodeHistory(b, id, len(req.Items()))
	if err != nil {
		return nil, 0, err
	}
	if resp.Status == responses.StatusInProgress {
		return nil, 0, inProgress(id)
	}
	return append(rec.Input, resp.Output...), int64(len(b)), nil
}

// storedOutput is what a follow-up reads of a stored response object.
type storedOutput struct {
	Status string           `json:"status"`
	Output []responses.Item `json:"output"`
}

// decodeHistory decodes the record b of response id, its input and then
// its response's output, each counted first (checkHistory) with the
// request's own items (own) against the limits of a body.
func (h *Handler) decodeHistory(b []byte, id string, own int) (*record, *storedOutput, error) {
	l := h.cfg.Limits
	// The record's input items nest as a body's do; its response's output
	// items one level deeper (in the response object), and are counted
	// in that object.
	if err := checkHistory(b, "input", l.MaxDepth, 1, l.MaxMessages, own, id); err != nil {
		return nil, nil, err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		h.log.Warn("store of responses failed", "error", fmt.Errorf("decode record of %q: %w", id, err))
		return nil, nil, errResponsesUnavailable
	}
	if err := checkHistory(rec.Response, "output", l.MaxDepth, 0, l.MaxMessages, own+len(rec.Input), id); err != nil {
		return nil, nil, err
	}
	var resp storedOutput
	if err := json.Unmarshal(rec.Response, &resp); err != nil {
		h.log.Warn("store of responses failed", "error", fmt.Errorf("decode response %q: %w", id, err))
		return nil, nil, errResponsesUnavailable
	}
	return &rec, &resp, nil
}

// checkHistory counts, in one scan before it is decoded, the items of
// the array member of b, a stored record or response object of response
// id, with n items before them, against the most input items a request
// may have (most), and b's nesting against depth, the limit of a body,
// with wrap levels more for the objects b wraps its items in: the 400s
// of a body over the same limits, naming previous_response_id.
func checkHistory(b []byte, member string, depth, wrap, most, n int, id string) error {
	err := jsonscan.Count(b, depth+wrap, jsonscan.Counted{Name: member, FoldCase: true, Max: max(most-n, 0)})
	var de *jsonscan.DepthError
	if errors.As(err, &de) {
		return chat.InvalidRequest("previous_response_id", "the stored history of response '%s' nests JSON objects and arrays more than %d deep", id, depth)
	}
	var ce *jsonscan.CountError
	if errors.As(err, &ce) {
		return chat.TooMany("previous_response_id", "input items with the stored history of response '"+id+"'", n+ce.Count, most)
	}
	return nil
}

// chargedGetter is a ResponseStore that tells a record's size before it
// reads it (store.MemoryResponses, store.RedisResponses): charge is
// called with it, and its error is returned without the record.
type chargedGetter interface {
	GetCharged(ctx context.Context, key string, charge func(n int64) error) ([]byte, error)
}

// getCharged reads the record under key, charged (charge) before it is
// read when the store can tell its size, else once it is read.
func (h *Handler) getCharged(ctx context.Context, key string, charge func(n int64) error) ([]byte, error) {
	if g, ok := h.stored.(chargedGetter); ok {
		return g.GetCharged(ctx, key, charge)
	}
	b, err := h.stored.Get(ctx, key)
	if err == nil {
		err = charge(int64(len(b)))
	}
	return b, err
}

// storeError is the client's error of a read of the store of responses
// that failed: a refusal of the request's bounds as it is, any other
// failure logged and a 503.
func (h *Handler) storeError(err error) error {
	var ce *chat.Error
	if errors.As(err, &ce) {
		return ce
	}
	h.log.Warn("store of responses failed", "error", err)
	return errResponsesUnavailable
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

// record reads the stored record of response id; its input is decoded
// only when withInput (a read of the response alone skips it undecoded).
func (h *Handler) record(ctx context.Context, owner, id string, withInput bool) (*record, error) {
	b, err := h.stored.Get(ctx, responseKey(owner, id))
	if errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	var rec record
	switch {
	case err != nil:
	case withInput:
		err = json.Unmarshal(b, &rec)
	default:
		var head struct {
			Response json.RawMessage `json:"response"`
			Items    []string        `json:"items"`
		}
		err = json.Unmarshal(b, &head)
		rec.Response, rec.Items = head.Response, head.Items
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
// sends the next turn at once finds it. A failure is reported (see
// storeFailed) and returned: the answer stands, the client is told it
// was not stored.
func (h *Handler) storeResponse(ctx context.Context, owner string, resp *responses.Response, input []responses.Item, own int, refs []string) error {
	ctx = context.WithoutCancel(ctx)
	if err := h.notDeleted(ctx, owner, resp.ID); err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			h.storeFailed(ctx, owner, resp.ID, err)
			return err
		}
		return nil // deleted while it ran: it stays deleted
	}
	var index []responses.Item
	for i := range input {
		if input[i].ID == "" && input[i].Type != responses.TypeItemReference {
			input[i].ID = responses.ItemID(input[i].Type)
		}
		if i >= own && !slices.Contains(refs, input[i].ID) {
			index = append(index, input[i])
		}
	}
	b, err := appendRecord(nil, resp, input, index)
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
		h.storeFailed(ctx, owner, resp.ID, err)
	}
	return err
}

// appendRecord appends the record of resp, its input and the ids of the
// input items it indexed, as json.Marshal of a record writes it but for
// the response object: that is resp's own rendering, which is compact
// JSON already, not compacted again (with HTML escaped) byte by byte.
func appendRecord(dst []byte, resp *responses.Response, input, indexed []responses.Item) ([]byte, error) {
	in, err := json.Marshal(input)
	if err != nil {
		return dst, fmt.Errorf("encode input of %q: %w", resp.ID, err)
	}
	dst = append(resp.AppendJSON(append(dst, `{"response":`...)), `,"input":`...)
	dst = append(dst, in...)
	for i, it := range indexed {
		if i == 0 {
			dst = append(dst, `,"items":[`...)
		} else {
			dst = append(dst, ',')
		}
		dst = jsonscan.AppendString(dst, it.ID, false)
	}
	if len(indexed) > 0 {
		dst = append(dst, ']')
	}
	return append(dst, '}'), nil
}

// getResponse serves GET /v1/responses/{id}: the response as it stands
// (in_progress while its stream runs), or with stream=true its events
// (see streamResponse).
func (h *Handler) getResponse(w http.ResponseWriter, r *http.Request, id string) {
	if r.URL.Query().Get("stream") == "true" {
		h.streamResponse(w, r, id)
		return
	}
	rec, err := h.record(r.Context(), h.responsesOwner(r), id, false)
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
	rec, err := h.record(r.Context(), owner, id, false)
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
	rec, err := h.record(r.Context(), h.responsesOwner(r), id, true)
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
