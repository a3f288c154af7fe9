package tokens

import (
	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/lru"
)

// Kinds of cached counts: the same bytes count differently as a message,
// a tool definition and plain text.
const (
	kindMessage uint8 = iota + 1
	kindTool
	kindText
	kindShortened
)

// cacheKey identifies counted content without holding it: a per-process
// seeded 64-bit hash, the length (a collision must also match it) and what
// was counted how.
type cacheKey struct {
	hash uint64
	size uint32
	kind uint8
	enc  uint8
}

// cacheShards splits the count cache, to keep lock contention low: every
// message of every request is looked up.
const cacheShards = 16

// cache is an LRU of token counts by content, bounded by the bytes its
// entries cost: 100 each, all bookkeeping (92 measured by
// BenchmarkCacheMemory). Safe for concurrent use.
type cache struct {
	counts *lru.Cache[cacheKey, int32]
}

func newCache(bytes int64) *cache {
	return &cache{counts: lru.New(lru.Options[cacheKey, int32]{
		MaxBytes: bytes,
		Shards:   cacheShards,
		Hash:     func(k cacheKey) uint64 { return k.hash },
	})}
}

func (c *cache) get(k cacheKey) (int, bool) {
	n, ok := c.counts.Get(k)
	return int(n), ok
}

func (c *cache) put(k cacheKey, tokens int) {
	c.counts.Put(k, int32(tokens))
}

// shortenedShare: a quarter of Config.CacheBytes holds shortened tool
// results, the rest counts.
const shortenedShare = 4

// shortCache holds shortened tool results by the key of the original, so
// that a history re-sent with the same oversized result does not decode
// and re-encode it again. An LRU bounded by the bytes of the messages it
// holds; safe for concurrent use. The messages are shared: read-only, like every
// chat.Message.
type shortCache struct {
	msgs *lru.Cache[cacheKey, shortened]
}

type shortened struct {
	msg    chat.Message
	tokens int
}

func newShortCache(max int64) *shortCache {
	return &shortCache{msgs: lru.New(lru.Options[cacheKey, shortened]{
		MaxBytes: max,
		Bytes:    func(_ cacheKey, s shortened) int64 { return messageBytes(&s.msg) },
	})}
}

// messageBytes is what a decoded tool result holds: its raw form, and the
// copies decoding made of its content and strings.
func messageBytes(m *chat.Message) int64 {
	return int64(len(m.Raw) + len(m.Content) + len(m.Role) + len(m.ToolCallID))
}

func (c *shortCache) get(k cacheKey) (chat.Message, int, bool) {
	s, ok := c.msgs.Get(k)
	return s.msg, s.tokens, ok
}

func (c *shortCache) put(k cacheKey, m chat.Message, tokens int) {
	c.msgs.Put(k, shortened{msg: m, tokens: tokens})
}
