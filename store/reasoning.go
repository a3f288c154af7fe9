package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reasoning is the reasoning remembered by tool call id, on Redis, with
// the same bounds as the in-memory deepseek.ReasoningMemory: at most
// MaxBytes of ids and reasoning in all, each kept at most TTL. When the
// bytes run over, the least recently remembered goes first (a recall
// does not make an entry younger, as it does in memory).
type Reasoning struct {
	r        *Redis
	maxBytes int64
	ttl      time.Duration
}

// NewReasoning returns the reasoning memory of r holding at most maxBytes
// for at most ttl each (0: until evicted).
func NewReasoning(r *Redis, maxBytes int64, ttl time.Duration) *Reasoning {
	return &Reasoning{r: r, maxBytes: maxBytes, ttl: ttl}
}

// reasoningKeys are the keys of the reasoning memory: one string per
// call id.
var reasoningKeys = keysOf("reasoning")

// rememberScript stores ARGV[4:] (call ids) → ARGV[3] (reasoning) and
// keeps the total under ARGV[2] bytes, dropping the oldest, and the
// entries older than ARGV[1] ms. One script, so replicas never see the
// bookkeeping half done. Ages are by Redis's clock (now()).
var rememberScript = redis.NewScript(boundedLua + `
local ttl, max, r = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local now = now()
expire(now, ttl)
for i = 4, #ARGV do
  local id = ARGV[i]
  local n = #id + #r
  if n <= max then
    drop(id)
    keep(id, r, n, now, ttl)
  end
end
shrink(max)
return 0
`)

// Remember stores reasoning for each call id. Empty ids and empty
// reasoning are not stored; a reasoning larger than the whole memory is
// not either.
func (m *Reasoning) Remember(ctx context.Context, callIDs []string, reasoning string) error {
	if reasoning == "" {
		return nil
	}
	const head = 3 // ARGV before the call ids
	args := []any{m.ttl.Milliseconds(), m.maxBytes, reasoning}
	for _, id := range callIDs {
		if id != "" {
			args = append(args, id)
		}
	}
	if len(args) == head {
		return nil
	}
	if err := rememberScript.Run(ctx, m.r.c, reasoningKeys.list(), args...).Err(); err != nil {
		return fmt.Errorf("remember reasoning of %d tool calls: %w", len(args)-head, err)
	}
	return nil
}

// Recall returns the reasoning remembered for each of callIDs that has
// one, in one round trip.
func (m *Reasoning) Recall(ctx context.Context, callIDs []string) (map[string]string, error) {
	if len(callIDs) == 0 {
		return nil, nil
	}
	keys := make([]string, len(callIDs))
	for i, id := range callIDs {
		keys[i] = reasoningKeys.entry + id
	}
	vals, err := m.r.c.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("recall reasoning of %d tool calls: %w", len(callIDs), err)
	}
	found := make(map[string]string, len(vals))
	for i, v := range vals {
		if s, ok := v.(string); ok {
			found[callIDs[i]] = s
		}
	}
	return found, nil
}
