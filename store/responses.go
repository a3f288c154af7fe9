package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultResponsesTTL is how long a stored response of the Responses API
// is kept unless RESPONSES_TTL says otherwise.
const DefaultResponsesTTL = 7 * 24 * time.Hour

// ErrTooLarge is what Put answers for a record larger than its group may
// hold (or the whole store, for a key of no group): it is not kept.
var ErrTooLarge = errors.New("record larger than its share of the store of responses")

// GroupShare is the part of a store of records one group may hold: a
// key of the form kind:group:rest ("resp:<owner>:<id>") is charged to its
// group, which holds at most a GroupShare-th of the store's bound. When
// the store is full, the group that holds the most gives up its oldest
// record: a client that stores without end evicts its own records, never
// another's (four such clients at once share the store).
const GroupShare = 4

// groupOf is the group a key is charged to, "" for a key not of the form
// kind:group:rest, which only the store's bound holds.
func groupOf(key string) string {
	_, rest, ok := strings.Cut(key, ":")
	if !ok {
		return ""
	}
	g, _, ok := strings.Cut(rest, ":")
	if !ok {
		return ""
	}
	return "g" + g // never "", even for an empty group
}

// MemoryResponses keeps the records of the Responses API (stored
// responses, their input items, the items an item_reference names) by
// key, in this process, for a single gateway. Each record is kept ttl
// (0: until evicted); all together hold at most maxBytes of keys and
// values (0: unbounded), and each group at most a GroupShare-th of it
// (see GroupShare): when a group is past its bound, its own oldest go
// first; when the store is, the oldest of the group that holds the most.
// A record larger than what its group may hold is not kept. It is safe
// for concurrent use.
type MemoryResponses struct {
	ttl      time.Duration
	maxBytes int64
	mu       sync.Mutex
	records  map[string]memRecord
	// order holds the keys by the time they were put, oldest first; an
	// entry whose seq is not its record's is stale and skipped.
	order  []orderEntry
	groups map[string]*memGroup
	bytes  int64
	seq    uint64
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

// memGroup is what one group holds: its bytes, and its keys in the order
// they were put (stale entries as in MemoryResponses.order).
type memGroup struct {
	bytes int64
	count int // records
	order []orderEntry
}

// NewMemoryResponses returns an empty memory of records.
func NewMemoryResponses(ttl time.Duration, maxBytes int64) *MemoryResponses {
	return &MemoryResponses{ttl: ttl, maxBytes: maxBytes, records: make(map[string]memRecord), groups: make(map[string]*memGroup)}
}

// groupBytes is what one group may hold; 0 for no bound.
func (m *MemoryResponses) groupBytes() int64 { return m.maxBytes / GroupShare }

// Put keeps val under key, replacing what was there; ErrTooLarge, and
// nothing kept, for a record larger than its share.
func (m *MemoryResponses) Put(_ context.Context, key string, val []byte) error {
	n := int64(len(key) + len(val))
	g := groupOf(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drop(key)
	if m.maxBytes > 0 && (n > m.maxBytes || g != "" && n > m.groupBytes()) {
		return ErrTooLarge
	}
	m.expire(time.Now())
	m.makeRoom(g, n)
	m.seq++
	r := memRecord{val: append([]byte(nil), val...), seq: m.seq}
	if m.ttl > 0 {
		r.expires = time.Now().Add(m.ttl)
	}
	m.records[key] = r
	e := orderEntry{key, m.seq}
	m.order = append(m.order, e)
	grp := m.groups[g]
	if grp == nil {
		grp = &memGroup{}
		m.groups[g] = grp
	}
	grp.order = append(grp.order, e)
	grp.bytes += n
	grp.count++
	m.bytes += n
	// Entries of records replaced, deleted or evicted by their group are
	// left behind; gone over by half, a list is compacted.
	if len(grp.order) > 2*grp.count+16 {
		grp.order = m.current(grp.order)
	}
	if len(m.order) > 2*len(m.records)+16 {
		m.order = m.current(m.order)
	}
	return nil
}

// makeRoom evicts until n more bytes of group g fit: the group's own
// oldest while it is past its bound, then the oldest of the group that
// holds the most while the store is.
func (m *MemoryResponses) makeRoom(g string, n int64) {
	if m.maxBytes <= 0 {
		return
	}
	if grp := m.groups[g]; g != "" && grp != nil {
		for grp.bytes+n > m.groupBytes() {
			if !m.evictOldest(grp) {
				break
			}
		}
	}
	for m.bytes+n > m.maxBytes {
		if !m.evictOldest(m.largest()) {
			break
		}
	}
}

// current returns the entries of order that are their record's.
func (m *MemoryResponses) current(order []orderEntry) []orderEntry {
	out := order[:0:0]
	for _, e := range order {
		if r, ok := m.records[e.key]; ok && r.seq == e.seq {
			out = append(out, e)
		}
	}
	return out
}

// expire drops the records whose time is up, oldest first, and the stale
// entries before them.
func (m *MemoryResponses) expire(now time.Time) {
	for len(m.order) > 0 {
		e := m.order[0]
		r, ok := m.records[e.key]
		stale := !ok || r.seq != e.seq
		if !stale && (m.ttl == 0 || now.Before(r.expires)) {
			return
		}
		if !stale {
			m.drop(e.key)
		}
		m.order = m.order[1:]
	}
}

// evictOldest drops the oldest record of grp; false when it holds none.
func (m *MemoryResponses) evictOldest(grp *memGroup) bool {
	for grp != nil && len(grp.order) > 0 {
		e := grp.order[0]
		grp.order = grp.order[1:]
		if r, ok := m.records[e.key]; ok && r.seq == e.seq {
			m.drop(e.key)
			return true
		}
	}
	return false
}

// largest is the group that holds the most bytes, nil when none holds
// any.
func (m *MemoryResponses) largest() *memGroup {
	var big *memGroup
	for _, grp := range m.groups {
		if big == nil || grp.bytes > big.bytes {
			big = grp
		}
	}
	return big
}

// drop forgets the record under key, and its group when that holds no
// more.
func (m *MemoryResponses) drop(key string) {
	r, ok := m.records[key]
	if !ok {
		return
	}
	n := int64(len(key) + len(r.val))
	m.bytes -= n
	delete(m.records, key)
	g := groupOf(key)
	if grp := m.groups[g]; grp != nil {
		grp.bytes -= n
		if grp.count--; grp.count <= 0 {
			delete(m.groups, g)
		}
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

// GetCharged is Get that tells charge the record's size before it hands
// the record on: an error of charge is returned, and the record is not.
// (The record is held already; it is not copied.)
func (m *MemoryResponses) GetCharged(ctx context.Context, key string, charge func(n int64) error) ([]byte, error) {
	b, err := m.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := charge(int64(len(b))); err != nil {
		return nil, err
	}
	return b, nil
}

// GetMany returns the records under keys, in their order, nil for a key
// it does not hold.
func (m *MemoryResponses) GetMany(_ context.Context, keys []string) ([][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	out := make([][]byte, len(keys))
	for i, k := range keys {
		if r, ok := m.records[k]; ok && (m.ttl == 0 || now.Before(r.expires)) {
			out[i] = r.val
		}
	}
	return out, nil
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
// all together at most maxBytes and each group at most a GroupShare-th
// of it, a group past its bound losing its own oldest first, a full
// store the oldest of the group that holds the most.
type RedisResponses struct {
	r        *Redis
	ttl      time.Duration
	maxBytes int64
}

// NewRedisResponses returns the records of r.
func NewRedisResponses(r *Redis, ttl time.Duration, maxBytes int64) *RedisResponses {
	return &RedisResponses{r: r, ttl: ttl, maxBytes: maxBytes}
}

// responsesKeys are the keys of the records: one string per key, the
// bookkeeping of boundedLua, and groupedLua's: a sorted set of each
// group's keys by age (its name the prefix and the group) and the sorted
// set of the groups by the bytes they hold.
var responsesKeys = keysOf("responses")

func responsesKeyList() []string {
	return append(responsesKeys.list(), prefix+"responses-gage:", prefix+"responses-gbytes")
}

// groupedLua is boundedLua with groups (see GroupShare): KEYS[5] is the
// prefix of each group's sorted set of keys by age, KEYS[6] the sorted
// set of groups by bytes. drop and keep keep them too; shrinkGroup(g,
// max) drops g's oldest until it holds at most max bytes; shrink(max)
// drops the oldest of the group that holds the most (of all keys, when
// no group holds any) until the total is at most max.
const groupedLua = boundedLua + `
local gage, gbytes = KEYS[5], KEYS[6]
local function group(k)
  local g = string.match(k, '^[^:]*:([^:]*):')
  if g then return 'g' .. g end
  return nil
end
local plainDrop, plainKeep = drop, keep
drop = function(k)
  local n, g = redis.call('HGET', size, k), group(k)
  if g then
    if n and tonumber(redis.call('ZINCRBY', gbytes, -tonumber(n), g)) <= 0 then redis.call('ZREM', gbytes, g) end
    redis.call('ZREM', gage .. g, k)
  end
  return plainDrop(k)
end
keep = function(k, v, n, now, ttl)
  plainKeep(k, v, n, now, ttl)
  local g = group(k)
  if g then
    redis.call('ZADD', gage .. g, now, k)
    redis.call('ZINCRBY', gbytes, n, g)
  end
end
local function shrinkGroup(g, max)
  for _ = 1, 100000 do
    if tonumber(redis.call('ZSCORE', gbytes, g) or '0') <= max then break end
    local oldest = redis.call('ZRANGE', gage .. g, 0, 0)
    if #oldest == 0 then redis.call('ZREM', gbytes, g) break end
    drop(oldest[1])
  end
end
shrink = function(max)
  for _ = 1, 100000 do
    if tonumber(redis.call('GET', total) or '0') <= max then break end
    local victim
    local big = redis.call('ZREVRANGE', gbytes, 0, 0)
    if #big > 0 then
      victim = redis.call('ZRANGE', gage .. big[1], 0, 0)[1]
      if not victim then redis.call('ZREM', gbytes, big[1]) end
    end
    if not victim then
      victim = redis.call('ZRANGE', age, 0, 0)[1]
      if not victim then break end
    end
    drop(victim)
  end
end
`

// putScript keeps ARGV[5] under ARGV[4], the total under ARGV[2] bytes
// (0: unbounded) and the key's group under ARGV[3], evicting as
// groupedLua's shrinkGroup and shrink do, and drops the entries older
// than ARGV[1] ms by Redis's clock (now()). It returns 1 when the record
// is too large to keep, 0 when it was kept. One script, so replicas
// never see the bookkeeping half done.
var putScript = redis.NewScript(groupedLua + `
local ttl, max, gmax, id, v = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local now = now()
expire(now, ttl)
drop(id)
local n, g = #id + #v, group(id)
if max > 0 and (n > max or (g and n > gmax)) then return 1 end
if max > 0 then
  if g then shrinkGroup(g, gmax - n) end
  shrink(max - n)
end
keep(id, v, n, now, ttl)
return 0
`)

// delScript forgets ARGV[1]; it returns 0 when there was nothing.
var delScript = redis.NewScript(groupedLua + `
return drop(ARGV[1])
`)

// Put keeps val under key, replacing what was there; ErrTooLarge, and
// nothing kept, for a record larger than its share. A value of
// LargeValue or more is written with a deadline of its own, scaled to
// its size, on connections whose breaker is not the short calls'.
func (m *RedisResponses) Put(ctx context.Context, key string, val []byte) error {
	args := []any{m.ttl.Milliseconds(), m.maxBytes, m.maxBytes / GroupShare, key, val}
	c := m.r.c
	if len(val) >= LargeValue {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.r.bulkTimeout(len(val)))
		defer cancel()
		c = m.r.bulk
	}
	n, err := putScript.Run(ctx, c, responsesKeyList(), args...).Int()
	if err != nil {
		return fmt.Errorf("store response record: %w", err)
	}
	if n == 1 {
		return ErrTooLarge
	}
	return nil
}

// Get returns the record under key, or ErrNotFound. A record of
// LargeValue or more is read as it is written: on the bulk connections,
// with a deadline scaled to its size (its length is asked first).
func (m *RedisResponses) Get(ctx context.Context, key string) ([]byte, error) {
	return m.GetCharged(ctx, key, func(int64) error { return nil })
}

// GetCharged is Get that tells charge the record's size before it reads
// the record: an error of charge is returned, and the record is not
// read. A record replaced by a larger one in between is charged the
// difference once read.
func (m *RedisResponses) GetCharged(ctx context.Context, key string, charge func(n int64) error) ([]byte, error) {
	k := responsesKeys.entry + key
	c := m.r.c
	n, err := c.StrLen(ctx, k).Result()
	if err != nil {
		return nil, fmt.Errorf("read response record: %w", err)
	}
	if err := charge(n); err != nil {
		return nil, err
	}
	if n >= LargeValue {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.r.bulkTimeout(int(n)))
		defer cancel()
		c = m.r.bulk
	}
	b, err := c.Get(ctx, k).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read response record: %w", err)
	}
	if more := int64(len(b)) - n; more > 0 {
		if err := charge(more); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// GetMany returns the records under keys, in their order, nil for a key
// it does not hold, in one round trip (MGET).
func (m *RedisResponses) GetMany(ctx context.Context, keys []string) ([][]byte, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = responsesKeys.entry + k
	}
	vals, err := m.r.c.MGet(ctx, full...).Result()
	if err != nil {
		return nil, fmt.Errorf("read response records: %w", err)
	}
	out := make([][]byte, len(keys))
	for i, v := range vals {
		if s, ok := v.(string); ok {
			out[i] = []byte(s)
		}
	}
	return out, nil
}

// Delete forgets the record under key; ErrNotFound when there is none.
func (m *RedisResponses) Delete(ctx context.Context, key string) error {
	n, err := delScript.Run(ctx, m.r.c, responsesKeyList(), key).Int()
	if err != nil {
		return fmt.Errorf("delete response record: %w", err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}
