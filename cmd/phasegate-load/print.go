package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// print writes the report.
func (rep *report) print(out io.Writer, cfg config) {
	by, errs := rep.res.counts()
	n := len(rep.res.outcomes)
	fmt.Fprintf(out, "\nrequests through the gateway: %d in %.1fs (%.0f/s); errors: %d\n", n,
		rep.res.elapsed.Seconds(), float64(n)/rep.res.elapsed.Seconds(), errs)
	for _, k := range sortedKeys(by) {
		fmt.Fprintf(out, "  %-14s %d\n", k, by[k])
	}
	rep.res.printErrors(out, 5)
	if rep.direct != nil {
		_, derrs := rep.direct.counts()
		fmt.Fprintf(out, "requests direct to the double: %d; errors: %d\n", len(rep.direct.outcomes), derrs)
		rep.direct.printErrors(out, 5)
	}
	rep.printLatency(out)
	rep.printResources(out, cfg, n)
}

// printErrors prints the first detail of up to max error kinds.
func (r *results) printErrors(out io.Writer, max int) {
	seen := map[kind]bool{}
	for _, o := range r.outcomes {
		if o.kind == kindOK || o.kind == kindDisconnected || o.kind == kindRefused || seen[o.kind] || len(seen) >= max {
			continue
		}
		seen[o.kind] = true
		fmt.Fprintf(out, "  first %s: %.300s\n", o.kind, o.detail)
	}
}

func (rep *report) printLatency(out io.Writer) {
	fmt.Fprintln(out, "latency of streams read in full at full speed, p50 / p99:")
	for _, tool := range []bool{false, true} {
		name := map[bool]string{false: "text answer", true: "tool call  "}[tool]
		total, first := rep.res.latencies(tool)
		line := fmt.Sprintf("  %s (%d)  whole stream %s / %s, first token %s / %s", name, len(total),
			ms(pct(total, 50)), ms(pct(total, 99)), ms(pct(first, 50)), ms(pct(first, 99)))
		if rep.direct != nil {
			dt, df := rep.direct.latencies(tool)
			line += fmt.Sprintf("; direct %s / %s, %s / %s; added %s / %s, %s / %s",
				ms(pct(dt, 50)), ms(pct(dt, 99)), ms(pct(df, 50)), ms(pct(df, 99)),
				ms(pct(total, 50)-pct(dt, 50)), ms(pct(total, 99)-pct(dt, 99)),
				ms(pct(first, 50)-pct(df, 50)), ms(pct(first, 99)-pct(df, 99)))
		}
		fmt.Fprintln(out, line)
	}
	p50, ok50 := rep.end.overhead.quantile(rep.idle.overhead, 0.5)
	p99, ok99 := rep.end.overhead.quantile(rep.idle.overhead, 0.99)
	if ok50 && ok99 {
		fmt.Fprintf(out, "  the gateway's own time per request (phasegate_gateway_overhead_seconds): p50 %.2f ms, p99 %.2f ms\n",
			p50*1000, p99*1000)
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func (rep *report) printResources(out io.Writer, cfg config, n int) {
	peak := rep.idle
	for _, s := range rep.samples {
		peak.rss = max(peak.rss, s.rss)
		peak.goroutines = max(peak.goroutines, s.goroutines)
	}
	if rep.idle.rss > 0 {
		cpu := rep.end.cpu - rep.idle.cpu
		fmt.Fprintf(out, "gateway CPU: %.0f ms for %d requests, %.2f ms per request\n",
			float64(cpu.Milliseconds()), n, float64(cpu.Microseconds())/1000/float64(max(n, 1)))
		fmt.Fprintf(out, "gateway RSS: idle %.1f MiB, peak %.1f MiB under load, %.1f KiB per open stream\n",
			mib(rep.idle.rss), mib(peak.rss), float64(peak.rss-rep.idle.rss)/1024/float64(cfg.concurrency))
		fmt.Fprintf(out, "gateway peak RSS (VmHWM, between samples too): %.1f MiB\n", mib(rep.peakRSS))
	}
	fmt.Fprintf(out, "gateway goroutines: idle %d, peak %d under load (%.1f per open stream)\n",
		rep.idle.goroutines, peak.goroutines, float64(peak.goroutines-rep.idle.goroutines)/float64(cfg.concurrency))
	verdict := "back"
	if !rep.back {
		verdict = "NOT back: " + strings.Join(rep.notBack, "; ")
	}
	a, i := rep.after, rep.idle
	gc := "none since the load"
	if a.lastGC.After(rep.end.at) {
		gc = fmt.Sprintf("%.0fs after the load", a.lastGC.Sub(rep.end.at).Seconds())
	}
	fmt.Fprintf(out, "after the load (%.0fs later; last garbage collection %s):\n", rep.backIn.Seconds(), gc)
	fmt.Fprintf(out, "  goroutines %d (idle %+d), live heap at the last collection %.1f MiB (idle %+.1f)\n",
		a.goroutines, a.goroutines-i.goroutines, mib(a.live()), mib(a.live()-i.live()))
	if i.rss > 0 {
		fmt.Fprintf(out, "  RSS %.1f MiB (idle %+.1f) = heap in use %.1f (idle %+.1f) + free heap the runtime keeps %.1f (idle %+.1f) + outside the Go heap %.1f (idle %+.1f)\n",
			mib(a.rss), mib(a.rss-i.rss), mib(a.heap), mib(a.heap-i.heap), mib(a.heapFree), mib(a.heapFree-i.heapFree),
			mib(a.outside()), mib(a.outside()-i.outside()))
	}
	fmt.Fprintf(out, "  %s\n", verdict)
}

// verdict is nil when the run met its targets.
func (rep *report) verdict(cfg config) error {
	var reasons []string
	if _, errs := rep.res.counts(); errs > cfg.maxErrors {
		reasons = append(reasons, fmt.Sprintf("%d errors, at most %d allowed", errs, cfg.maxErrors))
	}
	if !rep.back {
		reasons = append(reasons, fmt.Sprintf("not back within %s: %s", cfg.settle, strings.Join(rep.notBack, "; ")))
	}
	if cfg.maxRSSMiB > 0 && mib(rep.peakRSS) > cfg.maxRSSMiB {
		reasons = append(reasons, fmt.Sprintf("peak RSS %.1f MiB, over -max-rss %g", mib(rep.peakRSS), cfg.maxRSSMiB))
	}
	if reasons != nil {
		return failedError{reasons}
	}
	return nil
}
