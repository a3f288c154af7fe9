package lru

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// key is shaped like the token cache's: 16 bytes, no pointers.
type key struct {
	hash uint64
	size uint32
	kind uint8
	enc  uint8
}

func keyOf(i int) key {
	return key{hash: uint64(i) * 0x9e3779b97f4a7c15, size: uint32(i), kind: 1, enc: uint8(i)}
}

func hashOf(k key) uint64 { return k.hash }

func TestEvictionOrder(t *testing.T) {
	tests := []struct {
		name string
		ops  func(c *Cache[int, int])
		want map[int]bool // key → still held
	}{
		{
			name: "evicts the least recently put",
			ops:  func(c *Cache[int, int]) { c.Put(1, 1); c.Put(2, 2); c.Put(3, 3) },
			want: map[int]bool{1: false, 2: true, 3: true},
		},
		{
			name: "a get makes an entry recent",
			ops:  func(c *Cache[int, int]) { c.Put(1, 1); c.Put(2, 2); c.Get(1); c.Put(3, 3) },
			want: map[int]bool{1: true, 2: false, 3: true},
		},
		{
			name: "a put of a held key replaces it and makes it recent",
			ops:  func(c *Cache[int, int]) { c.Put(1, 1); c.Put(2, 2); c.Put(1, 10); c.Put(3, 3) },
			want: map[int]bool{1: true, 2: false, 3: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Options[int, int]{MaxBytes: 2 * New(Options[int, int]{}).fixed}) // two entries
			tt.ops(c)
			for k, want := range tt.want {
				if _, got := c.Get(k); got != want {
					t.Errorf("key %d: got held %v, want %v", k, got, want)
				}
			}
			if got := c.Len(); got != 2 {
				t.Errorf("got %d entries, want 2", got)
			}
			if v, _ := c.Get(1); tt.want[1] && v != 1 && v != 10 {
				t.Errorf("key 1: got value %d", v)
			}
		})
	}
}

func TestByteBound(t *testing.T) {
	bytes := func(k, v string) int64 { return int64(len(k) + len(v)) }
	fixed := New(Options[string, string]{}).fixed
	const max = 4096
	c := New(Options[string, string]{MaxBytes: max, Bytes: bytes})
	cost := func(k, v string) int64 { return fixed + bytes(k, v) }
	var held int64
	for i := range 200 {
		k, v := fmt.Sprint("k", i), strings.Repeat("v", i*7%300)
		if !c.Put(k, v) {
			t.Fatalf("Put %s (%d bytes): not stored", k, cost(k, v))
		}
		if got, ok := c.Get(k); !ok || got != v {
			t.Fatalf("Get %s right after Put: got %q, %v", k, got, ok)
		}
		if held = c.Bytes(); held > max {
			t.Fatalf("after Put %s: %d bytes held, want at most %d", k, held, max)
		}
	}
	if held < max/2 {
		t.Errorf("%d bytes held of %d: evicted more than needed", held, max)
	}

	// An entry larger than the whole cache is not stored, and what the key
	// had stays.
	c.Put("big", "small")
	if c.Put("big", strings.Repeat("x", max)) {
		t.Errorf("Put of an entry larger than the cache: got stored")
	}
	if got, _ := c.Get("big"); got != "small" {
		t.Errorf("value of big after a refused Put: got %q, want %q", got, "small")
	}

	// One that takes the whole cache evicts every other.
	whole := strings.Repeat("x", int(max-fixed-int64(len("whole"))))
	if !c.Put("whole", whole) {
		t.Fatalf("Put of an entry the size of the cache: not stored")
	}
	if got, want := c.Len(), 1; got != want {
		t.Errorf("after an entry the size of the cache: got %d entries, want %d", got, want)
	}
	if got := c.Bytes(); got != max {
		t.Errorf("bytes held: got %d, want %d", got, max)
	}
}

func TestTTL(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c := New(Options[string, int]{MaxBytes: 1 << 20, TTL: time.Minute, Now: func() time.Time { return now }})
	c.Put("a", 1)
	c.Put("b", 2)
	now = now.Add(30 * time.Second)
	c.Put("b", 3) // a put starts the time again
	if _, ok := c.Get("a"); !ok {
		t.Errorf("a forgotten before its time")
	}
	now = now.Add(31 * time.Second)
	if _, ok := c.Get("a"); ok {
		t.Errorf("a remembered past its time")
	}
	if got, ok := c.Get("b"); !ok || got != 3 {
		t.Errorf("b: got %d, %v, want 3, true", got, ok)
	}
	if got := c.Len(); got != 1 {
		t.Errorf("entries after an expired read: got %d, want 1", got)
	}
	now = now.Add(time.Minute)
	if _, ok := c.Get("b"); ok {
		t.Errorf("b remembered past its time")
	}
	if got := c.Bytes(); got != 0 {
		t.Errorf("bytes held once all expired and read: got %d, want 0", got)
	}
}

