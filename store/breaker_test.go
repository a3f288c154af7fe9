package store

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/phasegate/phasegate/internal/redistest"
)

// breakerLog records what the breaker tells its observer.
type breakerLog struct {
	mu       sync.Mutex
	states   []string
	rejected int
}

func (l *breakerLog) RedisBreakerState(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.states = append(l.states, s)
}

func (l *breakerLog) RedisBreakerRejected() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rejected++
}

func (l *breakerLog) seen() ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.states), l.rejected
}

// TestBreakerOnHungRedis pauses a real redis-server (SIGSTOP: it hangs,
// it does not refuse): each call gives up after the timeout, three in a
// row open the breaker, and every call then fails at once with
// ErrUnavailable without touching Redis; once Redis answers again, the
// probe after the cool-down closes it.
func TestBreakerOnHungRedis(t *testing.T) {
	srv := redistest.Start(t)
	obs := &breakerLog{}
	r, err := OpenRedisWith(srv.URL, RedisOptions{Timeout: 100 * time.Millisecond, BreakerFailures: 3, BreakerCooldown: 300 * time.Millisecond, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	ctx := testContext(t)
	limits := NewRedisLimiter(r)
	streams := NewRedisStreams(r, time.Minute)
	if _, err := limits.Allow(ctx, "k", 100, 1); err != nil {
		t.Fatalf("Allow with Redis up: %v", err)
	}
	srv.Pause(t)
	// A call is one command or more (a script is EVALSHA, then EVAL),
	// each bounded by the timeout: at most three calls open it.
	if _, err := limits.Allow(ctx, "k", 100, 1); err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("first call to a hung Redis = %v; want it to time out", err)
	}
	for range 2 {
		if _, err := limits.Allow(ctx, "k", 100, 1); err == nil {
			t.Fatal("a call to a hung Redis succeeded")
		}
	}
	if states, _ := obs.seen(); states[len(states)-1] != string(BreakerOpen) {
		t.Fatalf("after three timeouts the breaker went through %v; want it open", states)
	}
	// Open: every store fails at once with the sentinel, the blocking
	// reads of followers too.
	if _, err := limits.Allow(ctx, "k", 100, 1); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Allow with the breaker open = %v, want ErrUnavailable", err)
	}
	if _, err := NewReasoning(r, 1<<20, time.Hour).Recall(ctx, []string{"a"}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Recall with the breaker open = %v, want ErrUnavailable", err)
	}
	if err := streams.Start(ctx, "s", ""); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Start with the breaker open = %v, want ErrUnavailable", err)
	}
	if _, _, err := streams.Read(ctx, "s", 0, time.Second); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Read with the breaker open = %v, want ErrUnavailable", err)
	}
	if _, rejected := obs.seen(); rejected < 4 {
		t.Errorf("calls refused = %d, want 4 counted", rejected)
	}

	srv.Continue(t)
	deadline := time.Now().Add(wait)
	for {
		_, err := limits.Allow(ctx, "k", 100, 1)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrUnavailable) && time.Now().After(deadline) {
			t.Fatalf("Redis answers again, yet calls still fail after %v: %v", wait, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the breaker never closed again within %v", wait)
		}
		time.Sleep(20 * time.Millisecond) // polling the cool-down, which is time itself
	}
	states, _ := obs.seen()
	if n := len(states); n < 3 || states[n-2] != string(BreakerHalfOpen) || states[n-1] != string(BreakerClosed) {
		t.Errorf("breaker states %v; want it closed by a probe (half_open, then closed)", states)
	}
}

// TestBreakerIgnoresReplies: error replies are Redis answering, not
// failing; they never open the breaker.
func TestBreakerIgnoresReplies(t *testing.T) {
	r, _ := openTestRedis(t)
	ctx := testContext(t)
	for range 2 * DefaultBreakerFailures {
		if err := r.c.Do(ctx, "NOSUCHCOMMAND").Err(); err == nil || errors.Is(err, ErrUnavailable) {
			t.Fatalf("unknown command = %v, want Redis's error reply", err)
		}
	}
	if err := r.Ping(ctx); err != nil {
		t.Errorf("Ping after error replies = %v, want the breaker still closed", err)
	}
}
