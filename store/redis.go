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
	blocking  *redis.Client
	followers int
}

// DefaultFollowers is how many resumes one replica follows live at once
// (a Redis connection each) unless OpenRedisFollowers says otherwise.
const DefaultFollowers = 256

func init() {
	// go-redis logs its own retries (a pub/sub reconnecting, a pool that
	// cannot dial) to stderr; the gateway logs and counts each failure it
	// sees, so these go to slog at debug level.
	redis.SetLogger(debugLog{})
}

type debugLog struct{}

func (debugLog) Printf(ctx context.Context, format string, v ...any) {
	slog.DebugContext(ctx, fmt.Sprintf(format, v...))
}

// OpenRedis connects to the Redis of url (redis://[user:password@]host:port/db
// or rediss:// for TLS). A Redis that does not answer yet is not an
// error: the features that use it degrade until it does.
func OpenRedis(url string) (*Redis, error) { return OpenRedisFollowers(url, DefaultFollowers) }

// OpenRedisFollowers is OpenRedis with at most followers resumes followed
// live at once.
func OpenRedisFollowers(url string, followers int) (*Redis, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		// The URL may hold a password: the parser's message is not
		// repeated.
		return nil, errors.New("REDIS_URL is not a redis:// or rediss:// URL")
	}
	// Short timeouts: a Redis that hangs must cost a request a little
	// time, not all of it.
	opt.DialTimeout = 2 * time.Second
	opt.ReadTimeout = time.Second
	opt.WriteTimeout = time.Second
	opt.MaxRetries = 1
	opt.DialerRetries = 1
	bopt := *opt
	bopt.PoolSize, bopt.MinIdleConns, bopt.MaxIdleConns = followers, 0, 0
	// A follower past the pool's size is refused by the proxy before it
	// asks; this wait only covers a connection being dialled.
	bopt.PoolTimeout = opt.DialTimeout + time.Second
	return &Redis{c: redis.NewClient(opt), blocking: redis.NewClient(&bopt), followers: followers}, nil
}

// Ping checks that Redis answers.
func (r *Redis) Ping(ctx context.Context) error {
	if err := r.c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping redis: %w", err)
	}
	return nil
}

// Close closes the connections.
func (r *Redis) Close() error { return errors.Join(r.c.Close(), r.blocking.Close()) }
