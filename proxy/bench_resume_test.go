package proxy_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phasegate/phasegate/internal/redistest"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// BenchmarkResumableStream forwards the 200-chunk stream of
// BenchmarkStream through one gateway whose streams are kept on a real
// redis-server on loopback, plain and resumable (X-Phasegate-Resumable),
// in alternating blocks so both see the same machine. It reports the
// process's CPU time per event of each (client, double and gateway), what
// a resumable stream adds per event, and Redis's own CPU per event.
// "burst" sends the chunks back to back, so the gateway appends them to
// Redis in batches; "paced" has the double wait before each chunk (200
// µs asked, about 2.5 ms with its timers), as a model streams, so each
// append carries what came within the recorder's linger. Idle time is in
// the paced figures too, which makes them noisier:
//
//	go test ./proxy -run '^$' -bench '^BenchmarkResumableStream$/burst' -benchtime 2000x -count 3
//	go test ./proxy -run '^$' -bench '^BenchmarkResumableStream$/paced' -benchtime 200x -count 3
func BenchmarkResumableStream(b *testing.B) {
	for _, pace := range []struct {
		name  string
		delay time.Duration
	}{{"burst", 0}, {"paced", 200 * time.Microsecond}} {
		b.Run(pace.name, func(b *testing.B) { benchResumable(b, pace.delay) })
	}
}

func benchResumable(b *testing.B, delay time.Duration) {
	s := sim.NewStream(testModel).Role()
	for i := range benchChunks - 2 {
		if delay > 0 {
			s.Delay(delay)
		}
		s.Content("token" + strings.Repeat("x", i%7) + " ")
	}
	reply := s.Finish("stop").Done().Reply()
	body := `{"model":"` + testModel + `","stream":true,"messages":[{"role":"user","content":"Write a poem."}]}`
	srv := redistest.Start(b)
	_, usrv := proxytest.NewServer(b, func(proxytest.Received) sim.Reply { return reply })
	gw := replicaTB(b, srv.URL, config(usrv))
	tr := http.DefaultTransport.(*http.Transport).Clone()
	b.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	n := 0
	send := func(resumable bool) {
		n++
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if resumable {
			req.Header.Set("X-Phasegate-Resumable", "true")
			req.Header.Set("X-Request-Id", "bench-"+strconv.Itoa(n))
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		drainBody(b, resp)
		if resumable && resp.Header.Get("X-Phasegate-Resumable") != "true" {
			b.Fatalf("stream not resumable: %q", resp.Header.Get("X-Phasegate-Resumable"))
		}
	}
	send(false)
	send(true)
	const block = 20
	var cpu [2]time.Duration
	var count [2]int
	redis0, _ := srv.CPU()
	b.ResetTimer()
	for i := 0; i < b.N; i += block {
		for mode := range 2 {
			c0 := cpuTime(b)
			for range min(block, b.N-i) {
				send(mode == 1)
				count[mode]++
			}
			cpu[mode] += cpuTime(b) - c0
		}
	}
	b.StopTimer()
	redis1, _ := srv.CPU()
	const events = benchChunks + 1 // and [DONE]
	plain := float64(cpu[0].Nanoseconds()) / 1e3 / float64(count[0]*events)
	resumable := float64(cpu[1].Nanoseconds()) / 1e3 / float64(count[1]*events)
	b.ReportMetric(plain, "plain-cpu-µs/event")
	b.ReportMetric(resumable, "resumable-cpu-µs/event")
	b.ReportMetric(resumable-plain, "added-cpu-µs/event")
	b.ReportMetric(float64((redis1-redis0).Nanoseconds())/1e3/float64(count[1]*events), "redis-cpu-µs/event")
}

func drainBody(b *testing.B, resp *http.Response) {
	b.Helper()
	defer resp.Body.Close()
	buf := make([]byte, 32<<10)
	for {
		if _, err := resp.Body.Read(buf); err != nil {
			break
		}
	}
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
}
