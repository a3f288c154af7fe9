package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/phasegate/phasegate/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 10 * time.Second

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// openTestRedis opens a fresh redis-server with a timeout of 2 s on each
// read and write, not the gateway's 100 ms: a test of what Redis stores
// must not fail because a loaded machine stalled a call. Tests of the
// timeouts themselves open theirs with openTestRedisWith.
func openTestRedis(t *testing.T) (*Redis, *redistest.Server) {
	t.Helper()
	return openTestRedisWith(t, RedisOptions{Timeout: 2 * time.Second})
}

// openTestRedisWith opens a fresh redis-server with the bounds of o.
func openTestRedisWith(t *testing.T, o RedisOptions) (*Redis, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	r, err := OpenRedisWith(srv.URL, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, srv
}

func TestOpenRedisHidesTheURL(t *testing.T) {
	_, err := OpenRedis("http://user:hunter2@host")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("OpenRedis(bad URL) = %v, want an error that does not quote the URL", err)
	}
}

func TestReasoningBounds(t *testing.T) {
	r, _ := openTestRedis(t)
	ctx := testContext(t)
	const maxBytes = 100
	m := NewReasoning(r, maxBytes, time.Hour)
	// Each entry costs len(id)+len(reasoning) = 2+38 = 40 bytes.
	reasoning := strings.Repeat("r", 38)
	for _, id := range []string{"c1", "c2", "c3"} {
		if err := m.Remember(ctx, []string{id}, reasoning); err != nil {
			t.Fatal(err)
		}
	}
	got, err := m.Recall(ctx, []string{"c1", "c2", "c3", "missing"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["c1"]; ok || got["c2"] != reasoning || got["c3"] != reasoning || len(got) != 2 {
		t.Errorf("after 120 bytes into a 100-byte memory, recalled %v; want c2 and c3 only (the oldest evicted)", keys(got))
	}
	if n, err := m.reasoningBytes(ctx); err != nil || n != 80 {
		t.Errorf("bytes held = %d, %v; want 80", n, err)
	}
	if err := m.Remember(ctx, []string{"big"}, strings.Repeat("x", maxBytes)); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Recall(ctx, []string{"big", "c3"}); len(got) != 1 || got["c3"] == "" {
		t.Errorf("a reasoning larger than the memory: recalled %v, want it not stored and c3 kept", keys(got))
	}
}

// TestReasoningTTL: each entry is stored with the TTL for Redis to expire
// it, and entries older than the TTL by Redis's clock leave the
// bookkeeping at the next remember. Time is not waited out: the entries'
// ages are set back by the TTL in the bookkeeping, as Redis's clock would
// have moved them.
func TestReasoningTTL(t *testing.T) {
	r, _ := openTestRedis(t)
	ctx := testContext(t)
	const ttl = time.Hour
	m := NewReasoning(r, 1<<20, ttl)
	if err := m.Remember(ctx, []string{"a", "b"}, "why"); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Recall(ctx, []string{"a", "b"}); got["a"] != "why" || got["b"] != "why" {
		t.Fatalf("recalled %v at once, want both ids", got)
	}
	for _, id := range []string{"a", "b"} {
		if left, err := r.c.PTTL(ctx, reasoningKeys.entry+id).Result(); err != nil || left <= 0 || left > ttl {
			t.Errorf("%s expires in %v (%v), want within the %v TTL", id, left, err, ttl)
		}
	}
	now, err := r.c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	older := now.Add(-ttl - time.Second).UnixMilli()
	for _, id := range []string{"a", "b"} {
		if err := r.c.ZAdd(ctx, reasoningKeys.age, redis.Z{Score: float64(older), Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Remember(ctx, []string{"c"}, "x"); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Recall(ctx, []string{"a", "b", "c"}); len(got) != 1 || got["c"] != "x" {
		t.Errorf("after the TTL recalled %v, want c only", keys(got))
	}
	if n, _ := m.reasoningBytes(ctx); n != 2 {
		t.Errorf("bytes held after expiry = %d, want 2 (only c)", n)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

type limiter interface {
	Allow(ctx context.Context, key string, perMinute, n int) (Decision, error)
	Charge(ctx context.Context, key string, perMinute, n int) (Decision, error)
}

func limiters(t *testing.T) map[string]limiter {
	r, _ := openTestRedis(t)
	return map[string]limiter{"memory": NewMemoryLimiter(), "redis": NewRedisLimiter(r)}
}

func TestLimiter(t *testing.T) {
	for name, l := range limiters(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			for i := 1; i <= 3; i++ {
				d, err := l.Allow(ctx, "k", 3, 1)
				if err != nil || !d.Allowed || d.Remaining != 3-i || d.Limit != 3 {
					t.Fatalf("request %d: %+v, %v; want allowed with %d remaining of 3", i, d, err, 3-i)
				}
			}
			d, err := l.Allow(ctx, "k", 3, 1)
			if err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 21*time.Second {
				t.Fatalf("4th request of 3/min: %+v, %v; want refused, retry after about 20s", d, err)
			}
			if d, _ := l.Allow(ctx, "other", 3, 1); !d.Allowed {
				t.Errorf("another key shares the budget: %+v", d)
			}
			if d, _ := l.Allow(ctx, "big", 10, 11); d.Allowed || d.RetryAfter != time.Minute {
				t.Errorf("11 units of 10/min: %+v; want refused, retry after a minute", d)
			}
			if d, _ := l.Allow(ctx, "t", 100, 60); !d.Allowed || d.Remaining != 40 {
				t.Fatalf("60 of 100: %+v", d)
			}
			// A charge past what is left runs the budget into debt: 30
			// units owed, 18 s at 100/min, before the next ask passes.
			if d, err := l.Charge(ctx, "t", 100, 70); err != nil || d.Allowed || d.Remaining != 0 {
				t.Errorf("charge 70 with 40 left: %+v, %v; want charged in full, none left", d, err)
			}
			if d, err := l.Allow(ctx, "t", 100, 1); err != nil || d.Allowed || d.RetryAfter < 17*time.Second || d.RetryAfter > 20*time.Second {
				t.Errorf("ask 1 after a debt of 30 of 100/min: %+v, %v; want refused, retry after about 18.6s", d, err)
			}
			// A refund gives units back.
			if _, err := l.Charge(ctx, "t", 100, -70); err != nil {
				t.Fatal(err)
			}
			if d, err := l.Allow(ctx, "t", 100, 1); err != nil || !d.Allowed || d.Remaining < 38 || d.Remaining > 39 {
				t.Errorf("ask 1 after the 70 were given back: %+v, %v; want allowed, 39 left", d, err)
			}
		})
	}
}

type eventLog interface {
	Start(ctx context.Context, id, owner string) error
	Append(ctx context.Context, id string, events []Event, end bool) error
	Read(ctx context.Context, id string, after int, wait time.Duration) ([]Event, bool, error)
	Info(ctx context.Context, id string) (StreamInfo, error)
	Cancel(ctx context.Context, id string) error
	Fail(ctx context.Context, id string, status int, body []byte) error
}

func TestStreams(t *testing.T) {
	r, _ := openTestRedis(t)
	for name, log := range map[string]eventLog{"memory": NewMemoryStreams(time.Minute), "redis": NewRedisStreams(r, time.Minute)} {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			if err := log.Start(ctx, "s1", "owner"); err != nil {
				t.Fatal(err)
			}
			if err := log.Start(ctx, "s1", "other"); !errors.Is(err, ErrExists) {
				t.Errorf("second Start = %v, want ErrExists", err)
			}
			if _, err := log.Info(ctx, "nope"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Info(unknown) = %v, want ErrNotFound", err)
			}
			evs := []Event{{N: 1, Data: []byte("a"), PhaseStart: true, PhaseIndex: 1}, {N: 2, Data: []byte("b")}, {N: 3, Data: []byte("c"), PhaseStart: true, PhaseIndex: 2}}
			if err := log.Append(ctx, "s1", evs, false); err != nil {
				t.Fatal(err)
			}
			got, ended, err := log.Read(ctx, "s1", 1, time.Millisecond)
			if err != nil || ended || fmt.Sprint(eventData(got)) != "[2:b 3:c]" {
				t.Errorf("Read after 1 = %v, ended %v, %v; want [2:b 3:c], not ended", eventData(got), ended, err)
			}
			// A reader waiting past the end wakes on the next append.
			type result struct {
				evs   []Event
				ended bool
			}
			woke := make(chan result, 1)
			go func() {
				evs, ended, _ := log.Read(ctx, "s1", 3, wait)
				woke <- result{evs, ended}
			}()
			if err := log.Append(ctx, "s1", []Event{{N: 4, Data: []byte("[DONE]")}}, true); err != nil {
				t.Fatal(err)
			}
			res := <-woke
			if fmt.Sprint(eventData(res.evs)) != "[4:[DONE]]" {
				t.Errorf("waiting reader got %v, want [4:[DONE]]", eventData(res.evs))
			}
			got, ended, _ = log.Read(ctx, "s1", 4, time.Millisecond)
			if !ended || len(got) != 0 {
				if info, _ := log.Info(ctx, "s1"); !info.Ended {
					t.Errorf("after the end: %v ended=%v, info %+v; want ended", eventData(got), ended, info)
				}
			}
			info, err := log.Info(ctx, "s1")
			if err != nil || info.Owner != "owner" || !info.Ended || info.Cancelled || info.Phases[1] != 1 || info.Phases[2] != 3 {
				t.Errorf("Info = %+v, %v; want owner, ended, phases 1→1 2→3", info, err)
			}
		})
	}
}

func eventData(evs []Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%d:%s", e.N, e.Data))
	}
	return out
}

func TestRedisStreamsWatch(t *testing.T) {
	r, _ := openTestRedis(t)
	ctx := testContext(t)
	a, b := NewRedisStreams(r, time.Minute), NewRedisStreams(r, time.Minute)
	if err := a.Start(ctx, "s", ""); err != nil {
		t.Fatal(err)
	}
	watchCtx, stop := context.WithCancel(ctx)
	got, ready, done := make(chan string, 1), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		a.Watch(watchCtx, func(id string) { got <- id }, func() { close(ready) })
	}()
	<-ready
	if err := b.Cancel(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-got:
		if id != "s" {
			t.Errorf("watched cancel of %q, want s", id)
		}
	case <-time.After(wait):
		t.Fatal("the cancel never reached the watcher")
	}
	stop()
	<-done
}

func TestRedisDown(t *testing.T) {
	r, srv := openTestRedis(t)
	srv.Kill()
	ctx := testContext(t)
	start := time.Now()
	if _, err := NewReasoning(r, 1<<20, time.Hour).Recall(ctx, []string{"a"}); err == nil {
		t.Error("Recall with Redis down: no error")
	}
	if _, err := NewRedisLimiter(r).Allow(ctx, "k", 10, 1); err == nil {
		t.Error("Allow with Redis down: no error")
	}
	if _, err := NewRedisStreams(r, time.Minute).Info(ctx, "s"); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Info with Redis down = %v, want a store error, not ErrNotFound", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("three calls to a dead Redis took %v; the timeouts should bound them", d)
	}
}

