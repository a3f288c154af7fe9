package store

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

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

// RedisLimiter keeps limits on Redis, shared by every replica, with the
// same GCRA as MemoryLimiter, decided in one script on Redis's clock.
type RedisLimiter struct {
	c *redis.Client
}

// NewRedisLimiter returns the limiter of r.
func NewRedisLimiter(r *Redis) *RedisLimiter {
	return &RedisLimiter{c: r.c}
}

// limitKey + a limit's key holds the time at which that budget is whole
// again (its theoretical arrival time), in milliseconds since the Unix
// epoch by Redis's clock, and expires then.
const limitKey = prefix + "limit:"

// limitScript asks for ARGV[2] units (a negative count gives them back)
// of the budget at KEYS[1], each taking ARGV[1] ms to come back: with
// ARGV[3] "1" (a charge) whatever is left, so the budget may go into
// debt; else (an admission) only when the budget would still be whole
// again within a minute. It returns whether the units were spent, and how
// many ms from now the budget is whole again before and after the ask,
// as strings.
var limitScript = redis.NewScript(`
local key = KEYS[1]
local interval, n, charge = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local tat = math.max(tonumber(redis.call('GET', key) or now), now)
local after = tat + interval * n - now
if not charge and after > 60000 then
  return {0, string.format('%.3f', tat - now), string.format('%.3f', after)}
end
if after > 0 then
  redis.call('SET', key, string.format('%.3f', now + after), 'PX', math.ceil(after))
else
  redis.call('DEL', key)
end
return {1, string.format('%.3f', tat - now), string.format('%.3f', after)}
`)

// Allow spends n units of key's budget of perMinute if all n are left;
// n = 0 only reads the budget.
func (l *RedisLimiter) Allow(ctx context.Context, key string, perMinute, n int) (Decision, error) {
	spent, before, after, err := l.run(ctx, key, perMinute, n, false)
	if err != nil {
		return Decision{}, fmt.Errorf("rate limit %d/min: %w", perMinute, err)
	}
	return allowDecision(perMinute, n, before, after, spent), nil
}

// Charge spends n units of key's budget even past what is left: the
// budget goes into debt, and later asks wait until it is paid back (the
// correction of an estimate by the usage reported after the call, as
// OpenAI's tokens per minute do). n < 0 gives units back (a refund).
// Allowed reports whether the budget had all n left.
func (l *RedisLimiter) Charge(ctx context.Context, key string, perMinute, n int) (Decision, error) {
	_, _, after, err := l.run(ctx, key, perMinute, n, true)
	if err != nil {
		return Decision{}, fmt.Errorf("charge rate limit %d/min: %w", perMinute, err)
	}
	return debtDecision(perMinute, after), nil
}

// run runs limitScript: whether the n units were spent, and how long
// until the budget is whole again before and after.
func (l *RedisLimiter) run(ctx context.Context, key string, perMinute, n int, charge bool) (spent bool, before, after time.Duration, err error) {
	interval := float64(time.Minute.Milliseconds()) / float64(perMinute)
	chargeArg := "0"
	if charge {
		chargeArg = "1"
	}
	v, err := limitScript.Run(ctx, l.c, []string{limitKey + key}, interval, n, chargeArg).Slice()
	if err != nil {
		return false, 0, 0, err
	}
	if len(v) != 3 {
		return false, 0, 0, fmt.Errorf("limit script replied %v", v)
	}
	flag, _ := v[0].(int64)
	if before, err = millis(v[1]); err == nil {
		after, err = millis(v[2])
	}
	return flag == 1, before, after, err
}

// millis reads a reply of milliseconds, written as a decimal string.
func millis(v any) (time.Duration, error) {
	s, _ := v.(string)
	ms, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("limit script replied %q: %w", s, err)
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
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

// allowDecision is the decision of an admission of n units of a budget of
// perMinute that was whole again before from now, and would be after
// once they are spent; spent reports whether they were. A refused ask
// leaves the budget as it was; more than a whole minute's budget never
// passes, and a minute is the honest wait.
func allowDecision(perMinute, n int, before, after time.Duration, spent bool) Decision {
	if spent {
		return debtDecision(perMinute, after)
	}
	d := debtDecision(perMinute, before)
	d.Allowed, d.ResetAfter = false, max(0, before)
	d.RetryAfter = after - time.Minute
	if n > perMinute {
		d.RetryAfter = time.Minute
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
	spent := next.Sub(now) <= time.Minute
	if spent {
		b.tat = next
	}
	return allowDecision(perMinute, n, tat.Sub(now), next.Sub(now), spent), nil
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
