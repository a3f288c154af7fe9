package proxy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestWatchdog checks which bound fires, with which cause: the first-byte
// bound before the first event, the idle bound after it, none while the
// clock is paused.
func TestWatchdog(t *testing.T) {
	const short = 50 * time.Millisecond
	tests := []struct {
		name      string
		firstByte time.Duration
		idle      time.Duration
		// events is how many events arrive (pause, then resume) at once.
		events int
		want   error // nil: the watchdog must not fire
	}{
		{name: "no event: first byte", firstByte: short, idle: time.Hour, want: ErrFirstByteTimeout},
		{name: "an event, then silence: idle", firstByte: time.Hour, idle: short, events: 1, want: ErrIdleTimeout},
		{name: "idle bound alone", idle: short, events: 2, want: ErrIdleTimeout},
		{name: "first-byte bound alone stops at the first event", firstByte: short, events: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			wd := newWatchdog(tt.firstByte, tt.idle, cancel)
			defer wd.stop()
			for range tt.events {
				wd.pause()
				wd.resume()
			}
			// Four times the bound: long enough for the timer to fire.
			bound := time.NewTimer(4 * short)
			defer bound.Stop()
			select {
			case <-ctx.Done():
				if got := context.Cause(ctx); !errors.Is(got, tt.want) || tt.want == nil {
					t.Errorf("fired with %v, want %v", got, tt.want)
				}
			case <-bound.C:
				if tt.want != nil {
					t.Errorf("did not fire, want %v", tt.want)
				}
			}
		})
	}
	if newWatchdog(0, 0, func(error) {}) != nil {
		t.Error("newWatchdog(0, 0) is not nil: nothing to bound")
	}
	var none *watchdog
	none.pause()
	none.resume()
	none.stop()
}

// TestEventsSlowConsumer checks time spent by the consumer on an event is
// not counted as upstream idleness: a client slower than the idle bound
// still gets a healthy upstream stream whole.
func TestEventsSlowConsumer(t *testing.T) {
	const idle = 50 * time.Millisecond
	u := &upstream{cfg: &Config{MaxEventBytes: 1 << 10, Timeouts: Timeouts{Idle: idle}}}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	wd := newWatchdog(0, idle, cancel)
	defer wd.stop()
	body := strings.NewReader("data: a\n\ndata: b\n\ndata: [DONE]\n\n")
	var got []string
	for data, err := range u.events(ctx, body, wd, new(bool)) {
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, string(data))
		// A slow client: the write takes four idle bounds.
		slow := time.NewTimer(4 * idle)
		select {
		case <-slow.C:
		case <-ctx.Done():
			t.Fatalf("the watchdog fired while the consumer worked: %v", context.Cause(ctx))
		}
	}
	if strings.Join(got, ",") != "a,b,[DONE]" {
		t.Errorf("events = %q, want a, b, [DONE]", got)
	}
}
