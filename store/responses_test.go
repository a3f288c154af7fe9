package store

import (
	"context"
	"errors"
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
			if err := s.Put(ctx, "big", []byte(strings.Repeat("x", maxBytes))); err != nil {
				t.Fatal(err)
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