func TestShards(t *testing.T) {
	c := New(Options[key, int32]{MaxBytes: 16 * 100 * New(Options[key, int32]{}).fixed, Shards: 16, Hash: hashOf})
	for i := range 1000 {
		c.Put(keyOf(i), int32(i))
	}
	for i := range 1000 {
		if got, ok := c.Get(keyOf(i)); !ok || got != int32(i) {
			t.Fatalf("key %d: got %d, %v", i, got, ok)
		}
	}
	if got := c.Len(); got != 1000 {
		t.Errorf("got %d entries, want 1000", got)
	}
}

// TestHeapWithinBound checks the byte bound against the heap: a cache
// filled three times over holds about MaxBytes, not more.
func TestHeapWithinBound(t *testing.T) {
	heap := func(fill func() any) int64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := fill()
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(c)
		return int64(after.HeapAlloc) - int64(before.HeapAlloc)
	}
	tests := []struct {
		name string
		max  int64
		fill func(max int64) any
	}{
		{"counts", 8 << 20, func(max int64) any {
			c := New(Options[key, int32]{MaxBytes: max, Shards: 16, Hash: hashOf})
			for i := range int(3 * max / c.fixed) {
				c.Put(keyOf(i), int32(i))
				c.Get(keyOf(i / 2))
			}
			return c
		}},
		{"strings", 8 << 20, func(max int64) any {
			c := New(Options[string, string]{MaxBytes: max, TTL: time.Hour, Bytes: func(k, v string) int64 { return int64(len(k) + len(v)) }})
			// Keys and values of sizes the allocator does not round up.
			for i := range int(3 * max / 600) {
				c.Put(fmt.Sprintf("call_%027d", i), strings.Repeat("r", 256+64*(i%5)))
			}
			return c
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := heap(func() any { return tt.fill(tt.max) })
			t.Logf("heap %d bytes for a bound of %d (%.2f)", got, tt.max, float64(got)/float64(tt.max))
			if got > tt.max*11/10 {
				t.Errorf("heap of a full cache: got %d bytes, want at most %d (MaxBytes and 10 %%)", got, tt.max*11/10)
			}
		})
	}
}

func TestNewAllocatesLittle(t *testing.T) {
	got := testing.AllocsPerRun(10, func() {
		New(Options[key, int32]{MaxBytes: 1 << 30, Shards: 16, Hash: hashOf})
	})
	if got > 2 {
		t.Errorf("New: got %v allocations, want at most 2 (nothing before the first Put)", got)
	}
}

// TestConcurrent is for the race detector: puts, gets and evictions from
// many goroutines on a small cache.
func TestConcurrent(t *testing.T) {
	fixed := New(Options[key, string]{}).fixed
	c := New(Options[key, string]{
		MaxBytes: 4 * 64 * fixed, Shards: 4, Hash: hashOf, TTL: time.Hour,
		Bytes: func(_ key, v string) int64 { return int64(len(v)) },
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				k := keyOf((g*31 + i) % 300)
				if v, ok := c.Get(k); ok && v != fmt.Sprint(k.size) {
					t.Errorf("key %d: got %q", k.size, v)
					return
				}
				c.Put(k, fmt.Sprint(k.size))
			}
		})
	}
	wg.Wait()
	if got, max := c.Bytes(), 4*64*fixed; got > max {
		t.Errorf("bytes held: got %d, want at most %d", got, max)
	}
}

func BenchmarkGet(b *testing.B) {
	c := New(Options[key, int32]{MaxBytes: 32 << 20, Shards: 16, Hash: hashOf})
	for i := range 1 << 16 {
		c.Put(keyOf(i), int32(i))
	}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			c.Get(keyOf(i & (1<<16 - 1)))
			i++
		}
	})
}

func BenchmarkPut(b *testing.B) {
	c := New(Options[key, int32]{MaxBytes: 1 << 20, Shards: 16, Hash: hashOf})
	i := 0
	for b.Loop() {
		c.Put(keyOf(i), int32(i))
		i++
	}
}
