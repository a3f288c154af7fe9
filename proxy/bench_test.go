package proxy_test

// Benchmarks of the gateway on loopback against the upstream double:
//
//	go test ./proxy -run '^$' -bench '^Benchmark(NonStreamingAddedLatency|Stream)$' -benchtime 2000x -count 3
//	go test ./proxy -run '^$' -bench '^BenchmarkOpenStreamMemory$' -benchtime 5x -count 3
//	go test ./proxy -run '^$' -bench '^BenchmarkStream$/gateway' -benchtime 3000x -cpuprofile cpu.out && go tool pprof -top proxy.test cpu.out
//
// Each measures the same work direct to the double and through the
// gateway, so the figures the gateway adds can be told apart from those of
// the double and the client, which run in the same process.

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// benchPair is a double and a gateway in front of it, and a client with
// keep-alive connections to both.
type benchPair struct {
	up      *proxytest.Upstream
	direct  string // the double's chat completions URL
	gateway string // the gateway's
	client  *http.Client
}

func newBenchPair(b *testing.B, respond proxytest.Responder) *benchPair {
	b.Helper()
	up, usrv := proxytest.NewServer(b, respond)
	gw := newGateway(b, config(usrv))
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 1024
	b.Cleanup(tr.CloseIdleConnections)
	return &benchPair{up: up, direct: usrv.URL + "/v1/chat/completions", gateway: gw.URL + "/v1/chat/completions", client: &http.Client{Transport: tr}}
}

// roundTrip posts body to url and reads the whole answer.
func (p *benchPair) roundTrip(b *testing.B, url, body string) {
	resp, err := p.client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
}

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkNonStreamingAddedLatency times a non-streaming request direct to
// the double and through the gateway, interleaved so both see the same
// machine, and reports the median of each and what the gateway adds.
func BenchmarkNonStreamingAddedLatency(b *testing.B) {
	reply := sim.Completion(testModel, map[string]any{"content": "Hello! How can I help you today?", "reasoning_content": "Greet back."}, "stop",
		map[string]any{"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21, "prompt_cache_hit_tokens": 8})
	p := newBenchPair(b, func(proxytest.Received) sim.Reply { return reply })
	body := `{"model":"` + testModel + `","messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Hi there"}],"temperature":0}`
	p.roundTrip(b, p.direct, body) // warm the connections
	p.roundTrip(b, p.gateway, body)
	direct := make([]time.Duration, 0, b.N)
	through := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		p.roundTrip(b, p.direct, body)
		t1 := time.Now()
		p.roundTrip(b, p.gateway, body)
		t2 := time.Now()
		direct = append(direct, t1.Sub(t0))
		through = append(through, t2.Sub(t1))
	}
	b.StopTimer()
	d, g := p50(direct), p50(through)
	b.ReportMetric(float64(d.Nanoseconds())/1e3, "direct-p50-µs")
	b.ReportMetric(float64(g.Nanoseconds())/1e3, "gateway-p50-µs")
	b.ReportMetric(float64((g-d).Nanoseconds())/1e3, "added-p50-µs")
}

// benchInterleaved posts bodies[i] to urls[i] for each of names in turn,
// request by request, each first in turn, so that all see the same
// machine (a shared one's load included), and reports the CPU time of the
// whole process per request of each (NAME-cpu-µs/req) and each one's
// ratio to the first (NAME/FIRST).
func benchInterleaved(b *testing.B, names, urls, bodies []string) {
	pairs := make([]*benchPair, len(names))
	for i := range names {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		b.Cleanup(tr.CloseIdleConnections)
		pairs[i] = &benchPair{client: &http.Client{Transport: tr}}
		pairs[i].roundTrip(b, urls[i], bodies[i])
	}
	cpu := make([]time.Duration, len(names))
	b.ReportAllocs()
	b.ResetTimer()
	for n := range b.N {
		for k := range names {
			i := (n + k) % len(names)
			t0 := cpuTime(b)
			pairs[i].roundTrip(b, urls[i], bodies[i])
			cpu[i] += cpuTime(b) - t0
		}
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(b.N) }
	for i, name := range names {
		b.ReportMetric(per(cpu[i]), name+"-cpu-µs/req")
		if i > 0 {
			b.ReportMetric(per(cpu[i])/per(cpu[0]), name+"/"+names[0])
		}
	}
}

// cpuTime is the user and system CPU time of the process so far.
func cpuTime(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

const benchChunks = 200

// benchText adds n text chunks to s in which no phrase repeats: a text
// that does is degenerate, and the guard cuts it and asks again.
func benchText(s *sim.Stream, n int) *sim.Stream {
	for i := range n {
		s.Content("token" + strconv.Itoa(i) + strings.Repeat("x", i%7) + " ")
	}
	return s
}

// throughGuard fails b when body posted to url is not served by the
// guard (X-Phasegate-Protocol): a /v1 request without a tool is passed
// through, and a benchmark of the guard would measure the pass-through.
func throughGuard(b *testing.B, url, body string) {
	b.Helper()
	resp := proxytest.Do(b, proxytest.Context(b), http.DefaultClient, http.MethodPost, url, body)
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		b.Fatal(err)
	}
	if got := resp.Header.Get("X-Phasegate-Protocol"); got != proxy.ProtocolTwoStage {
		b.Fatalf("served by %q, not the guard", got)
	}
}

// oneCallEach fails b when up was not asked exactly once for each of the
// requests sent: the guard then refused a call or cut the answer and
// asked again, and the figures would measure that, not the answer.
func oneCallEach(b *testing.B, up *proxytest.Upstream, requests int) {
	b.Helper()
	if got := len(up.Received()); got != requests {
		b.Fatalf("the upstream was asked %d times for %d requests: the guard asked again, so this does not measure the answer", got, requests)
	}
}

// benchCPU posts body to url once, then b.N times timed, through a client
// of its own, and reports the CPU time of the whole process per request
// as cpu-µs/req, which it returns.
func benchCPU(b *testing.B, url, body string) float64 {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	b.Cleanup(tr.CloseIdleConnections)
	p := &benchPair{client: &http.Client{Transport: tr}}
	p.roundTrip(b, url, body)
	cpu0 := cpuTime(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		p.roundTrip(b, url, body)
	}
	b.StopTimer()
	perReq := float64((cpuTime(b) - cpu0).Nanoseconds()) / 1e3 / float64(b.N)
	b.ReportMetric(perReq, "cpu-µs/req")
	return perReq
}

// BenchmarkStream forwards a 200-chunk stream (a role chunk, 198 content
// chunks, a finish chunk, then [DONE]) and reports CPU time per request
// and per chunk, and allocations per chunk, of the whole process (client,
// double and, through the gateway, the gateway), direct and through the
// gateway: the difference is the gateway's.
func BenchmarkStream(b *testing.B) {
	s := sim.NewStream(testModel).Role()
	for i := range benchChunks - 2 {
		s.Content("token" + strings.Repeat("x", i%7) + " ")
	}
	reply := s.Finish("stop").Done().Reply()
	body := `{"model":"` + testModel + `","stream":true,"messages":[{"role":"user","content":"Write a poem."}]}`
	for _, route := range []string{"direct", "gateway"} {
		b.Run(route, func(b *testing.B) {
			p := newBenchPair(b, func(proxytest.Received) sim.Reply { return reply })
			url := p.direct
			if route == "gateway" {
				url = p.gateway
			}
			p.roundTrip(b, url, body)
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			cpu0 := cpuTime(b)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				p.roundTrip(b, url, body)
			}
			b.StopTimer()
			cpu := cpuTime(b) - cpu0
			runtime.ReadMemStats(&ms1)
			perReq := float64(cpu.Nanoseconds()) / 1e3 / float64(b.N)
			b.ReportMetric(perReq, "cpu-µs/req")
			b.ReportMetric(perReq/benchChunks, "cpu-µs/chunk")
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(b.N)/benchChunks, "allocs/chunk")
		})
	}
}

