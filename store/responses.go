package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultResponsesTTL is how long a stored response of the Responses API
// is kept unless RESPONSES_TTL says otherwise.
const DefaultResponsesTTL = 7 * 24 * time.Hour

// MemoryResponses keeps the records of the Responses API (stored
// responses, their input items, the items an item_reference names) by
// key, in this process, for a single gateway. Each record is kept ttl
// (0: until evicted); all together hold at most maxBytes of keys and
// values (0: unbounded), the oldest going first when a new one needs the
// room, and a record larger than the whole memory is not kept. It is safe
// for concurrent use.
type MemoryResponses struct {
	ttl      time.Duration
	maxBytes int64
	mu       sync.Mutex
	records  map[string]memRecord
	// order holds the keys by the time they were put, oldest first; an
	// entry whose seq is not its record's is stale and skipped.
	order []orderEntry
	bytes int64
	seq   uint64
}

type memRecord struct {
	val     []byte
	expires time.Time
	seq     uint64
}

type orderEntry struct {
	key string
	seq uint64
}

// NewMemoryResponses returns an empty memory of records.
func NewMemoryResponses(ttl time.Duration, maxBytes int64) *MemoryResponses {
	return &MemoryResponses{ttl: ttl, maxBytes: maxBytes, records: make(map[string]memRecord)}
}

// Put keeps val under key, replacing what was there.
func (m *MemoryResponses) Put(_ context.Context, key string, val []byte) error {
	n := int64(len(key) + len(val))
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drop(key)
	if m.maxBytes > 0 && n > m.maxBytes {
		return nil
	}
	now := time.Now()
	for len(m.order) > 0 {
		e := m.order[0]
		r, ok := m.records[e.key]
		stale := !ok || r.seq != e.seq
		expired := ok && !stale && m.ttl > 0 && !now.Before(r.expires)
		full := m.maxBytes > 0 && m.bytes+n > m.maxBytes
		if !stale && !expired && !full {
			break
		}
		if !stale {
			m.drop(e.key)
		}
		m.order = m.order[1:]
	}
	m.seq++
	r := memRecord{val: append([]byte(nil), val...), seq: m.seq}
	if m.ttl > 0 {
		r.expires = now.Add(m.ttl)
	}
	m.records[key] = r
	m.order = append(m.order, orderEntry{key, m.seq})
	m.bytes += n
	return nil
}

func (m *MemoryResponses) drop(key string) {
	if r, ok := m.records[key]; ok {
		m.bytes -= int64(len(key) + len(r.val))
		delete(m.records, key)
	}
}

// Get returns the record under key, or ErrNotFound.
func (m *MemoryResponses) Get(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.records[key]
	if !ok || (m.ttl > 0 && !time.Now().Before(r.expires)) {
		return nil, ErrNotFound
	}
	return r.val, nil
}

// Delete forgets the record under key; ErrNotFound when there is none.
func (m *MemoryResponses) Delete(ctx context.Context, key string) error {
	if _, err := m.Get(ctx, key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drop(key)
	return nil
}

// RedisResponses keeps the records of the Responses API on Redis, shared
// by every replica, with the bounds of MemoryResponses: each kept ttl,
// all together at most maxBytes, the oldest going first.
type RedisResponses struct {
	r        *Redis
	ttl      time.Duration
	maxBytes int64
}

// NewRedisResponses returns the records of r.
func NewRedisResponses(r *Redis, ttl time.Duration, maxBytes int64) *RedisResponses {
	return &RedisResponses{r: r, ttl: ttl, maxBytes: maxBytes}
}

// responsesKeys are the keys of the records: one string per key.
var responsesKeys = keysOf("responses")

// putScript keeps ARGV[4] under ARGV[3] and the total under ARGV[2]
// bytes (0: unbounded), dropping the oldest, and the entries older than
// ARGV[1] ms by Redis's clock (now()). One script, so replicas never see
// the bookkeeping half done.
var putScript = redis.NewScript(boundedLua + `
local ttl, max, id, v = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local now = now()
expire(now, ttl)
drop(id)
local n = #id + #v
if max > 0 and n > max then return 0 end
keep(id, v, n, now, ttl)
if max > 0 then shrink(max) end
return 0
`)

// delScript forgets ARGV[1]; it returns 0 when there was nothing.
var delScript = redis.NewScript(boundedLua + `
return drop(ARGV[1])
`)

// Put keeps val under key, replacing what was there.
func (m *RedisResponses) Put(ctx context.Context, key string, val []byte) error {
	args := []any{m.ttl.Milliseconds(), m.maxBytes, key, val}
	if err := putScript.Run(ctx, m.r.c, responsesKeys.list(), args...).Err(); err != nil {
		return fmt.Errorf("store response record: %w", err)
	}
	return nil
}

// Get returns the record under key, or ErrNotFound.
func (m *RedisResponses) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := m.r.c.Get(ctx, responsesKeys.entry+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read response record: %w", err)
	}
	return b, nil
}

// Delete forgets the record under key; ErrNotFound when there is none.
func (m *RedisResponses) Delete(ctx context.Context, key string) error {
	n, err := delScript.Run(ctx, m.r.c, responsesKeys.list(), key).Int()
	if err != nil {
		return fmt.Errorf("delete response record: %w", err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}
