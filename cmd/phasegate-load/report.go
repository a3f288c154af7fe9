package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/phasegate/phasegate/internal/proc"
)

// report is what a run measured through the gateway.
type report struct {
	idle, end, after sample
	samples          []sample // during the load, every cfg.sample
	back             bool     // goroutines, live heap and RSS outside the heap came back within cfg.settle
	notBack          []string // what was not, at the last sample
	backIn           time.Duration
	res, direct      *results
	// peakRSS is the gateway's RSS high-water mark (VmHWM) after the
	// load; 0 when unknown.
	peakRSS int64
}

// measure runs the load through the gateway, sampling it, then waits for it
// to settle.
func measure(ctx context.Context, cfg config, st *stack, out io.Writer) (*report, error) {
	client := proc.LoopbackClient(2)
	defer client.CloseIdleConnections()
	rep := &report{}
	var err error
	if rep.idle, err = idleAfterGC(ctx, cfg, client, st, out); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "idle gateway: RSS %.1f MiB (free heap kept %.1f MiB), heap in use %.1f MiB, live heap %.1f MiB, %d goroutines\n",
		mib(rep.idle.rss), mib(rep.idle.heapFree), mib(rep.idle.heap), mib(rep.idle.live()), rep.idle.goroutines)
	fmt.Fprintf(out, "through the gateway: %d streams for %s (at most %d requests)\n", cfg.concurrency, cfg.duration, cfg.maxRequests)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { rep.samples = sampleEvery(ctx, cfg.sample, stop, client, st, out) })
	rep.res = drive(ctx, cfg, st.gatewayURL)
	close(stop)
	wg.Wait()
	if st.pid > 0 {
		rep.peakRSS = proc.Status(st.pid, "VmHWM")
	}
	if rep.end, err = take(ctx, client, st.gatewayURL, st.pid); err != nil {
		return nil, err
	}
	rep.settle(ctx, cfg, client, st, out)
	return rep, nil
}

// idleAfterGC returns a sample of the idle gateway taken once a garbage
// collection ran after the warm-up, waiting up to cfg.settle for one (the
// runtime collects at least every 2 min). The live heap is read from the
// last collection, and one that ran while the gateway was still loading its
// tokenizers sees less than it keeps for good: a baseline taken then would
// count startup as growth under load.
func idleAfterGC(ctx context.Context, cfg config, client *http.Client, st *stack, out io.Writer) (sample, error) {
	since := time.Now()
	for said := false; ; {
		s, err := take(ctx, client, st.gatewayURL, st.pid)
		if err != nil || s.lastGC.After(since) || time.Since(since) >= cfg.settle || ctx.Err() != nil {
			if err == nil && !s.lastGC.After(since) {
				fmt.Fprintf(out, "no garbage collection within %s: the idle live heap is from an earlier one\n", cfg.settle)
			}
			return s, err
		}
		if !said {
			fmt.Fprintln(out, "waiting for a garbage collection of the idle gateway, for its live heap")
			said = true
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
}

// sampleEvery takes and prints a sample every d until stop closes.
func sampleEvery(ctx context.Context, d time.Duration, stop <-chan struct{}, client *http.Client, st *stack, out io.Writer) []sample {
	t := time.NewTicker(d)
	defer t.Stop()
	var all []sample
	start := time.Now()
	for {
		select {
		case <-stop:
			return all
		case <-ctx.Done():
			return all
		case <-t.C:
		}
		s, err := take(ctx, client, st.gatewayURL, st.pid)
		if err != nil {
			fmt.Fprintf(out, "  sample: %v\n", err)
			continue
		}
		all = append(all, s)
		fmt.Fprintf(out, "  t=%4.0fs  RSS %6.1f MiB  heap in use %6.1f MiB  goroutines %5d  in flight %4d\n",
			time.Since(start).Seconds(), mib(s.rss), mib(s.heap), s.goroutines, s.inFlight)
	}
}

// settle waits, up to cfg.settle, for the gateway to be back near its idle
// figures: goroutines, the live heap once a collection ran after the load
// (before one, the last collection saw the load's streams), and the RSS
// outside the Go heap. The heap in use holds garbage until the next
// collection, and the runtime keeps freed heap resident for reuse, returning
// it to the system only down to about its heap goal, so the plain RSS is
// reported, not judged.
func (rep *report) settle(ctx context.Context, cfg config, client *http.Client, st *stack, out io.Writer) {
	start := time.Now()
	lastGC := rep.end.lastGC
	for {
		s, err := take(ctx, client, st.gatewayURL, st.pid)
		if err == nil && s.lastGC.After(lastGC) {
			lastGC = s.lastGC
			fmt.Fprintf(out, "  garbage collection %3.0fs after the load: live heap %.1f MiB (idle %+.1f), RSS %.1f MiB (idle %+.1f), free heap kept %.1f MiB, goroutines %d\n",
				s.lastGC.Sub(rep.end.at).Seconds(), mib(s.live()), mib(s.live()-rep.idle.live()),
				mib(s.rss), mib(s.rss-rep.idle.rss), mib(s.heapFree), s.goroutines)
		}
		if err == nil {
			rep.after = s
			rep.backIn = time.Since(start)
			rep.notBack = rep.judge(cfg, s)
			rep.back = len(rep.notBack) == 0
		}
		if rep.back || time.Since(start) >= cfg.settle || ctx.Err() != nil {
			return
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
}

// judge returns what in s is not back near the idle figures.
func (rep *report) judge(cfg config, s sample) []string {
	var not []string
	if s.goroutines > rep.idle.goroutines+cfg.goroutineSlack {
		not = append(not, fmt.Sprintf("goroutines %+d over idle (slack %d)", s.goroutines-rep.idle.goroutines, cfg.goroutineSlack))
	}
	if !s.lastGC.After(rep.end.at) {
		not = append(not, "no garbage collection since the load ended")
	} else if d := mib(s.live() - rep.idle.live()); d > cfg.heapSlackMiB {
		not = append(not, fmt.Sprintf("live heap %+.1f MiB over idle (slack %g)", d, cfg.heapSlackMiB))
	}
	if d := mib(s.outside() - rep.idle.outside()); rep.idle.rss > 0 && d > cfg.rssSlackMiB {
		not = append(not, fmt.Sprintf("RSS outside the Go heap %+.1f MiB over idle (slack %g)", d, cfg.rssSlackMiB))
	}
	return not
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// counts returns the outcomes by kind, and how many are errors.
func (r *results) counts() (map[string]int, int) {
	by := map[string]int{}
	errs := 0
	for _, o := range r.outcomes {
		by[string(o.kind)]++
		if o.kind != kindOK && o.kind != kindDisconnected && o.kind != kindRefused {
			errs++
		}
	}
	return by, errs
}

// latencies returns the total and first-event times of the requests read in
// full at full speed with the given answer.
func (r *results) latencies(tool bool) (total, first []time.Duration) {
	for _, o := range r.outcomes {
		if o.kind == kindOK && o.cutAfter == 0 && o.slowDelay == 0 && o.tool == tool {
			total = append(total, o.total)
			first = append(first, o.first)
		}
	}
	slices.Sort(total)
	slices.Sort(first)
	return total, first
}

// pct is the p-th percentile of sorted ds, 0 when empty.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, int(p/100*float64(len(ds))))]
}
