package store

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// skewedClock makes a client a replica whose clock runs an hour ahead:
// its clock reaches Redis only through what it sends, so every argument
// that reads as the current time in milliseconds is shifted.
type skewedClock struct{}

func (skewedClock) DialHook(next redis.DialHook) redis.DialHook { return next }

func (skewedClock) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		now := time.Now().UnixMilli()
		args := cmd.Args()
		for i, a := range args {
			if v, ok := a.(int64); ok && v > now-time.Minute.Milliseconds() && v < now+time.Minute.Milliseconds() {
				args[i] = v + time.Hour.Milliseconds()
			}
		}
		return next(ctx, cmd)
	}
}

func (skewedClock) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The reasoning memory ages its entries by Redis's clock: a replica whose
// clock runs an hour ahead does not drop, as over an hour old, what
// another replica remembered a moment ago.
func TestReasoningAgesByRedisClock(t *testing.T) {
	r, _ := openTestRedis(t)
	ctx := testContext(t)
	m := NewReasoning(r, 1<<20, time.Hour)
	if err := m.Remember(ctx, []string{"a"}, "why a"); err != nil {
		t.Fatal(err)
	}
	skewed, err := OpenRedis("redis://" + r.c.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer skewed.Close()
	skewed.c.AddHook(skewedClock{})
	if err := NewReasoning(skewed, 1<<20, time.Hour).Remember(ctx, []string{"b"}, "why b"); err != nil {
		t.Fatal(err)
	}
	got, err := m.Recall(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if got["a"] != "why a" || got["b"] != "why b" {
		t.Errorf("recalled %v, want a and b: nothing is an hour old", keys(got))
	}
	agedByRedis(t, ctx, r, reasoningKeys.age, "b")
}

// expireAfterEach deletes a key after every command of a client that
// names it, as if its expiry fell just after each of them.
type expireAfterEach struct {
	other *redis.Client
	key   string
}

func (e expireAfterEach) DialHook(next redis.DialHook) redis.DialHook { return next }

func (e expireAfterEach) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if !slices.Contains(cmd.Args(), any(e.key)) {
			return err
		}
		if derr := e.other.Del(ctx, e.key).Err(); derr != nil {
			return errors.Join(err, derr)
		}
		return err
	}
}

func (e expireAfterEach) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A cancel that races the expiry of its stream never leaves the stream's
// key behind without an expiry: it marks a stream that exists, or finds
// none, in one step.
func TestCancelRacingExpiryLeavesNoKeyForever(t *testing.T) {
	r, _ := openTestRedis(t)
	ctx := testContext(t)
	s := NewRedisStreams(r, time.Minute)
	info := streamInfoKey + "racing"
	if err := s.Start(ctx, "racing", "owner"); err != nil {
		t.Fatal(err)
	}
	other, err := OpenRedis("redis://" + r.c.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	r.c.AddHook(expireAfterEach{other: other.c, key: info})
	if err := s.Cancel(ctx, "racing"); err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	noExpiry := func(key string) {
		t.Helper()
		ttl, err := other.c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl == -1 {
			t.Errorf("%s is left with no expiry after a cancel raced its expiry", key)
		}
	}
	noExpiry(info)
	if err := s.Cancel(ctx, "never-started"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Cancel(a stream never started) = %v, want ErrNotFound", err)
	}
	noExpiry(streamInfoKey + "never-started")
}

// The stored responses age by Redis's clock too: a replica whose clock
// runs an hour ahead does not expire, as over an hour old, what another
// replica stored a moment ago.
func TestResponsesAgeByRedisClock(t *testing.T) {
	r, _ := openTestRedis(t)
	ctx := testContext(t)
	m := NewRedisResponses(r, time.Hour, 1<<20)
	if err := m.Put(ctx, "a", []byte("record a")); err != nil {
		t.Fatal(err)
	}
	skewed, err := OpenRedis("redis://" + r.c.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer skewed.Close()
	skewed.c.AddHook(skewedClock{})
	if err := NewRedisResponses(skewed, time.Hour, 1<<20).Put(ctx, "b", []byte("record b")); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if _, err := m.Get(ctx, k); err != nil {
			t.Errorf("record %s: %v, want it kept: nothing is an hour old", k, err)
		}
	}
	agedByRedis(t, ctx, r, responsesKeys.age, "b")
}

// agedByRedis checks that entry k of the age set age was aged a moment
// before Redis's own now, whatever the clock of the replica that wrote it.
func agedByRedis(t *testing.T, ctx context.Context, r *Redis, age, k string) {
	t.Helper()
	redisNow, err := r.c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	at, err := r.c.ZScore(ctx, age, k).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(float64(redisNow.UnixMilli())-at) * time.Millisecond; d < 0 || d > wait {
		t.Errorf("%s was aged %v before Redis's now, want a moment (by Redis's clock)", k, d)
	}
}
