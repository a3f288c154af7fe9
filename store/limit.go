package store

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

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
	c *redis.Client
}

// NewRedisLimiter returns the limiter of r.
func NewRedisLimiter(r *Redis) *RedisLimiter {
	return &RedisLimiter{l: redis_rate.NewLimiter(r.c), c: r.c}
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

// chargeScript spends ARGV[2] units (a negative count gives them back)
// of the GCRA budget at KEYS[1] whatever is left, so the budget may go
// into debt; ARGV[1] is the seconds each unit takes to come back. It keeps
// the budget as redis_rate does, so the two share keys: the key holds the
// theoretical arrival time, in seconds since 2017-01-01 by Redis's clock,
// and expires when the budget is whole again. It returns the seconds until
// then, as a string.
var chargeScript = redis.NewScript(`
local key = KEYS[1]
local interval, cost = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = (t[1] - 1483228800) + t[2] / 1000000
local tat = tonumber(redis.call('GET', key) or now)
if tat < now then
  tat = now
end
tat = tat + interval * cost
local ahead = tat - now
if ahead > 0 then
  redis.call('SET', key, tat, 'EX', math.ceil(ahead))
else
  redis.call('DEL', key)
end
return tostring(ahead)
`)

// redisRatePrefix is what redis_rate puts before the keys it is given.
const redisRatePrefix = "rate:"

// Charge spends n units of key's budget even past what is left: the
// budget goes into debt, and later asks wait until it is paid back (the
// correction of an estimate by the usage reported after the call, as
// OpenAI's tokens per minute do). n < 0 gives units back (a refund).
// Allowed reports whether the budget had all n left.
func (l *RedisLimiter) Charge(ctx context.Context, key string, perMinute, n int) (Decision, error) {
	interval := 60 / float64(perMinute)
	v, err := chargeScript.Run(ctx, l.c, []string{redisRatePrefix + limitKey + key}, interval, n).Text()
	if err != nil {
		return Decision{}, fmt.Errorf("charge rate limit %d/min: %w", perMinute, err)
	}
	ahead, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return Decision{}, fmt.Errorf("charge rate limit %d/min: reply %q: %w", perMinute, v, err)
	}
	return debtDecision(perMinute, time.Duration(ahead*float64(time.Second))), nil
}

// debtDecision is the decision of a charge that leaves a budget of
// perMinute whole again after ahead: Allowed when nothing is owed.
func debtDecision(perMinute int, ahead time.Duration) Decision {
	d := Decision{Limit: perMinute, Allowed: ahead <= time.Minute}
	if ahead > 0 {
		d.ResetAfter = ahead
		d.Remaining = max(0, int(math.Floor(float64(time.Minute-ahead)/float64(time.Minute)*float64(perMinute))))
	} else {
		d.Remaining = perMinute
	}
	if !d.Allowed {
		d.RetryAfter = ahead - time.Minute
	}
	return d
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

// MemoryLimiter keeps limits in this process, with the same GCRA as on
// Redis: a budget is the time at which it is whole again (its theoretical
// arrival time); each unit pushes it a sixtieth of a minute per unit of
// the budget further, and asks that would push it more than a minute
// ahead are refused. It holds at most maxKeys budgets; the least recently
// used is forgotten first. It is safe for concurrent use.
type MemoryLimiter struct {
	mu   sync.Mutex
	byID *lru.Cache[string, *memBudget]
}

// memBudget is one budget: whole again at tat, for perMinute.
type memBudget struct {
	tat       time.Time
	perMinute int
}

// memoryLimiterKeys bounds the budgets a MemoryLimiter holds: keys and
// project ids come from clients.
const memoryLimiterKeys = 100_000

// NewMemoryLimiter returns an empty in-memory limiter.
func NewMemoryLimiter() *MemoryLimiter {
	return &MemoryLimiter{byID: lru.New(lru.Options[string, *memBudget]{
		MaxBytes: memoryLimiterKeys,
		Bytes:    func(string, *memBudget) int64 { return 1 },
	})}
}

// budget returns key's budget; m.mu is held.
func (m *MemoryLimiter) budget(key string, perMinute int) *memBudget {
	b, ok := m.byID.Get(key)
	if !ok || b.perMinute != perMinute {
		b = &memBudget{perMinute: perMinute}
		m.byID.Put(key, b)
	}
	return b
}

// units is how long n units of a budget of perMinute take to come back.
func units(n, perMinute int) time.Duration {
	return time.Duration(float64(n) / float64(perMinute) * float64(time.Minute))
}

// Allow spends n units of key's budget of perMinute if all n are left;
// n = 0 only reads the budget.
func (m *MemoryLimiter) Allow(_ context.Context, key string, perMinute, n int) (Decision, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, now := m.budget(key, perMinute), time.Now()
	tat := b.tat
	if tat.Before(now) {
		tat = now
	}
	next := tat.Add(units(n, perMinute))
	d := debtDecision(perMinute, next.Sub(now))
	switch {
	case n > perMinute:
		d = debtDecision(perMinute, tat.Sub(now))
		d.Allowed, d.RetryAfter = false, time.Minute
	case !d.Allowed:
		d.RetryAfter = next.Sub(now) - time.Minute
		d.Remaining = debtDecision(perMinute, tat.Sub(now)).Remaining
		d.ResetAfter = max(0, tat.Sub(now))
	default:
		b.tat = next
	}
	return d, nil
}

// Charge spends n units of key's budget even past what is left, into
// debt; n < 0 gives units back. See RedisLimiter.Charge.
func (m *MemoryLimiter) Charge(_ context.Context, key string, perMinute, n int) (Decision, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, now := m.budget(key, perMinute), time.Now()
	if b.tat.Before(now) {
		b.tat = now
	}
	b.tat = b.tat.Add(units(n, perMinute))
	return debtDecision(perMinute, b.tat.Sub(now)), nil
}
