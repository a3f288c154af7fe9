package store

import (
	"strconv"
	"testing"
	"time"
)

// A refused ask leaves the budget as it was and says so: Redis and memory
// report the same units left.
func TestLimiterRefusalKeepsWhatIsLeft(t *testing.T) {
	for name, l := range limiters(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			if d, err := l.Allow(ctx, "r", 100, 60); err != nil || !d.Allowed || d.Remaining != 40 {
				t.Fatalf("60 of 100: %+v, %v", d, err)
			}
			d, err := l.Allow(ctx, "r", 100, 50)
			if err != nil || d.Allowed || d.Remaining != 40 || d.RetryAfter < 5*time.Second || d.RetryAfter > 6*time.Second {
				t.Errorf("50 of 100 with 40 left: %+v, %v; want refused, 40 left, retry after about 6s", d, err)
			}
			if d, err := l.Allow(ctx, "r", 100, 40); err != nil || !d.Allowed || d.Remaining > 1 {
				t.Errorf("the 40 left after a refusal: %+v, %v; want allowed", d, err)
			}
		})
	}
}

// The budgets on Redis are the gateway's own keys: the time at which the
// budget is whole again, in ms since the epoch by Redis's clock, under
// phasegate:limit:, expiring then; no other key is written.
func TestRedisLimiterKeys(t *testing.T) {
	r, _ := openTestRedis(t)
	ctx := testContext(t)
	l := NewRedisLimiter(r)
	if _, err := l.Allow(ctx, "k", 60, 30); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Charge(ctx, "c", 60, 90); err != nil {
		t.Fatal(err)
	}
	keys, err := r.c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Errorf("keys %v, want phasegate:limit:k and phasegate:limit:c only", keys)
	}
	now, err := r.c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for key, ahead := range map[string]time.Duration{"k": 30 * time.Second, "c": 90 * time.Second} {
		v, err := r.c.Get(ctx, "phasegate:limit:"+key).Result()
		if err != nil {
			t.Fatalf("budget %s: %v", key, err)
		}
		ms, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("budget %s holds %q: %v", key, v, err)
		}
		if got := time.UnixMicro(int64(ms * 1000)).Sub(now); got > ahead || got < ahead-wait {
			t.Errorf("budget %s whole again in %v by Redis's clock, want about %v", key, got, ahead)
		}
		if ttl, err := r.c.PTTL(ctx, "phasegate:limit:"+key).Result(); err != nil || ttl <= 0 || ttl > ahead+time.Millisecond {
			t.Errorf("budget %s expires in %v, %v; want in at most %v", key, ttl, err, ahead)
		}
	}
}
