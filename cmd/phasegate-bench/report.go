package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"time"
)

// report gathers the measurements of every round.
type report struct {
	by map[string][]*measurement // case/target
}

func key(c benchCase, t target) string { return c.name + "/" + t.name }

func (r *report) add(c benchCase, t target, m *measurement) {
	if r.by == nil {
		r.by = map[string][]*measurement{}
	}
	r.by[key(c, t)] = append(r.by[key(c, t)], m)
}

// median of f over the rounds.
func median(ms []*measurement, f func(*measurement) float64) float64 {
	v := make([]float64, 0, len(ms))
	for _, m := range ms {
		v = append(v, f(m))
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func p50(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}

func perRequest(d time.Duration, m *measurement) float64 {
	return float64(d) / float64(time.Millisecond) / float64(max(1, m.requests-m.failed))
}

const mib = 1 << 20

func (r *report) print(out io.Writer, cases []benchCase, st *stack) {
	fmt.Fprintln(out)
	for _, sv := range st.servers {
		fmt.Fprintf(out, "%s RSS: %.1f MiB at start, %.1f MiB idle after the warm-up, %.1f MiB peak\n",
			sv.label(), float64(sv.rssStart)/mib, float64(sv.rssIdle)/mib, float64(sv.rssPeak)/mib)
	}
	var peer string // the first peer's name, whose CPU the last column divides by
	for _, sv := range st.servers {
		if sv.peer && peer == "" {
			peer = sv.name
		}
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| case | route | gateway CPU ms/req | µs/event | ÷ standard | ÷ "+cmp.Or(peer, "peer")+" | mock CPU ms/req | p50 ms | first event p50 ms | first token p50 ms | peak RSS MiB |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, c := range cases {
		cpuOf := func(name string) float64 {
			return median(r.by[c.name+"/"+name], func(m *measurement) float64 { return perRequest(m.gatewayCPU, m) })
		}
		for _, t := range st.targets(c) {
			r.printRow(out, c, t, cpuOf(t.name), cpuOf(t.std), cpuOf(peer), peer != "")
		}
	}
	for k, ms := range r.by {
		for _, m := range ms {
			if m.failed > 0 {
				fmt.Fprintf(out, "%s: %d of %d failed, first: %.300s\n", k, m.failed, m.requests, m.firstFail)
			}
		}
	}
}

// printRow prints the row of case c on target t, whose CPU per request
// is cpu, beside its gateway's /standard (std) and the first peer's.
func (r *report) printRow(out io.Writer, c benchCase, t target, cpu, std, peer float64, peered bool) {
	ms := r.by[key(c, t)]
	perEvent, ratio, overPeer := "", "", ""
	if c.stream && !t.direct {
		perEvent = fmt.Sprintf("%.2f", median(ms, func(m *measurement) float64 {
			return float64(m.gatewayCPU) / float64(time.Microsecond) / float64(max(1, m.events))
		}))
	}
	if t.std != "" && std > 0 {
		ratio = fmt.Sprintf("%.2f", cpu/std)
	}
	if peered && !t.direct && peer > 0 {
		overPeer = fmt.Sprintf("%.2f", cpu/peer)
	}
	gw := fmt.Sprintf("%.3f", cpu)
	if t.direct {
		gw = "—"
	}
	fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s | %.3f | %.2f | %.2f | %.2f | %.1f |\n", c.name, t.name, gw, perEvent, ratio, overPeer,
		median(ms, func(m *measurement) float64 { return perRequest(m.mockCPU, m) }),
		median(ms, func(m *measurement) float64 { return p50(m.latency) }),
		median(ms, func(m *measurement) float64 { return p50(m.firstEvent) }),
		median(ms, func(m *measurement) float64 { return p50(m.firstToken) }),
		median(ms, func(m *measurement) float64 { return float64(m.peakRSS) / mib }))
}

func (r *report) verdict() error {
	for _, ms := range r.by {
		for _, m := range ms {
			if m.failed > 0 {
				return errFailed
			}
		}
	}
	return nil
}
