// Package lru is the in-memory cache of the gateway: least recently used
// entries go first, the bound is the bytes the entries hold, and an entry
// may also have a time to live. The token counts, the shortened tool
// results, the remembered reasoning and the compiled tool schemas are all
// kept in caches of this one kind.
//
// Plain recency, not frequency, decides what stays: what an agent sends
// next is its history so far and what it was just told, so the entries
// put or read last are the ones its next request needs. Caches that admit
// by frequency (W-TinyLFU) refuse new entries in favour of old popular
// ones, the histories of finished conversations.
//
// Entries live in a slice and are linked by index, so a cache whose keys
// and values hold no pointers holds none for the garbage collector to
// trace. A cache allocates nothing until its first Put, and grows with
// its entries.
package lru

import (
	"sync"
	"time"
	"unsafe"
)

// Options configure a Cache.
type Options[K comparable, V any] struct {
	// MaxBytes bounds the bytes the entries hold, bookkeeping included.
	MaxBytes int64
	// Bytes returns what an entry references besides itself: the bytes
	// of its strings and slices, the objects its pointers own. nil:
	// nothing. The cache adds the inline key and value and its own
	// bookkeeping, 100 bytes for a 16-byte key and a 4-byte value (Cost
	// tells). It is asked again when the entry goes, and must answer the
	// same.
	Bytes func(K, V) int64
	// TTL, when positive, forgets an entry that long after it was put.
	// 0: entries stay until evicted. Expired entries are dropped when
	// read, and otherwise count against MaxBytes until they are the
	// least recently used.
	TTL time.Duration
	// Now is the clock of TTL; nil: time.Now.
	Now func() time.Time
	// Shards splits the cache into that many parts, each with its own
	// lock and MaxBytes/Shards of the bound, picked by Hash. 0 or 1: one
	// part. An entry that costs more than a part is not stored.
	Shards int
	// Hash spreads keys over the shards; required when Shards > 1.
	Hash func(K) uint64
}

// Cache maps keys to values within a byte bound, evicting the least
// recently put or read. Safe for concurrent use. Values are shared, not
// copied: treat them as read-only.
type Cache[K comparable, V any] struct {
	shards []shard[K, V]
	hash   func(K) uint64
	bytes  func(K, V) int64
	fixed  int64 // bookkeeping and the inline key and value
	ttl    time.Duration
	now    func() time.Time
}

// shard is an LRU list threaded through a slice by index.
type shard[K comparable, V any] struct {
	mu      sync.Mutex
	index   map[K]int32
	entries []entry[K, V]
	expires []int64 // by slot, Unix nanoseconds; nil without a TTL
	head    int32   // most recently used; -1 when empty
	tail    int32   // least recently used; -1 when empty
	free    int32   // first free slot, linked by next; -1: none
	bytes   int64
	max     int64
	slots   int // the most entries the bound allows
}

// entry holds no cost: Cost is a function of the key and value, computed
// again on removal, so that a cache of small entries pays nothing for it.
type entry[K comparable, V any] struct {
	key        K
	value      V
	prev, next int32
}

// New returns an empty cache.
func New[K comparable, V any](o Options[K, V]) *Cache[K, V] {
	n := max(o.Shards, 1)
	var k K
	c := &Cache[K, V]{
		shards: make([]shard[K, V], n),
		hash:   o.Hash,
		bytes:  o.Bytes,
		// The slot in the slice, and the index's: the key and an int32 in
		// a Go map, whose tables are from 7/8 to 7/16 full, less with
		// the tombstones that evictions leave.
		fixed: int64(unsafe.Sizeof(entry[K, V]{})) + 3*int64(unsafe.Sizeof(k)+4) + 8,
		ttl:   o.TTL,
		now:   o.Now,
	}
	if c.ttl > 0 {
		c.fixed += 8 // the deadline
	}
	if c.now == nil {
		c.now = time.Now
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.head, s.tail, s.free = -1, -1, -1
		s.max = o.MaxBytes / int64(n)
		s.slots = int(min(s.max/c.fixed, 1<<31-1))
	}
	return c
}

