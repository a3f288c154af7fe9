package proxy

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestThrottledLog: a warning of the shared store failing is logged the
// first time, then at most once a period per message, with the number of
// those not logged since; the handlers With derives share the counts;
// every other record passes.
func TestThrottledLog(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	log := slog.New(throttledLog(slog.NewTextHandler(&buf, nil), 10*time.Second, func() time.Time { return now }))
	for i := range 50 {
		log.With("request_id", i).Warn("shared store failed; rate limit not applied (RATE_LIMIT_FAIL_OPEN)", "limit", "key_requests")
		log.Warn("stream failed after start")
		now = now.Add(time.Second)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var store []string
	others := 0
	for _, l := range lines {
		if strings.Contains(l, "shared store failed") {
			store = append(store, l)
		} else if strings.Contains(l, "stream failed after start") {
			others++
		}
	}
	if others != 50 {
		t.Errorf("%d other warnings logged, want all 50", others)
	}
	if len(store) != 5 {
		t.Fatalf("%d store warnings logged over 50 s, want 5 (one each 10 s):\n%s", len(store), strings.Join(store, "\n"))
	}
	if strings.Contains(store[0], "suppressed") || !strings.Contains(store[1], "suppressed=9") || !strings.Contains(store[1], "request_id=10") {
		t.Errorf("first %q, second %q; want the first whole, the second with suppressed=9", store[0], store[1])
	}
}
