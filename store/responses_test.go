package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// responsesStore is what the proxy uses of MemoryResponses and
// RedisResponses.
type responsesStore interface {
	Put(ctx context.Context, key string, val []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
	Delete(ctx context.Context, key string) error
}

func TestResponsesBounds(t *testing.T) {
	r, _ := openTestRedis(t)
	const maxBytes = 100
	for name, s := range map[string]responsesStore{
		"memory": NewMemoryResponses(time.Hour, maxBytes),
		"redis":  NewRedisResponses(r, time.Hour, maxBytes),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			// Each record costs len(key)+len(val) = 2+38 = 40 bytes.
			val := []byte(strings.Repeat("v", 38))
			for _, k := range []string{"k1", "k2", "k3"} {
				if err := s.Put(ctx, k, val); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Get(ctx, "k1"); !errors.Is(err, ErrNotFound) {
				t.Errorf("k1 after 120 bytes into 100: err = %v, want ErrNotFound (the oldest evicted)", err)
			}
			for _, k := range []string{"k2", "k3"} {
				if got, err := s.Get(ctx, k); err != nil || string(got) != string(val) {
					t.Errorf("Get(%s) = %q, %v", k, got, err)
				}
			}
			if err := s.Put(ctx, "big", []byte(strings.Repeat("x", maxBytes))); !errors.Is(err, ErrTooLarge) {
				t.Errorf("Put of a record larger than the memory: %v, want ErrTooLarge", err)
			}
			if _, err := s.Get(ctx, "big"); !errors.Is(err, ErrNotFound) {
				t.Errorf("a record larger than the memory was kept: %v", err)
			}
			if err := s.Delete(ctx, "k3"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctx, "k3"); !errors.Is(err, ErrNotFound) {
				t.Errorf("k3 after Delete: err = %v", err)
			}
			if err := s.Delete(ctx, "k3"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Delete of nothing: err = %v, want ErrNotFound", err)
			}
			// Room freed by Delete is room again: k2 (40) + two more (80) > 100
			// drops k2 only.
			for _, k := range []string{"k4", "k5"} {
				if err := s.Put(ctx, k, val); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Get(ctx, "k4"); err != nil {
				t.Errorf("k4: %v", err)
			}
		})
	}
}

func TestResponsesTTL(t *testing.T) {
	r, _ := openTestRedis(t)
	const ttl = time.Hour
	m := NewMemoryResponses(ttl, 0)
	rr := NewRedisResponses(r, ttl, 0)
	ctx := testContext(t)
	for _, s := range []responsesStore{m, rr} {
		if err := s.Put(ctx, "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	// Memory: move the record's expiry into the past.
	m.mu.Lock()
	rec := m.records["k"]
	rec.expires = time.Now().Add(-time.Second)
	m.records["k"] = rec
	m.mu.Unlock()
	if _, err := m.Get(ctx, "k"); !errors.Is(err, ErrNotFound) {
		t.Errorf("memory: expired record read: %v", err)
	}
	// Redis: the key carries the TTL.
	if d, err := r.c.PTTL(ctx, responsesKeys.entry+"k").Result(); err != nil || d <= 0 || d > ttl {
		t.Errorf("redis: record TTL = %v, %v; want (0, %v]", d, err, ttl)
	}
}

// TestResponsesGroups: one group (a client's records, "resp:<owner>:<id>")
// that stores without end evicts its own oldest records, never another
// group's: past its GroupShare of the bound its own go first, and when
// the store is full, the oldest of the group holding the most. The store
// as a whole stays within its bound. Before, one key flooding the store
// evicted every other key's records, oldest first.
func TestResponsesGroups(t *testing.T) {
	r, _ := openTestRedis(t)
	const maxBytes = 400 // a group holds at most 100
	for name, s := range map[string]responsesStore{
		"memory": NewMemoryResponses(time.Hour, maxBytes),
		"redis":  NewRedisResponses(r, time.Hour, maxBytes),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			val := []byte(strings.Repeat("v", 32)) // 40 bytes with a key of 8
			put := func(key string) {
				t.Helper()
				if err := s.Put(ctx, key, val); err != nil {
					t.Fatal(err)
				}
			}
			has := func(key string) bool {
				_, err := s.Get(ctx, key)
				if err != nil && !errors.Is(err, ErrNotFound) {
					t.Fatal(err)
				}
				return err == nil
			}
			put("resp:b:1")
			for i := range 50 {
				put(fmt.Sprintf("resp:a:%d", i%10))
				put(fmt.Sprintf("item:a:%d", i))
			}
			if !has("resp:b:1") {
				t.Errorf("another group's record was evicted by a group storing without end")
			}
			kept := 0
			for i := range 50 {
				if has(fmt.Sprintf("item:a:%d", i)) {
					kept++
				}
			}
			if !has("item:a:49") || kept > 2 {
				t.Errorf("the flooding group keeps %d of its items (its newest kept: %v); want its newest, at most 2 (100 bytes)", kept, has("item:a:49"))
			}
			// Full: c, d and e hold 80 bytes each, b 40, a 80; one more of
			// f's takes the oldest of a group holding 80, never b's.
			for _, g := range []string{"c", "d", "e", "f"} {
				put("resp:" + g + ":1")
				put("resp:" + g + ":2")
			}
			if !has("resp:b:1") || !has("resp:f:2") {
				t.Errorf("b's record kept %v, f's newest %v; want both", has("resp:b:1"), has("resp:f:2"))
			}
		})
	}
}

// TestResponsesGetCharged: GetCharged tells charge the size of a record
// before it hands it on; a refusal of charge is its answer, without the
// record, and a key it does not hold is ErrNotFound.
func TestResponsesGetCharged(t *testing.T) {
	r, _ := openTestRedis(t)
	errRefused := errors.New("refused")
	for name, s := range map[string]interface {
		responsesStore
		GetCharged(ctx context.Context, key string, charge func(n int64) error) ([]byte, error)
	}{
		"memory": NewMemoryResponses(time.Hour, 0),
		"redis":  NewRedisResponses(r, time.Hour, 0),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			val := []byte(strings.Repeat("v", 1000))
			if err := s.Put(ctx, "resp:o:r1", val); err != nil {
				t.Fatal(err)
			}
			var charged int64
			got, err := s.GetCharged(ctx, "resp:o:r1", func(n int64) error { charged += n; return nil })
			if err != nil || string(got) != string(val) || charged != int64(len(val)) {
				t.Errorf("GetCharged = %d bytes, %v, charged %d; want %d, nil, %d", len(got), err, charged, len(val), len(val))
			}
			got, err = s.GetCharged(ctx, "resp:o:r1", func(int64) error { return errRefused })
			if !errors.Is(err, errRefused) || got != nil {
				t.Errorf("GetCharged refused = %d bytes, %v; want none and the refusal", len(got), err)
			}
			if _, err := s.GetCharged(ctx, "resp:o:none", func(int64) error { return nil }); !errors.Is(err, ErrNotFound) {
				t.Errorf("GetCharged of nothing: %v, want ErrNotFound", err)
			}
		})
	}
}
