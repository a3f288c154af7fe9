package proxy

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/phasegate/phasegate/store"
)

// lateLog is a MemoryStreams whose first read that finds nothing (a wait
// that timed out) is followed at once by the stream's last batch and its
// end: a follower on one replica and the recorder on another, interleaved.
type lateLog struct {
	*store.MemoryStreams
	landed bool
}

func (l *lateLog) Read(ctx context.Context, id string, after int, wait time.Duration) ([]store.Event, bool, error) {
	evs, ended, err := l.MemoryStreams.Read(ctx, id, after, time.Millisecond)
	if !l.landed && len(evs) == 0 {
		l.landed = true
		_ = l.MemoryStreams.Append(ctx, id, []store.Event{{N: after + 1, Data: []byte("data: {\"last\":true}\n\n")}, {N: after + 2, Data: []byte("data: [DONE]\n\n")}}, true)
	}
	return evs, ended, err
}

// A follower that finds the stream ended after an empty read still writes
// the last events stored between the two: nothing is lost at the end.
func TestFollowWritesEventsStoredBeforeTheEnd(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemoryStreams(time.Minute)
	_ = mem.Start(ctx, "x", "")
	_ = mem.Append(ctx, "x", []store.Event{{N: 1, Data: []byte("data: {\"first\":true}\n\n")}}, false)
	h := &Handler{streams: &lateLog{MemoryStreams: mem}}
	rec := httptest.NewRecorder()
	sw := newSSEWriter(rec)
	sw.start(nil)
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := h.follow(fctx, sw, "x", 1, true, time.Time{}); err != nil || fctx.Err() != nil {
		t.Fatalf("follow = %v (%v); want it to return once the stream ended", err, fctx.Err())
	}
	_ = sw.flush()
	want := "id: 2\ndata: {\"last\":true}\n\nid: 3\ndata: [DONE]\n\n"
	if body := rec.Body.String(); body != want {
		t.Errorf("follow after 1 wrote %q, want the last event and [DONE]: %q", body, want)
	}
}
