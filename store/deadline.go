package store

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrDeadline is what a call to Redis returns at once when the request
// it belongs to has spent its time for Redis (see ShareDeadline).
var ErrDeadline = errors.New("redis skipped: this request's time for Redis (REDIS_TIMEOUT) is spent")

// sharedKey is the context key of a request's shared deadline.
type sharedKey struct{}

// shared is the one deadline of the calls to Redis a request makes before
// it is served: set by the first, REDIS_TIMEOUT after it starts. It is
// safe for concurrent use.
type shared struct {
	mu    sync.Mutex
	at    time.Time
	ended bool
}

// ShareDeadline returns ctx under which every call to Redis shares one
// deadline, REDIS_TIMEOUT after the first starts (retries included), until
// EndSharedDeadline: a Redis that hangs costs a request one REDIS_TIMEOUT,
// not one for each call it makes (the rate limits of its key, project and
// address, its stream's log, its reasoning) before the breaker opens. A
// call made once the time is spent fails at once with ErrDeadline, which
// the breaker does not count: it never reached Redis.
func ShareDeadline(ctx context.Context) context.Context {
	return context.WithValue(ctx, sharedKey{}, &shared{})
}

// EndSharedDeadline ends the deadline ShareDeadline set on ctx, for every
// context derived from ctx: the calls a request makes once it is served
// (a stream's events, what it spent) have their own timeouts again.
func EndSharedDeadline(ctx context.Context) {
	if s, ok := ctx.Value(sharedKey{}).(*shared); ok {
		s.mu.Lock()
		s.ended = true
		s.mu.Unlock()
	}
}

// sharedDeadline returns the deadline of the calls under ctx, set now
// when this is the first, and whether there is one.
func sharedDeadline(ctx context.Context, timeout time.Duration) (time.Time, bool) {
	s, ok := ctx.Value(sharedKey{}).(*shared)
	if !ok {
		return time.Time{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return time.Time{}, false
	}
	if s.at.IsZero() {
		s.at = time.Now().Add(timeout)
	}
	return s.at, true
}