// A batch sent again (its reply was lost, and the client or the recorder
// retried it) is stored once, and a stream that ended takes nothing more.
func TestStreamsAppendIsIdempotent(t *testing.T) {
	r, _ := openTestRedis(t)
	for name, log := range map[string]eventLog{"memory": NewMemoryStreams(time.Minute), "redis": NewRedisStreams(r, time.Minute)} {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			if err := log.Start(ctx, "s", ""); err != nil {
				t.Fatal(err)
			}
			first := []Event{{N: 1, Data: []byte("a")}, {N: 2, Data: []byte("b")}}
			for range 2 {
				if err := log.Append(ctx, "s", first, false); err != nil {
					t.Fatalf("append of a batch already stored: %v", err)
				}
			}
			// A retry that overlaps what is stored adds only the new events.
			if err := log.Append(ctx, "s", []Event{{N: 2, Data: []byte("b")}, {N: 3, Data: []byte("[DONE]")}}, true); err != nil {
				t.Fatalf("append overlapping what is stored: %v", err)
			}
			if err := log.Append(ctx, "s", []Event{{N: 3, Data: []byte("[DONE]")}}, true); err != nil {
				t.Fatalf("the end sent again: %v", err)
			}
			got, ended, err := log.Read(ctx, "s", 0, time.Millisecond)
			if err != nil || !ended || fmt.Sprint(eventData(got)) != "[1:a 2:b 3:[DONE]]" {
				t.Errorf("Read = %v, ended %v, %v; want [1:a 2:b 3:[DONE]] once each, ended", eventData(got), ended, err)
			}
		})
	}
}