func (c *Cache[K, V]) shard(k K) *shard[K, V] {
	if len(c.shards) == 1 {
		return &c.shards[0]
	}
	return &c.shards[c.hash(k)%uint64(len(c.shards))]
}

// Cost returns what an entry of k and v costs against MaxBytes.
func (c *Cache[K, V]) Cost(k K, v V) int64 {
	n := c.fixed
	if c.bytes != nil {
		n += c.bytes(k, v)
	}
	return n
}

// Get returns the value of k, if it is held and has not expired, and
// makes k the most recently used.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.index[k]
	if !ok {
		var zero V
		return zero, false
	}
	if s.expires != nil && c.now().UnixNano() >= s.expires[i] {
		c.remove(s, i)
		var zero V
		return zero, false
	}
	s.moveToFront(i)
	return s.entries[i].value, true
}

// Put sets the value of k, makes it the most recently used and evicts
// the least recently used until the bound holds. It reports whether the
// entry was stored: one that costs more than the whole cache (or its
// shard) is not, and the value k had stays.
func (c *Cache[K, V]) Put(k K, v V) bool {
	cost := c.Cost(k, v)
	s := c.shard(k)
	if cost > s.max {
		return false
	}
	var expires int64
	if c.ttl > 0 {
		expires = c.now().Add(c.ttl).UnixNano()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.index[k]; ok {
		c.remove(s, i)
	}
	for s.bytes+cost > s.max {
		c.remove(s, s.tail)
	}
	i := s.alloc(c.ttl > 0)
	s.entries[i] = entry[K, V]{key: k, value: v, prev: -1, next: -1}
	if s.expires != nil {
		s.expires[i] = expires
	}
	if s.index == nil {
		s.index = make(map[K]int32)
	}
	s.index[k] = i
	s.bytes += cost
	s.pushFront(i)
	return true
}

// Len returns the number of entries held, expired ones not yet dropped
// included.
func (c *Cache[K, V]) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.index)
		s.mu.Unlock()
	}
	return n
}

// Bytes returns what the entries held cost, as the bound counts it.
func (c *Cache[K, V]) Bytes() int64 {
	var n int64
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += s.bytes
		s.mu.Unlock()
	}
	return n
}

// alloc returns a free slot: a freed one, else a new one. The slices
// grow by a quarter, to keep little room unused, and never past the
// entries the bound allows.
func (s *shard[K, V]) alloc(ttl bool) int32 {
	if i := s.free; i >= 0 {
		s.free = s.entries[i].next
		return i
	}
	n := len(s.entries)
	if n == cap(s.entries) {
		size := min(n+n/4+8, max(s.slots, n+1))
		s.entries = append(make([]entry[K, V], 0, size), s.entries...)
		if ttl {
			s.expires = append(make([]int64, 0, size), s.expires...)
		}
	}
	s.entries = s.entries[:n+1]
	if ttl {
		s.expires = s.expires[:n+1]
	}
	return int32(n)
}

// remove drops the entry in slot i of s and frees the slot.
func (c *Cache[K, V]) remove(s *shard[K, V], i int32) {
	s.unlink(i)
	e := &s.entries[i]
	delete(s.index, e.key)
	s.bytes -= c.Cost(e.key, e.value)
	*e = entry[K, V]{next: s.free} // let go of what the key and value point to
	s.free = i
}

func (s *shard[K, V]) moveToFront(i int32) {
	if s.head == i {
		return
	}
	s.unlink(i)
	s.pushFront(i)
}

func (s *shard[K, V]) unlink(i int32) {
	e := &s.entries[i]
	if e.prev >= 0 {
		s.entries[e.prev].next = e.next
	} else {
		s.head = e.next
	}
	if e.next >= 0 {
		s.entries[e.next].prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = -1, -1
}

func (s *shard[K, V]) pushFront(i int32) {
	e := &s.entries[i]
	e.prev, e.next = -1, s.head
	if s.head >= 0 {
		s.entries[s.head].prev = i
	}
	s.head = i
	if s.tail < 0 {
		s.tail = i
	}
}
