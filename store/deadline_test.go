package store

import (
	"errors"
	"testing"
	"time"
)

// TestShareDeadline: with Redis hung, the calls under one shared deadline
// take one timeout together: the first waits it out (its retry within
// it), the next fail at once with ErrDeadline, which the breaker does not
// count; once EndSharedDeadline, calls have their own timeouts again.
func TestShareDeadline(t *testing.T) {
	r, srv := openTestRedisWith(t, RedisOptions{})
	limiter := NewRedisLimiter(r)
	ctx := ShareDeadline(testContext(t))
	if _, err := limiter.Allow(ctx, "k", 10, 1); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	defer srv.Continue(t)
	t0 := time.Now()
	_, first := limiter.Allow(ctx, "k", 10, 1)
	_, second := limiter.Allow(ctx, "k2", 10, 1)
	took := time.Since(t0)
	if first == nil || !errors.Is(second, ErrDeadline) {
		t.Errorf("first %v, second %v; want a failure, then ErrDeadline", first, second)
	}
	if took > 3*DefaultTimeout {
		t.Errorf("two calls with Redis hung took %v, want about one timeout (%v)", took, DefaultTimeout)
	}
	EndSharedDeadline(ctx)
	if _, err := limiter.Allow(ctx, "k3", 10, 1); err == nil || errors.Is(err, ErrDeadline) {
		t.Errorf("after EndSharedDeadline: %v, want a call of its own that fails", err)
	}
}
