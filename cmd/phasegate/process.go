package main

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/redis/go-redis/v9"

	"github.com/phasegate/phasegate/tokens"
)

// The choices here are the process's, not a library's: go-redis has one
// logger per process, and handing memory back to the system is for the
// program to decide.

// logRedisRetriesAtDebug sends what go-redis logs of its own retries (a
// pub/sub reconnecting, a pool that cannot dial) to slog at debug level,
// rather than to stderr: the gateway logs and counts each failure it sees.
// go-redis has one logger per process, so the process chooses it.
func logRedisRetriesAtDebug() { redis.SetLogger(redisDebugLog{}) }

type redisDebugLog struct{}

func (redisDebugLog) Printf(ctx context.Context, format string, v ...any) {
	slog.DebugContext(ctx, fmt.Sprintf(format, v...))
}

// newCounter is the gateway's token counter. Loading an encoding's tables
// makes about as much garbage as they keep: the process hands it back to
// the system at once rather than hold it for minutes (once per encoding).
func newCounter(cfg tokens.Config) (*tokens.Counter, error) {
	cfg.EncodingLoaded = func(string) { debug.FreeOSMemory() }
	return tokens.New(cfg)
}
