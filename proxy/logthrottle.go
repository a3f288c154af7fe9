package proxy

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// storeLogEvery is how often one warning of the shared store failing is
// logged while it goes on failing: the first at once (the store started
// failing), then at most one in each period, with the number of those
// not logged since (suppressed). While Redis is down every request would
// otherwise log one or more: 231,000 lines in 70 s were seen.
const storeLogEvery = 10 * time.Second

// storeFailures start the messages of the warnings of the shared store
// failing, which throttledLog holds to storeLogEvery.
var storeFailures = []string{"shared store failed", "store of responses failed", "response not stored"}

// throttledLog wraps next so that a warning of the shared store failing
// is logged at most once every period per message (see storeLogEvery);
// every other record passes. The handlers With and WithGroup derive share
// its counts. It is safe for concurrent use.
func throttledLog(next slog.Handler, every time.Duration, now func() time.Time) slog.Handler {
	return throttle{next: next, counts: &logCounts{every: every, now: now, last: map[string]time.Time{}, suppressed: map[string]int{}}}
}

type throttle struct {
	next   slog.Handler
	counts *logCounts
}

// logCounts is when each throttled message was last logged and how many
// were not logged since. Messages are the gateway's own, a bounded set.
type logCounts struct {
	every      time.Duration
	now        func() time.Time
	mu         sync.Mutex
	last       map[string]time.Time
	suppressed map[string]int
}

// admit reports whether a record of msg is logged now, and how many were
// not since the last that was.
func (c *logCounts) admit(msg string) (suppressed int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if last, seen := c.last[msg]; seen && now.Sub(last) < c.every {
		c.suppressed[msg]++
		return 0, false
	}
	c.last[msg] = now
	suppressed = c.suppressed[msg]
	delete(c.suppressed, msg)
	return suppressed, true
}

func (t throttle) Enabled(ctx context.Context, l slog.Level) bool { return t.next.Enabled(ctx, l) }

func (t throttle) Handle(ctx context.Context, rec slog.Record) error {
	if !storeFailure(rec.Message) {
		return t.next.Handle(ctx, rec)
	}
	n, ok := t.counts.admit(rec.Message)
	if !ok {
		return nil
	}
	if n > 0 {
		rec = rec.Clone()
		rec.AddAttrs(slog.Int("suppressed", n), slog.String("suppressed_within", t.counts.every.String()))
	}
	return t.next.Handle(ctx, rec)
}

func (t throttle) WithAttrs(attrs []slog.Attr) slog.Handler {
	return throttle{next: t.next.WithAttrs(attrs), counts: t.counts}
}

func (t throttle) WithGroup(name string) slog.Handler {
	return throttle{next: t.next.WithGroup(name), counts: t.counts}
}

// storeFailure reports whether msg is a warning of the shared store
// failing.
func storeFailure(msg string) bool {
	for _, p := range storeFailures {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
