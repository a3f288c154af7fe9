package metrics_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/phasegate/phasegate/metrics"
)

func TestRecentBounds(t *testing.T) {
	r := metrics.NewRecent(2, 3)
	ctx := context.Background()
	for i := range 5 {
		r.Trace(ctx, metrics.Trace{Kind: metrics.TraceToolCall, RequestID: "a", CycleIndex: i})
	}
	r.Trace(ctx, metrics.Trace{Kind: metrics.TraceDuplicateToolCall, RequestID: "b", Verdict: "duplicate", Reason: "key sk-abcdefghijkl"})
	r.Trace(ctx, metrics.Trace{Kind: metrics.TraceToolCall}) // no request id: dropped
	a, ok := r.Request("a")
	if !ok || len(a.Events) != 3 || a.Dropped != 2 || a.Events[2].CycleIndex != 2 {
		t.Fatalf("request a: %+v, %v; want its first 3 events and 2 dropped", a, ok)
	}
	b, _ := r.Request("b")
	if len(b.Events) != 1 || b.Events[0].Reason != "key "+metrics.Redacted {
		t.Errorf("request b: %+v; want one event, its key redacted", b)
	}
	r.Trace(ctx, metrics.Trace{Kind: metrics.TraceToolCall, RequestID: "c"})
	if _, ok := r.Request("a"); ok {
		t.Errorf("request a still kept after a third request: want only the last 2")
	}
	for _, id := range []string{"b", "c"} {
		if _, ok := r.Request(id); !ok {
			t.Errorf("request %s not kept", id)
		}
	}
	// Copies: a caller's changes do not reach the ring.
	b.Events[0].Verdict = "changed"
	if again, _ := r.Request("b"); again.Events[0].Verdict != "duplicate" {
		t.Errorf("Request returned the ring's own events")
	}
}

func TestRecentConcurrent(t *testing.T) {
	r := metrics.NewRecent(8, 8)
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 200 {
				r.Trace(context.Background(), metrics.Trace{Kind: metrics.TraceToolCall, RequestID: fmt.Sprint(g, "-", i%10)})
				r.Request(fmt.Sprint(g, "-", i%10))
			}
		}()
	}
	for range 4 {
		<-done
	}
}
