package gather

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// output records each write it gets, and tells of each on writes.
type output struct {
	mu     sync.Mutex
	writes []string
	wrote  chan struct{}
}

func newOutput() *output { return &output{wrote: make(chan struct{}, 1000)} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	o.writes = append(o.writes, string(p))
	o.mu.Unlock()
	o.wrote <- struct{}{}
	return len(p), nil
}

func (o *output) got() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.writes...)
}

// TestGatheredInOneWrite: the lines written before a flush reach the
// output in one write, in order; nothing is written before it.
func TestGatheredInOneWrite(t *testing.T) {
	out := newOutput()
	w := New(out, time.Hour)
	lines := []string{"trace 1\n", "trace 2\n", "trace 3\n", "trace 4\n", "request served\n"}
	for _, l := range lines {
		if _, err := w.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	if got := out.got(); len(got) != 0 {
		t.Fatalf("written before the flush: %q", got)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, want := out.got(), []string{strings.Join(lines, "")}; !slices.Equal(got, want) {
		t.Errorf("writes = %q, want %q", got, want)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := out.got(); len(got) != 1 {
		t.Errorf("writes after a Close with nothing gathered = %q, want the one before", got)
	}
}

// TestWrittenAfterTheDelay: what is gathered is written without a flush,
// once the delay has passed.
func TestWrittenAfterTheDelay(t *testing.T) {
	out := newOutput()
	w := New(out, time.Millisecond)
	defer w.Close()
	_, _ = w.Write([]byte("a\n"))
	_, _ = w.Write([]byte("b\n"))
	select {
	case <-out.wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("nothing written after the delay")
	}
	if got := strings.Join(out.got(), ""); got != "a\nb\n" {
		t.Errorf("written %q, want both lines in order", got)
	}
}

// TestCloseWritesWhatWaits: lines still waiting when the writer is closed
// are written by Close, and later lines at once.
func TestCloseWritesWhatWaits(t *testing.T) {
	out := newOutput()
	w := New(out, time.Hour)
	_, _ = w.Write([]byte("pending\n"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte("after\n"))
	if got, want := out.got(), []string{"pending\n", "after\n"}; !slices.Equal(got, want) {
		t.Errorf("writes = %q, want %q", got, want)
	}
}

// TestFullWritesAtOnce: a write that fills the bound is written in its
// caller's time, with what waited before it.
func TestFullWritesAtOnce(t *testing.T) {
	out := newOutput()
	w := New(out, time.Hour)
	defer w.Close()
	_, _ = w.Write([]byte("small\n"))
	big := bytes.Repeat([]byte("x"), maxGathered)
	_, _ = w.Write(big)
	if got := out.got(); len(got) != 1 || got[0] != "small\n"+string(big) {
		t.Errorf("writes = %d, want one holding both", len(got))
	}
}

// TestNoDelayWritesThrough: a delay of 0 writes each line at once.
func TestNoDelayWritesThrough(t *testing.T) {
	out := newOutput()
	w := New(out, 0)
	_, _ = w.Write([]byte("a\n"))
	_, _ = w.Write([]byte("b\n"))
	if got, want := out.got(), []string{"a\n", "b\n"}; !slices.Equal(got, want) {
		t.Errorf("writes = %q, want %q", got, want)
	}
}

// TestConcurrentWritersLoseNothing: lines written at once by many
// writers, with timers firing among them, all reach the output whole.
func TestConcurrentWritersLoseNothing(t *testing.T) {
	out := newOutput()
	out.wrote = make(chan struct{}, 1<<16)
	w := New(out, 50*time.Microsecond)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				_, _ = fmt.Fprintf(w, "line %d %d\n", g, i)
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSuffix(strings.Join(out.got(), ""), "\n"), "\n") {
		if seen[l] {
			t.Errorf("line %q twice", l)
		}
		seen[l] = true
	}
	if len(seen) != 8*200 {
		t.Errorf("%d lines written, want %d", len(seen), 8*200)
	}
}