// A stream that failed before its first event keeps the error its client
// got, with its status, for a resume to answer the same.
func TestStreamsFail(t *testing.T) {
	r, _ := openTestRedis(t)
	for name, log := range map[string]eventLog{"memory": NewMemoryStreams(time.Minute), "redis": NewRedisStreams(r, time.Minute)} {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			if err := log.Start(ctx, "s", "o"); err != nil {
				t.Fatal(err)
			}
			body := []byte(`{"error":{"message":"bad model","type":"invalid_request_error","param":null,"code":"model_not_found"}}`)
			if err := log.Fail(ctx, "s", 400, body); err != nil {
				t.Fatal(err)
			}
			info, err := log.Info(ctx, "s")
			if err != nil || info.Status != 400 || !info.Ended || info.Owner != "o" {
				t.Errorf("Info = %+v, %v; want status 400, ended, owner o", info, err)
			}
			got, ended, err := log.Read(ctx, "s", 0, time.Millisecond)
			if err != nil || !ended || fmt.Sprint(eventData(got)) != "[1:"+string(body)+"]" {
				t.Errorf("Read = %v, ended %v, %v; want the error body at 1, ended", eventData(got), ended, err)
			}
		})
	}
}

// reasoningBytes is the total the memory holds, for tests.
func (m *Reasoning) reasoningBytes(ctx context.Context) (int64, error) {
	s, err := m.r.c.Get(ctx, reasoningKeys.total).Result()
	if err == redis.Nil {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(s, 10, 64)
}