// BenchmarkOpenStreamMemory opens 200 streams held open by the double and
// reports the heap, goroutine stacks and goroutines each open stream costs
// the process (client and double included),
// direct and through the gateway: the difference is the gateway's.
func BenchmarkOpenStreamMemory(b *testing.B) {
	const streams = 200
	reply := sim.Reply{Events: sim.NewStream(testModel).Role().Content("Once").Events(), Hang: true}
	body := `{"model":"` + testModel + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for _, route := range []string{"direct", "gateway"} {
		b.Run(route, func(b *testing.B) {
			p := newBenchPair(b, func(proxytest.Received) sim.Reply { return reply })
			url := p.direct
			if route == "gateway" {
				url = p.gateway
			}
			var heap, stack, goroutines float64
			for range b.N {
				ctx, cancel := context.WithCancel(context.Background())
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				g0 := runtime.NumGoroutine()
				bodies := make([]io.Closer, 0, streams)
				for range streams {
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
					resp, err := p.client.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					// The first event has crossed every hop: the stream is open.
					if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
						b.Fatal(err)
					}
					bodies = append(bodies, resp.Body)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				heap += float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / streams
				stack += float64(int64(after.StackInuse)-int64(before.StackInuse)) / streams
				goroutines += float64(runtime.NumGoroutine()-g0) / streams
				cancel()
				for _, c := range bodies {
					c.Close()
				}
				for range streams {
					select {
					case <-p.up.Cancelled():
					case <-time.After(wait):
						b.Fatal("a held stream was never released")
					}
				}
			}
			b.ReportMetric(heap/float64(b.N), "heap-B/stream")
			b.ReportMetric(stack/float64(b.N), "stack-B/stream")
			b.ReportMetric(goroutines/float64(b.N), "goroutines/stream")
		})
	}
}
