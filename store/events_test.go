package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// eventLogs are the two event logs, which keep one contract.
func eventLogs(t *testing.T) map[string]eventLog {
	r, _ := openTestRedis(t)
	return map[string]eventLog{"memory": NewMemoryStreams(time.Minute), "redis": NewRedisStreams(r, time.Minute)}
}

// TestEventLogContract holds the memory and the Redis logs to the same
// answers: positions that skip numbers, a reader that waits through
// changes that bring no event, and a cancel that comes after the end.
func TestEventLogContract(t *testing.T) {
	for name, log := range eventLogs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			if err := log.Start(ctx, "gap", ""); err != nil {
				t.Fatal(err)
			}
			// Positions 3 and 4 were never stored (the recorder gave up on
			// them, or a batch was lost): a read after either returns 5.
			if err := log.Append(ctx, "gap", []Event{{N: 1, Data: []byte("a")}, {N: 2, Data: []byte("b")}, {N: 5, Data: []byte("e")}}, false); err != nil {
				t.Fatal(err)
			}
			for _, after := range []int{2, 3, 4} {
				got, ended, err := log.Read(ctx, "gap", after, time.Millisecond)
				if err != nil || ended || fmt.Sprint(eventData(got)) != "[5:e]" {
					t.Errorf("Read after %d = %v, ended %v, %v; want [5:e], not ended", after, eventData(got), ended, err)
				}
			}
			if got, ended, err := log.Read(ctx, "gap", 5, time.Millisecond); err != nil || ended || len(got) != 0 {
				t.Errorf("Read after the last = %v, ended %v, %v; want nothing yet", eventData(got), ended, err)
			}

			// A reader waits through changes that bring it no event (a
			// batch that keeps the stream alive) and returns the next event.
			type result struct {
				evs   []Event
				ended bool
				err   error
			}
			woke := make(chan result, 1)
			go func() {
				evs, ended, err := log.Read(ctx, "gap", 5, wait)
				woke <- result{evs, ended, err}
			}()
			for range 100 {
				if err := log.Append(ctx, "gap", nil, false); err != nil {
					t.Fatal(err)
				}
				select {
				case res := <-woke:
					t.Fatalf("a waiting reader returned %v, ended %v, %v before any event came", eventData(res.evs), res.ended, res.err)
				case <-time.After(time.Millisecond):
				}
			}
			if err := log.Append(ctx, "gap", []Event{{N: 7, Data: []byte("[DONE]")}}, true); err != nil {
				t.Fatal(err)
			}
			if res := <-woke; res.err != nil || fmt.Sprint(eventData(res.evs)) != "[7:[DONE]]" {
				t.Errorf("waiting reader got %v, %v; want [7:[DONE]]", eventData(res.evs), res.err)
			}
			if got, ended, err := log.Read(ctx, "gap", 7, time.Millisecond); err != nil || !ended || len(got) != 0 {
				t.Errorf("Read after the end = %v, ended %v, %v; want nothing, ended", eventData(got), ended, err)
			}

			// A cancel after the end changes nothing: the replay stays whole.
			if err := log.Cancel(ctx, "gap"); err != nil {
				t.Fatal(err)
			}
			if info, err := log.Info(ctx, "gap"); err != nil || info.Cancelled || !info.Ended {
				t.Errorf("Info after a cancel of an ended stream = %+v, %v; want ended, not cancelled", info, err)
			}
			if err := log.Start(ctx, "live", ""); err != nil {
				t.Fatal(err)
			}
			if err := log.Cancel(ctx, "live"); err != nil {
				t.Fatal(err)
			}
			if info, err := log.Info(ctx, "live"); err != nil || !info.Cancelled {
				t.Errorf("Info after a cancel of a running stream = %+v, %v; want cancelled", info, err)
			}
			if err := log.Cancel(ctx, "nope"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Cancel(unknown) = %v, want ErrNotFound", err)
			}
		})
	}
}

// The events of all streams in memory stay under the bound: streams that
// ended are forgotten first, earliest first; a running stream past it is
// refused more events, and may still store the event that ends it.
func TestMemoryStreamsBound(t *testing.T) {
	ctx := testContext(t)
	m := NewBoundedMemoryStreams(time.Minute, 100)
	chunk := []byte(strings.Repeat("x", 60))
	for _, id := range []string{"a", "b"} {
		if err := m.Start(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Append(ctx, "a", []Event{{N: 1, Data: chunk}}, true); err != nil {
		t.Fatal(err)
	}
	// b needs a's room: a ended, so it goes.
	if err := m.Append(ctx, "b", []Event{{N: 1, Data: chunk}}, false); err != nil {
		t.Fatalf("append past the bound with an ended stream to forget: %v", err)
	}
	if _, err := m.Info(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Info(a) = %v; want a forgotten to make room", err)
	}
	if got := m.heldBytes(); got != 60 {
		t.Errorf("bytes held = %d, want 60", got)
	}
	// b runs: nothing can be forgotten, so more is refused.
	if err := m.Append(ctx, "b", []Event{{N: 2, Data: chunk}}, false); !errors.Is(err, ErrFull) {
		t.Fatalf("append past the bound with nothing to forget = %v, want ErrFull", err)
	}
	end := []byte(`{"error":{"code":"resume_store_full"}}`)
	if err := m.Append(ctx, "b", []Event{{N: 3, Data: end}}, true); err != nil {
		t.Fatalf("the ending event past the bound: %v", err)
	}
	got, ended, err := m.Read(ctx, "b", 0, time.Millisecond)
	if err != nil || !ended || fmt.Sprint(eventData(got)) != fmt.Sprint([]string{"1:" + string(chunk), "3:" + string(end)}) {
		t.Errorf("Read(b) = %v, ended %v, %v; want the first chunk and the ending error, ended", eventData(got), ended, err)
	}
	if got, want := m.heldBytes(), int64(60+len(end)); got != want {
		t.Errorf("bytes held = %d, want %d", got, want)
	}
	// A new stream takes b's place, b having ended.
	if err := m.Start(ctx, "c", ""); err != nil {
		t.Fatal(err)
	}
	if err := m.Append(ctx, "c", []Event{{N: 1, Data: chunk}}, false); err != nil {
		t.Fatalf("append with an ended stream to forget: %v", err)
	}
	if err := m.Start(ctx, "d", ""); err != nil {
		t.Fatal(err)
	}
	if err := m.Append(ctx, "d", []Event{{N: 1, Data: chunk}}, false); !errors.Is(err, ErrFull) {
		t.Errorf("append past the bound, every stream running = %v, want ErrFull", err)
	}
}

// heldBytes is the bytes of events held, for tests.
func (m *MemoryStreams) heldBytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes
}
