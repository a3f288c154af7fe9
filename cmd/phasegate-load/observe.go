package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/phasegate/phasegate/internal/proc"
)

// logTail counts what the gateway logs by level and
// message, until its stderr closes.
type logTail struct {
	mu    sync.Mutex
	byMsg map[string]int
	last  string
	done  chan struct{}
}

func newLogTail(r *bufio.Reader) *logTail {
	t := &logTail{byMsg: map[string]int{}, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		for {
			line, err := r.ReadString('\n')
			if line != "" {
				t.add(line)
			}
			if err != nil {
				return
			}
		}
	}()
	return t
}

func (t *logTail) add(line string) {
	var rec struct{ Level, Msg string }
	_ = json.Unmarshal([]byte(line), &rec)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byMsg[rec.Level+" "+rec.Msg]++
	t.last = strings.TrimSpace(line)
}

// print waits up to 5 s for the log to end, then prints the counts.
func (t *logTail) print(out io.Writer) {
	select {
	case <-t.done:
	case <-time.After(5 * time.Second):
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(out, "gateway log: %d kinds of line\n", len(t.byMsg))
	for _, k := range sortedKeys(t.byMsg) {
		fmt.Fprintf(out, "  %6d  %s\n", t.byMsg[k], k)
	}
	if t.last != "" {
		fmt.Fprintf(out, "  last: %.400s\n", t.last)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// sample is the gateway's state at one moment.
type sample struct {
	at         time.Time
	cpu        time.Duration // user plus system time since it started
	rss        int64         // bytes
	goroutines int
	inFlight   int
	heap       int64     // go_memstats_heap_inuse_bytes: what the Go heap holds
	heapFree   int64     // go_memstats_heap_idle_bytes minus heap_released_bytes: free heap the runtime keeps resident
	heapGoal   int64     // go_memstats_next_gc_bytes: the heap size that triggers the next collection
	gogc       float64   // go_gc_gogc_percent
	lastGC     time.Time // go_memstats_last_gc_time_seconds
	overhead   histogram // phasegate_gateway_overhead_seconds, all labels summed
}

// take reads the gateway's /proc entries (when pid is known) and /metrics.
func take(ctx context.Context, client *http.Client, gatewayURL string, pid int) (sample, error) {
	s := sample{at: time.Now()}
	if pid > 0 {
		if err := s.readProc(pid); err != nil {
			return s, err
		}
	}
	return s, s.readMetrics(ctx, client, gatewayURL)
}

func (s *sample) readProc(pid int) (err error) {
	s.cpu, s.rss, err = proc.Stat(pid)
	return err
}

func (s *sample) readMetrics(ctx context.Context, client *http.Client, gatewayURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, gatewayURL+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	s.overhead = histogram{}
	var idle, released float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, labels, v, ok := metricLine(sc.Text())
		switch {
		case !ok:
		case name == "go_goroutines":
			s.goroutines = int(v)
		case name == "go_memstats_heap_inuse_bytes":
			s.heap = int64(v)
		case name == "go_memstats_heap_idle_bytes":
			idle = v
		case name == "go_memstats_heap_released_bytes":
			released = v
		case name == "go_memstats_next_gc_bytes":
			s.heapGoal = int64(v)
		case name == "go_gc_gogc_percent":
			s.gogc = v
		case name == "go_memstats_last_gc_time_seconds":
			s.lastGC = time.Unix(0, int64(v*1e9))
		case name == "phasegate_requests_in_flight":
			s.inFlight += int(v)
		case name == "phasegate_gateway_overhead_seconds_bucket":
			s.overhead.add(labels, v)
		}
	}
	s.heapFree = int64(idle - released)
	return sc.Err()
}

// live is the live heap the last garbage collection found, stacks and
// globals included: the runtime sets its heap goal to it times 1+GOGC/100.
// Unlike the heap in use, it holds no garbage made since that collection.
func (s sample) live() int64 {
	if s.gogc <= 0 {
		return s.heap // GOGC=off: no goal to read it from
	}
	return int64(float64(s.heapGoal) / (1 + s.gogc/100))
}

// outside is the RSS outside the Go heap (goroutine stacks, the runtime's
// own structures, the binary, anything mapped by other means): the RSS
// less the heap in use and the free heap the runtime keeps resident.
func (s sample) outside() int64 { return s.rss - s.heap - s.heapFree }

// metricLine splits a Prometheus text line into name, labels and value.
func metricLine(line string) (name, labels string, v float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", "", 0, false
	}
	sp := strings.LastIndexByte(line, ' ')
	if sp < 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(line[sp+1:], 64)
	name = line[:sp]
	if i := strings.IndexByte(name, '{'); i >= 0 {
		name, labels = name[:i], name[i:]
	}
	return name, labels, v, err == nil
}

// histogram is cumulative bucket counts by upper bound.
type histogram map[float64]float64

func (h histogram) add(labels string, v float64) {
	i := strings.Index(labels, `le="`)
	if i < 0 {
		return
	}
	le := labels[i+4:]
	le = le[:strings.IndexByte(le, '"')]
	bound, err := strconv.ParseFloat(le, 64)
	if err == nil {
		h[bound] += v
	}
}

// quantile is the q-quantile of the observations between before and h,
// interpolated within its bucket as Prometheus's histogram_quantile does.
func (h histogram) quantile(before histogram, q float64) (float64, bool) {
	bounds := make([]float64, 0, len(h))
	for b := range h {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return 0, false
	}
	total := h[math.Inf(1)] - before[math.Inf(1)]
	if total <= 0 {
		return 0, false
	}
	rank, lower, prev := q*total, 0.0, 0.0
	for _, b := range bounds {
		n := h[b] - before[b]
		if n >= rank {
			if math.IsInf(b, 1) {
				return lower, true
			}
			return lower + (b-lower)*(rank-prev)/math.Max(n-prev, 1e-9), true
		}
		lower, prev = b, n
	}
	return lower, true
}
