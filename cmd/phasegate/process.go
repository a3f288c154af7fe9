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

// ownsCollector is set when run serves the process, not a test, and no
// GOGC was given: the process then paces its collector (see pacedCollector).
var ownsCollector bool

// gcBeforeTables is the collector's GOGC until a tokenizer's tables are
// loaded. Until then the live heap is a few MB, and at the default 100 the
// collector would run about eight times as often as once the tables (23
// MiB of heap) are in it: 176 collections for 10,000 small guarded
// requests against 22, about 8 µs of CPU a request. At 200 it took 77,
// and 64 streams at once peaked under 50 MiB (at 400: 35, and 61 MiB).
const gcBeforeTables = 200

// pacedCollector sets the collector's GOGC to gcBeforeTables when own,
// and returns what the counter calls once an encoding's tables are
// loaded: the default GOGC again, when own, and the garbage of the loading
// (about as much as the tables keep) handed back to the system at once
// rather than held for minutes.
func pacedCollector(own bool) (loaded func(encoding string)) {
	if own {
		debug.SetGCPercent(gcBeforeTables)
	}
	return func(string) {
		if own {
			debug.SetGCPercent(100)
		}
		debug.FreeOSMemory()
	}
}

// newCounter is the gateway's token counter.
func newCounter(cfg tokens.Config) (*tokens.Counter, error) {
	cfg.EncodingLoaded = pacedCollector(ownsCollector)
	return tokens.New(cfg)
}
