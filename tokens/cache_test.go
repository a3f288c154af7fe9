package tokens

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/phasegate/phasegate/chat"
)

// countBytes is what one cached count costs.
var countBytes = newCache(1).counts.Cost(cacheKey{}, 0)

func TestCacheLRU(t *testing.T) {
	key := func(i int) cacheKey { return cacheKey{hash: uint64(i) * cacheShards, kind: kindMessage} } // all in shard 0
	tests := []struct {
		name string
		ops  func(c *cache)
		want map[int]bool // key → still cached
	}{
		{
			name: "evicts the least recently put",
			ops:  func(c *cache) { c.put(key(1), 1); c.put(key(2), 2); c.put(key(3), 3) },
			want: map[int]bool{1: false, 2: true, 3: true},
		},
		{
			name: "a get makes an entry recent",
			ops:  func(c *cache) { c.put(key(1), 1); c.put(key(2), 2); c.get(key(1)); c.put(key(3), 3) },
			want: map[int]bool{1: true, 2: false, 3: true},
		},
		{
			name: "a put of a cached key updates it in place",
			ops:  func(c *cache) { c.put(key(1), 1); c.put(key(2), 2); c.put(key(1), 10); c.put(key(3), 3) },
			want: map[int]bool{1: true, 2: false, 3: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCache(2 * countBytes * cacheShards) // two entries a shard
			tt.ops(c)
			for k, want := range tt.want {
				if _, got := c.get(key(k)); got != want {
					t.Errorf("key %d: got cached %v, want %v", k, got, want)
				}
			}
			if got := c.len(); got != 2 {
				t.Errorf("got %d entries, want 2", got)
			}
		})
	}
}

// TestFitCountsOnlyNewMessages checks the promise of the cache: a re-sent
// history costs tiktoken nothing, one more message costs that message.
func TestFitCountsOnlyNewMessages(t *testing.T) {
	const model = "deepseek-v4-pro"
	c := newCounter(t, DefaultConfig())
	h := &history{tb: t}
	h.text("sys", "system", 50).text("u1", "user", 300).call("call", "c1", "c2").
		result("r1", "c1", 2000).result("r2", "c2", 2000).text("a1", "assistant", 300).text("u2", "user", 30)
	tools := decodeTools(t, cookbookTools)

	fit := func(msgs []chat.Message) int64 {
		t.Helper()
		before := c.encodes.Load()
		if _, err := c.Fit(model, msgs, tools, 0, 0); err != nil {
			t.Fatal(err)
		}
		return c.encodes.Load() - before
	}
	if got := fit(h.msgs); got == 0 {
		t.Fatalf("first count: got no tiktoken calls")
	}
	if got := fit(h.msgs); got != 0 {
		t.Errorf("same history again: got %d tiktoken calls, want 0", got)
	}
	resent := decodeMessages(t, string(mustJSON(t, h.msgs))) // as a new request would arrive
	if got := fit(resent); got != 0 {
		t.Errorf("same history, decoded anew: got %d tiktoken calls, want 0", got)
	}
	h.text("a2", "assistant", 100)
	alone := newCounter(t, DefaultConfig())
	last := h.msgs[len(h.msgs)-1]
	alone.messageTokens(alone.models.resolve(model).enc, &last)
	if got, want := fit(h.msgs), alone.encodes.Load(); got != want {
		t.Errorf("one new message: got %d tiktoken calls, want %d (that message's)", got, want)
	}
}

// TestConcurrent runs Fit and Observe from many goroutines, for the race
// detector.
func TestConcurrent(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CacheBytes = 64 * countBytes * cacheShards // small: evictions race with hits
	c := newCounter(t, cfg)
	h := &history{tb: t}
	h.text("sys", "system", 20)
	for i := range 40 {
		h.text(fmt.Sprintf("u%d", i), "user", 50+i).text(fmt.Sprintf("a%d", i), "assistant", 50)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			model := []string{"gpt-4o", "deepseek-v4-flash", fmt.Sprintf("unknown-%d", g)}[g%3]
			for i := range 20 {
				f, err := c.Fit(model, h.msgs[:1+(g*7+i)%len(h.msgs)], nil, 0, 2000)
				if err != nil {
					t.Error(err)
					return
				}
				c.Observe(model, f.PromptTokens, f.PromptTokens*11/10)
				_ = c.Ratio(model)
			}
		})
	}
	wg.Wait()
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// len is how many counts the cache holds.
func (c *cache) len() int { return c.counts.Len() }
