package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// report is what a run measured through the gateway.
type report struct {
	idle, end, after sample
	samples          []sample // during the load, every cfg.sample
	back             bool     // goroutines and RSS came back within cfg.settle
	backIn           time.Duration
	res, direct      *results
}

// measure runs the load through the gateway, sampling it, then waits for it
// to settle.
func measure(ctx context.Context, cfg config, st *stack, out io.Writer) (*report, error) {
	client := newClient(2)
	defer client.CloseIdleConnections()
	rep := &report{}
	var err error
	if rep.idle, err = take(ctx, client, st.gatewayURL, st.pid); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "idle gateway: RSS %.1f MiB, heap in use %.1f MiB, %d goroutines\n",
		mib(rep.idle.rss), mib(rep.idle.heap), rep.idle.goroutines)
	fmt.Fprintf(out, "through the gateway: %d streams for %s (at most %d requests)\n", cfg.concurrency, cfg.duration, cfg.maxRequests)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { rep.samples = sampleEvery(ctx, cfg.sample, stop, client, st, out) })
	rep.res = drive(ctx, cfg, st.gatewayURL)
	close(stop)
	wg.Wait()
	if rep.end, err = take(ctx, client, st.gatewayURL, st.pid); err != nil {
		return nil, err
	}
	rep.settle(ctx, cfg, client, st)
	return rep, nil
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

// settle waits, up to cfg.settle, for goroutines and RSS to come back near
// their idle figures.
func (rep *report) settle(ctx context.Context, cfg config, client *http.Client, st *stack) {
	start := time.Now()
	for {
		s, err := take(ctx, client, st.gatewayURL, st.pid)
		if err == nil {
			rep.after = s
			rep.backIn = time.Since(start)
			rep.back = s.goroutines <= rep.idle.goroutines+cfg.goroutineSlack &&
				mib(s.rss-rep.idle.rss) <= cfg.rssSlackMiB
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

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// counts returns the outcomes by kind, and how many are errors.
func (r *results) counts() (map[string]int, int) {
	by := map[string]int{}
	errs := 0
	for _, o := range r.outcomes {
		by[string(o.kind)]++
		if o.kind != kindOK && o.kind != kindDisconnected {
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
