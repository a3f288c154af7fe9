package protocol

import (
	"math"
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		value  string
		want   time.Duration
		wantOK bool
	}{
		{"absent", "", 0, false},
		{"seconds", "7", 7 * time.Second, true},
		{"zero", "0", 0, true},
		{"an HTTP date", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"a date in the past", now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"negative", "-3", 0, false},
		{"garbage", "soon", 0, false},
		// Past what a time.Duration holds: the longest wait, never a
		// product that wrapped around into an immediate retry.
		{"seconds past a duration", "18446744074", math.MaxInt64, true},
		{"seconds past a uint64", "184467440737095516160", math.MaxInt64, true},
		{"the largest seconds a duration holds", "9223372036", 9223372036 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.value != "" {
				h.Set("Retry-After", tt.value)
			}
			got, ok := retryAfter(h, now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("retryAfter(%q) = (%v, %v), want (%v, %v)", tt.value, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestRetryWaitBounds: the jittered backoff of attempt n lies in
// [0, Base·2ⁿ], never over MaxWait, and the attempts are bounded.
func TestRetryWaitBounds(t *testing.T) {
	s := &session{x: &Exchange{Retry: Retry{Attempts: 5, Base: 100 * time.Millisecond, MaxWait: time.Second}}}
	err := &UpstreamError{Status: 503, Header: http.Header{}}
	for attempt := range 5 {
		limit := min(100*time.Millisecond<<attempt, time.Second)
		for range 200 {
			d, ok := s.retryWait(err, attempt)
			if !ok || d < 0 || d > limit {
				t.Fatalf("attempt %d: wait %v (ok %v), want within [0, %v]", attempt, d, ok, limit)
			}
		}
	}
	if _, ok := s.retryWait(err, 5); ok {
		t.Errorf("attempt 5 of 5 retried")
	}
	s.wrote = true
	if _, ok := s.retryWait(err, 0); ok {
		t.Errorf("retried after bytes reached the client")
	}
}
