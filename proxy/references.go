package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/jsonscan"
	"github.com/phasegate/phasegate/responses"
	"github.com/phasegate/phasegate/store"
)

// manyGetter is a ResponseStore that reads many records in one round trip
// (store.MemoryResponses, store.RedisResponses): GetMany answers the
// records in the order of keys, nil for one it does not hold.
type manyGetter interface {
	GetMany(ctx context.Context, keys []string) ([][]byte, error)
}

// referenceBatch is how many items one round trip to the store reads: the
// bytes they bring are counted against MAX_BODY_BYTES batch by batch, so
// a request whose references are too large is refused after one batch
// past the bound, not once all are read.
const referenceBatch = 100

// lookupItems reads the stored items ids name (each once) for owner,
// referenceBatch to a round trip; bodyBytes is what the request is
// before them, and tooLarge the error of a request they make larger than
// MAX_BODY_BYTES. Each batch is bounded so and charged (charge) as it
// was read, and each item's nesting checked against the depth limit,
// before any of it is decoded. An id the store does not hold is left
// out (Resolve names it). More ids than the limits allow is a 400 before
// any is read.
func (h *Handler) lookupItems(ctx context.Context, owner string, ids []string, bodyBytes int64, charge, tooLarge func(int64) error) (map[string]responses.Item, error) {
	ids = unique(ids)
	if max := h.cfg.Limits.MaxItemReferences; len(ids) > max {
		return nil, chat.TooMany("input", "item references", len(ids), max)
	}
	refs := make(map[string]responses.Item, len(ids))
	for start := 0; start < len(ids); start += referenceBatch {
		batch := ids[start:min(start+referenceBatch, len(ids))]
		vals, err := h.getItems(ctx, owner, batch)
		if err != nil {
			return nil, h.storeError(err)
		}
		var n int64
		for _, b := range vals {
			n += int64(len(b))
		}
		if bodyBytes += n; bodyBytes > h.cfg.MaxBodyBytes {
			return nil, tooLarge(bodyBytes)
		}
		if err := charge(n); err != nil {
			return nil, err
		}
		for i, b := range vals {
			if b == nil {
				continue
			}
			it, err := h.decodeItem(b, batch[i])
			if err != nil {
				return nil, err
			}
			refs[batch[i]] = it
		}
	}
	return refs, nil
}

// decodeItem decodes the stored item b of id, its nesting checked first
// against the depth limit of a body.
func (h *Handler) decodeItem(b []byte, id string) (responses.Item, error) {
	var it responses.Item
	var de *jsonscan.DepthError
	if err := jsonscan.Count(b, h.cfg.Limits.MaxDepth); errors.As(err, &de) {
		return it, chat.InvalidRequest("input", "the stored item '%s' nests JSON objects and arrays more than %d deep", id, de.Max)
	}
	if err := json.Unmarshal(b, &it); err != nil {
		h.log.Warn("store of responses failed", "error", fmt.Errorf("decode item %q: %w", id, err))
		return it, errResponsesUnavailable
	}
	return it, nil
}

// getItems reads the items of ids in one round trip when the store can,
// else one by one.
func (h *Handler) getItems(ctx context.Context, owner string, ids []string) ([][]byte, error) {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = itemKey(owner, id)
	}
	if m, ok := h.stored.(manyGetter); ok {
		return m.GetMany(ctx, keys)
	}
	out := make([][]byte, len(keys))
	for i, k := range keys {
		b, err := h.stored.Get(ctx, k)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// unique returns ids without repeats, in their first order.
func unique(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
