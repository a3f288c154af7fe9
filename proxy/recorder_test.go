package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/store"
)

// brokenLog is a MemoryStreams that refuses every append of an event
// from position from on, as a store that fails for good mid-stream;
// the in-band error the recorder ends with is taken.
type brokenLog struct {
	*store.MemoryStreams
	from int
	mu   sync.Mutex
	// refused counts the refused appends.
	refused int
}

func (l *brokenLog) Append(ctx context.Context, id string, evs []store.Event, end bool) error {
	for _, ev := range evs {
		if ev.N >= l.from && !strings.Contains(string(ev.Data), "resume_incomplete") {
			l.mu.Lock()
			l.refused++
			l.mu.Unlock()
			return errors.New("store unavailable")
		}
	}
	return l.MemoryStreams.Append(ctx, id, evs, end)
}

// A store that fails for good in the middle of a stream: the log keeps
// the events stored before, then ends with an in-band resume_incomplete
// error and its end, so a resume ends instead of waiting for events that
// never come.
func TestRecorderEndsLogWithErrorWhenStoreFails(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemoryStreams(time.Minute)
	log := &brokenLog{MemoryStreams: mem, from: 3}
	h := &Handler{streams: log, metrics: metrics.New(prometheus.NewRegistry(), nil)}
	if err := mem.Start(ctx, "s", ""); err != nil {
		t.Fatal(err)
	}
	rec := startRecorder(h, "s", slog.New(slog.DiscardHandler), chatEnding)
	for i := 1; i <= 2; i++ {
		rec.add([]byte(fmt.Sprintf(`{"n":%d}`, i)), -1, 1<<20)
	}
	time.Sleep(2 * appendLinger) // events 1 and 2 are stored
	start := time.Now()
	deadline := start.Add(storeRetryFor + time.Second)
	for time.Now().Before(deadline) { // the stream goes on while the store fails
		rec.add([]byte(`{"later":true}`), -1, 1<<20)
		time.Sleep(50 * time.Millisecond)
	}
	rec.add([]byte("[DONE]"), -1, 1<<20)
	rec.close()
	if d := time.Since(start); d > 3*storeRetryFor {
		t.Errorf("close took %v with a store that fails, want it bounded", d)
	}
	evs, ended, err := mem.Read(ctx, "s", 0, time.Millisecond)
	if err != nil || !ended {
		t.Fatalf("log after a failing store: ended %v, %v; want ended", ended, err)
	}
	var got []string
	for _, ev := range evs {
		got = append(got, string(ev.Data))
	}
	if len(got) != 3 || got[0] != `{"n":1}` || got[1] != `{"n":2}` || !strings.Contains(got[2], `"code":"resume_incomplete"`) || !strings.Contains(got[2], `"error":`) {
		t.Errorf("log = %q; want the 2 events stored, then a resume_incomplete error, then the end", got)
	}
	if evs[2].N <= rec.n-1 {
		t.Errorf("the error event is at %d, want after every position the stream numbered (%d)", evs[2].N, rec.n-1)
	}
	if log.refused < 2 {
		t.Errorf("the store refused %d appends; want the recorder to send failed events again before it gives up", log.refused)
	}
}

// flakyLog refuses the first append of position fail, once: the store
// hiccups, then answers again.
type flakyLog struct {
	*store.MemoryStreams
	fail   int
	failed bool
}

func (l *flakyLog) Append(ctx context.Context, id string, evs []store.Event, end bool) error {
	for _, ev := range evs {
		if ev.N == l.fail && !l.failed {
			l.failed = true
			return errors.New("store timeout")
		}
	}
	return l.MemoryStreams.Append(ctx, id, evs, end)
}

// One failed append mid-stream loses nothing: the batch is sent again
// with the next one, and the log ends complete.
func TestRecorderSendsFailedBatchAgain(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemoryStreams(time.Minute)
	h := &Handler{streams: &flakyLog{MemoryStreams: mem, fail: 2}, metrics: metrics.New(prometheus.NewRegistry(), nil)}
	if err := mem.Start(ctx, "s", ""); err != nil {
		t.Fatal(err)
	}
	rec := startRecorder(h, "s", slog.New(slog.DiscardHandler), chatEnding)
	for i := 1; i <= 5; i++ {
		rec.add([]byte(fmt.Sprint(i)), -1, 1<<20)
		time.Sleep(2 * appendLinger) // one batch per event
	}
	rec.close()
	evs, ended, err := mem.Read(ctx, "s", 0, time.Millisecond)
	var got []string
	for _, ev := range evs {
		got = append(got, fmt.Sprintf("%d:%s", ev.N, ev.Data))
	}
	if err != nil || !ended || fmt.Sprint(got) != "[1:1 2:2 3:3 4:4 5:5]" {
		t.Errorf("log = %v, ended %v, %v; want [1:1 2:2 3:3 4:4 5:5], ended", got, ended, err)
	}
}
