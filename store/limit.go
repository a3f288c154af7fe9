package store

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"golang.org/x/time/rate"

	"github.com/phasegate/phasegate/internal/lru"
)

// Decision is what a limit says of n units (requests or tokens) asked
// for now. Limits are budgets per minute that refill continuously (GCRA,
// the generic cell rate algorithm): the whole minute's budget may be
// spent at once, then it comes back at PerMinute/60 a second.
type Decision struct {
	// Allowed reports whether the units were granted (and spent).
	Allowed bool
	// Limit is the budget per minute; Remaining what is left of it.
	Limit, Remaining int
	// RetryAfter is, when not Allowed, how long until the units could be
	// granted.
	RetryAfter time.Duration
	// ResetAfter is how long until the whole budget is back.
	ResetAfter time.Duration
}

// RedisLimiter keeps limits on Redis, shared by every replica, with
// go-redis/redis_rate's GCRA.
type RedisLimiter struct {
	l *redis_rate.Limiter
}

// NewRedisLimiter returns the limiter of r.
func NewRedisLimiter(r *Redis) *RedisLimiter {
	return &RedisLimiter{l: redis_rate.NewLimiter(r.c)}
}

const limitKey = prefix + "limit:"

// Allow spends n units of key's budget of perMinute if all n are left;
// n = 0 only reads the budget.
func (l *RedisLimiter) Allow(ctx context.Context, key string, perMinute, n int) (Decision, error) {
	res, err := l.l.AllowN(ctx, limitKey+key, redis_rate.PerMinute(perMinute), n)
	if err != nil {
		return Decision{}, fmt.Errorf("rate limit %d/min: %w", perMinute, err)
	}
	return decision(res, n), nil
}

// Charge spends up to n units of key's budget, as many as are left: the
// correction of an estimate after the fact, which GCRA cannot let run
// into debt.
func (l *RedisLimiter) Charge(ctx context.Context, key string, perMinute, n int) (Decision, error) {
	res, err := l.l.AllowAtMost(ctx, limitKey+key, redis_rate.PerMinute(perMinute), n)
	if err != nil {
		return Decision{}, fmt.Errorf("charge rate limit %d/min: %w", perMinute, err)
	}
	d := decision(res, 0)
	d.Allowed = res.Allowed == n
	return d, nil
}

func decision(res *redis_rate.Result, n int) Decision {
	d := Decision{Allowed: res.Allowed >= n, Limit: res.Limit.Burst, Remaining: res.Remaining, ResetAfter: res.ResetAfter}
	if !d.Allowed {
		d.RetryAfter = res.RetryAfter
		if d.RetryAfter < 0 || n > res.Limit.Burst {
			// More than a whole minute's budget never passes; a minute
			// is the honest answer.
			d.RetryAfter = time.Minute
		}
	}
	return d
}

// MemoryLimiter keeps limits in this process, with golang.org/x/time/rate
// (a token bucket that refills continuously, which for a budget per minute
// with a burst of a minute's worth is the same as GCRA). It holds at most
// maxKeys budgets; the least recently used is forgotten first. It is safe
// for concurrent use.
type MemoryLimiter struct {
	mu   sync.Mutex
	byID *lru.Cache[string, *rate.Limiter]
}

// memoryLimiterKeys bounds the budgets a MemoryLimiter holds: keys and
// project ids come from clients.
const memoryLimiterKeys = 100_000

// NewMemoryLimiter returns an empty in-memory limiter.
func NewMemoryLimiter() *MemoryLimiter {
	return &MemoryLimiter{byID: lru.New(lru.Options[string, *rate.Limiter]{
		MaxBytes: memoryLimiterKeys,
		Bytes:    func(string, *rate.Limiter) int64 { return 1 },
	})}
}

func (m *MemoryLimiter) limiter(key string, perMinute int) *rate.Limiter {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.byID.Get(key)
	if !ok || l.Burst() != perMinute {
		l = rate.NewLimiter(rate.Limit(float64(perMinute)/60), perMinute)
		m.byID.Put(key, l)
	}
	return l
}

// Allow spends n units of key's budget of perMinute if all n are left;
// n = 0 only reads the budget.
func (m *MemoryLimiter) Allow(_ context.Context, key string, perMinute, n int) (Decision, error) {
	l, now := m.limiter(key, perMinute), time.Now()
	d := Decision{Limit: perMinute}
	if n > perMinute {
		d.RetryAfter = time.Minute
	} else if r := l.ReserveN(now, n); r.DelayFrom(now) > 0 {
		d.RetryAfter = r.DelayFrom(now)
		r.CancelAt(now)
	} else {
		d.Allowed = true
	}
	m.fill(&d, l, now)
	return d, nil
}

// Charge spends up to n units of key's budget, as many as are left.
func (m *MemoryLimiter) Charge(_ context.Context, key string, perMinute, n int) (Decision, error) {
	l, now := m.limiter(key, perMinute), time.Now()
	take := min(n, int(math.Floor(l.TokensAt(now))))
	if take > 0 {
		l.ReserveN(now, take)
	}
	d := Decision{Limit: perMinute, Allowed: take == n}
	m.fill(&d, l, now)
	return d, nil
}

// fill sets what is left of the budget and when it is full again.
func (m *MemoryLimiter) fill(d *Decision, l *rate.Limiter, now time.Time) {
	left := l.TokensAt(now)
	d.Remaining = max(0, int(math.Floor(left)))
	if missing := float64(d.Limit) - left; missing > 0 && d.Limit > 0 {
		d.ResetAfter = time.Duration(missing / float64(d.Limit) * float64(time.Minute))
	}
}
