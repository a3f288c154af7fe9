package store

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrUnavailable is what every call to Redis returns at once while the
// breaker is open: Redis failed several calls in a row, and the gateway
// does not wait on it again until the cool-down is over.
var ErrUnavailable = errors.New("redis skipped: it failed the calls before (circuit breaker open)")

// BreakerState is the state of the breaker, spelled as its metric label.
type BreakerState string

const (
	// BreakerClosed: calls go to Redis.
	BreakerClosed BreakerState = "closed"
	// BreakerOpen: calls fail at once with ErrUnavailable.
	BreakerOpen BreakerState = "open"
	// BreakerHalfOpen: the cool-down is over; one call goes to Redis as
	// a probe, the others still fail at once.
	BreakerHalfOpen BreakerState = "half_open"
)

// BreakerStates are the states, for metrics to initialise.
var BreakerStates = []BreakerState{BreakerClosed, BreakerOpen, BreakerHalfOpen}

// BreakerObserver is told what the breaker does (metrics.Metrics is one).
type BreakerObserver interface {
	// RedisBreakerState is told each state the breaker enters.
	RedisBreakerState(state string)
	// RedisBreakerRejected is told of each call refused at once.
	RedisBreakerRejected()
}

// breaker is a circuit breaker on the calls to Redis, a go-redis hook:
// after failures calls that failed in a row it opens, and every call
// fails at once with ErrUnavailable for cooldown; then one call goes
// through as a probe, which closes it when Redis answers and opens it
// again when it does not. A failure is Redis not answering (a timeout, a
// connection refused or cut); an error reply (NOSCRIPT, WRONGTYPE) is
// Redis answering, and a call its caller gave up on (a cancelled context)
// says nothing of Redis. It is safe for concurrent use.
type breaker struct {
	failures int
	cooldown time.Duration
	observer BreakerObserver // nil: nobody is told
	log      *slog.Logger    // nil: no change is logged

	mu       sync.Mutex
	state    BreakerState
	failed   int       // consecutive failures while closed
	openedAt time.Time // when it last opened
	probing  bool      // a probe is out (half-open)
}

func newBreaker(failures int, cooldown time.Duration, o BreakerObserver) *breaker {
	b := &breaker{failures: max(failures, 1), cooldown: cooldown, observer: o, state: BreakerClosed}
	if o != nil {
		o.RedisBreakerState(string(BreakerClosed))
	}
	return b
}

// allow reports whether a call may go to Redis now, and whether it is
// the probe.
func (b *breaker) allow() (ok, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return true, false
	case BreakerOpen:
		if time.Since(b.openedAt) < b.cooldown {
			break
		}
		b.enter(BreakerHalfOpen)
		fallthrough
	case BreakerHalfOpen:
		if !b.probing {
			b.probing = true
			return true, true
		}
	}
	if b.observer != nil {
		b.observer.RedisBreakerRejected()
	}
	return false, false
}

// done records the outcome of a call allow let through.
func (b *breaker) done(probe bool, err error) {
	failed, counts := judge(err)
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	if !counts {
		return
	}
	switch {
	case !failed:
		b.failed = 0
		if b.state != BreakerClosed {
			b.enter(BreakerClosed)
		}
	case probe || b.state == BreakerHalfOpen:
		b.openedAt = time.Now()
		b.enter(BreakerOpen)
	case b.state == BreakerClosed:
		b.failed++
		if b.failed >= b.failures {
			b.failed = 0
			b.openedAt = time.Now()
			b.enter(BreakerOpen)
		}
	}
}

// enter moves to state s; b.mu is held.
func (b *breaker) enter(s BreakerState) {
	from := b.state
	b.state = s
	if b.observer != nil {
		b.observer.RedisBreakerState(string(s))
	}
	switch {
	case b.log == nil:
	case s == BreakerOpen && from == BreakerClosed:
		b.log.Warn("Redis is failing: every call skips it while the circuit breaker is open; shared state degrades as documented", "cooldown", b.cooldown.String())
	case s == BreakerClosed && from != BreakerClosed:
		b.log.Info("Redis answers again: the circuit breaker is closed")
	}
}

// judge reports whether err is Redis failing, and whether the call says
// anything of Redis at all.
func judge(err error) (failed, counts bool) {
	var reply redis.Error
	var ne net.Error
	switch {
	case err == nil, errors.Is(err, redis.Nil), errors.As(err, &reply) && !errors.As(err, &ne):
		return false, true
	case errors.Is(err, context.Canceled), errors.Is(err, redis.ErrPoolTimeout):
		// The caller gave up, or every connection was busy: nothing
		// said of Redis.
		return false, false
	}
	return true, true
}

// hook is the go-redis hook of one client: every command and pipeline
// asks the breaker first, and a call under a shared deadline (see
// ShareDeadline) is bounded by it; timeout is REDIS_TIMEOUT, 0 for a
// client whose calls share none.
type hook struct {
	b       *breaker
	timeout time.Duration
}

func (h hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.call(ctx, []redis.Cmder{cmd}, func(ctx context.Context) error { return next(ctx, cmd) })
	}
}

func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.call(ctx, cmds, func(ctx context.Context) error { return next(ctx, cmds) })
	}
}

// passed marks the context of a call the breaker let through: the
// commands go-redis sends inside it (HELLO on a new connection) are part
// of it, not calls of their own.
type passed struct{}

func (h hook) call(ctx context.Context, cmds []redis.Cmder, next func(context.Context) error) error {
	if ctx.Value(passed{}) != nil {
		return next(ctx)
	}
	ctx = context.WithValue(ctx, passed{}, true)
	if h.timeout > 0 {
		if at, ok := sharedDeadline(ctx, h.timeout); ok {
			if !time.Now().Before(at) {
				for _, c := range cmds {
					c.SetErr(ErrDeadline)
				}
				return ErrDeadline
			}
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, at)
			defer cancel()
		}
	}
	ok, probe := h.b.allow()
	if !ok {
		for _, c := range cmds {
			c.SetErr(ErrUnavailable)
		}
		return ErrUnavailable
	}
	err := next(ctx)
	h.b.done(probe, err)
	return err
}
