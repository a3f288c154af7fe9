package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotFound reports an id the store does not hold (never stored, or
// expired).
var ErrNotFound = errors.New("not found")

// prefix is put before every key the gateway writes, so a Redis shared
// with other programs stays readable.
const prefix = "phasegate:"

// Redis is the connection every replica shares. It is safe for concurrent
// use; Close releases it.
type Redis struct {
	c *redis.Client
	// blocking serves the reads that wait for a stream's next events
	// (XREAD BLOCK): each holds a connection while it waits, so they have
	// a pool of their own, of followers connections, and never starve the
	// short calls (rate limits, appends, reasoning) of c.
	blocking *redis.Client
	// bulk serves the writes of large values (LargeValue): each has a
	// deadline of its own, scaled to its size (bulkTimeout), and a
	// breaker of its own, so that a write too large for REDIS_TIMEOUT
	// neither fails for want of time nor opens the breaker of the short
	// calls every request makes.
	bulk      *redis.Client
	followers int
	// timeout bounds each call of c, and what a blocking read waits past
	// its own wait.
	timeout time.Duration
}

// DefaultFollowers is how many resumes one replica follows live at once
// (a Redis connection each) unless RedisOptions.Followers says otherwise.
const DefaultFollowers = 256

// Defaults of RedisOptions.
const (
	DefaultTimeout         = 100 * time.Millisecond
	DefaultBreakerFailures = 3
	DefaultBreakerCooldown = 5 * time.Second
)

// RedisOptions are the bounds of the calls to Redis.
type RedisOptions struct {
	// Followers is how many resumes are followed live at once.
	// Default DefaultFollowers.
	Followers int
	// Timeout bounds each read and write of a call a request waits for
	// (REDIS_TIMEOUT); a call is retried once. Default DefaultTimeout.
	Timeout time.Duration
	// BreakerFailures is how many calls in a row that Redis does not
	// answer open the breaker. Default DefaultBreakerFailures.
	BreakerFailures int
	// BreakerCooldown is how long the open breaker fails every call at
	// once before one call probes Redis (REDIS_BREAKER_COOLDOWN).
	// Default DefaultBreakerCooldown.
	BreakerCooldown time.Duration
	// Observer, when set, is told what the breaker does.
	Observer BreakerObserver
	// Logger, when set, logs each change of the breaker's state: Redis
	// failing (open) and answering again (closed), once each, however
	// many requests meet it meanwhile.
	Logger *slog.Logger
}

// OpenRedis connects to the Redis of url (redis://[user:password@]host:port/db
// or rediss:// for TLS). A Redis that does not answer yet is not an
// error: the features that use it degrade until it does.
func OpenRedis(url string) (*Redis, error) { return OpenRedisWith(url, RedisOptions{}) }

// OpenRedisWith is OpenRedis with the bounds of o.
func OpenRedisWith(url string, o RedisOptions) (*Redis, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		// The URL may hold a password: the parser's message is not
		// repeated.
		return nil, errors.New("REDIS_URL is not a redis:// or rediss:// URL")
	}
	o = o.withDefaults()
	// Short timeouts: a Redis that hangs (rather than refuses) must cost
	// a request a little time, not all of it; past a few such failures
	// the breaker skips it altogether. The bound is on each read and
	// write, not on the call: a burst of calls waiting for a connection
	// of the pool is the gateway busy, not Redis failing.
	opt.DialTimeout = 2 * time.Second
	opt.ReadTimeout = o.Timeout
	opt.WriteTimeout = o.Timeout
	opt.PoolTimeout = time.Second
	opt.MaxRetries = 1
	opt.DialerRetries = 1
	// A call under a request's shared deadline (ShareDeadline) is bounded
	// by it, its retry included: the reads and writes take the earlier of
	// their own timeout and the context's deadline.
	opt.ContextTimeoutEnabled = true
	bopt := *opt
	// A blocking read waits its own wait: Read gives its context that
	// deadline, plus the timeout.
	bopt.ContextTimeoutEnabled = true
	bopt.ReadTimeout = time.Second
	bopt.PoolSize, bopt.MinIdleConns, bopt.MaxIdleConns = o.Followers, 0, 0
	// A follower past the pool's size is refused by the proxy before it
	// asks; this wait only covers a connection being dialled.
	bopt.PoolTimeout = opt.DialTimeout + time.Second
	b := newBreaker(o.BreakerFailures, o.BreakerCooldown, o.Observer)
	b.log = o.Logger
	r := &Redis{c: redis.NewClient(opt), blocking: redis.NewClient(&bopt), bulk: redis.NewClient(bulkOptions(opt)), followers: o.Followers, timeout: o.Timeout}
	r.c.AddHook(hook{b: b, timeout: o.Timeout})
	r.blocking.AddHook(hook{b: b})
	r.bulk.AddHook(hook{b: newBreaker(o.BreakerFailures, o.BreakerCooldown, nil)})
	return r, nil
}

// LargeValue is the size from which a value is written through the bulk
// connections, with a deadline of its own (see bulkTimeout).
const LargeValue = 64 << 10

// bulkRate is the least rate a large write is given time for: a 16 MiB
// record has REDIS_TIMEOUT and 4 s.
const bulkRate = 4 << 20

// maxBulkWait bounds any one large write.
const maxBulkWait = 30 * time.Second

// bulkOptions are the options of the bulk connections: a few, whose
// reads and writes are bounded by the deadline of each call's context
// (bulkTimeout), maxBulkWait at most.
func bulkOptions(opt *redis.Options) *redis.Options {
	o := *opt
	o.ContextTimeoutEnabled = true
	o.ReadTimeout, o.WriteTimeout = maxBulkWait, maxBulkWait
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns = 8, 0, 2
	o.PoolTimeout = maxBulkWait
	return &o
}

// bulkTimeout is the time a write of n bytes is given: REDIS_TIMEOUT and
// the time n takes at bulkRate, maxBulkWait at most.
func (r *Redis) bulkTimeout(n int) time.Duration {
	return min(r.timeout+time.Duration(float64(n)/bulkRate*float64(time.Second)), maxBulkWait)
}

func (o RedisOptions) withDefaults() RedisOptions {
	if o.Followers <= 0 {
		o.Followers = DefaultFollowers
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.BreakerFailures <= 0 {
		o.BreakerFailures = DefaultBreakerFailures
	}
	if o.BreakerCooldown <= 0 {
		o.BreakerCooldown = DefaultBreakerCooldown
	}
	return o
}

// Ping checks that Redis answers.
func (r *Redis) Ping(ctx context.Context) error {
	if err := r.c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping redis: %w", err)
	}
	return nil
}

// Close closes the connections.
func (r *Redis) Close() error { return errors.Join(r.c.Close(), r.blocking.Close(), r.bulk.Close()) }
