package proxy_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/phasegate/phasegate/internal/redistest"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/store"
)

// hungReplica is a gateway whose limits, reasoning and resumable streams
// are on the Redis of srv, with its breaker counted in the gateway's
// metrics.
func hungReplica(tb testing.TB, srv *redistest.Server, cfg proxy.Config) *httptest.Server {
	tb.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, []string{"openai"})
	r, err := store.OpenRedisWith(srv.URL, store.RedisOptions{Observer: m})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = r.Close() })
	h, err := proxy.New(cfg, proxy.Options{Metrics: m, Gatherer: reg,
		Thinking: store.NewReasoning(r, 1<<20, time.Hour), Limiter: store.NewRedisLimiter(r), Streams: store.NewRedisStreams(r, time.Minute)})
	if err != nil {
		tb.Fatalf("proxy.New: %v", err)
	}
	tb.Cleanup(h.Close)
	return newTestServer(tb, h)
}

// TestRedisHangs pauses Redis (SIGSTOP: a hang, not a refusal) under a
// gateway with rate limits and resumable streams: every request is
// answered as the degradation table says, the breaker opens and is
// counted, and requests go on being served while Redis stays paused.
func TestRedisHangs(t *testing.T) {
	_, usrv := proxytest.NewServer(t, proxytest.Simulated())
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: usrv.URL + "/v1"}},
		RateLimits: proxy.RateLimits{KeyRequests: 1000, FailOpen: true}}
	srv := redistest.Start(t)
	gw := hungReplica(t, srv, cfg)
	ctx := testContext(t)
	post(t, ctx, gw, "/v1/chat/completions", chatBody(false), nil).Body.Close()
	srv.Pause(t)
	defer srv.Continue(t)
	for i := range 10 {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r := post(t, rctx, gw, "/v1/chat/completions", chatBody(true), resumableHeader("req-hung-"+string(rune('a'+i))))
		body := readAll(t, r.Body)
		cancel()
		if r.StatusCode != http.StatusOK || !strings.Contains(string(body), "[DONE]") {
			t.Fatalf("request %d with Redis paused: %d %s; want a plain stream to its [DONE]", i, r.StatusCode, body)
		}
		if r.Header.Get("X-Phasegate-Resumable") != "false" {
			t.Errorf("request %d: X-Phasegate-Resumable = %q, want false (served without resume)", i, r.Header.Get("X-Phasegate-Resumable"))
		}
	}
	m := string(readAll(t, get(t, ctx, gw, "/metrics", nil).Body))
	for _, want := range []string{`phasegate_redis_breaker_transitions_total{state="open"}`, `phasegate_redis_breaker_rejected_total`,
		`phasegate_rate_limit_decisions_total{limit="key_requests",outcome="failed_open"}`} {
		if !strings.Contains(m, want+" ") || strings.Contains(m, want+" 0\n") {
			t.Errorf("metrics: %s not counted", want)
		}
	}
	if !strings.Contains(m, `phasegate_redis_breaker_state{state="open"} 1`) && !strings.Contains(m, `phasegate_redis_breaker_state{state="half_open"} 1`) {
		t.Errorf("metrics: the breaker is not open with Redis paused")
	}
}

// BenchmarkRedisPaused measures an ordinary request (rate limited, on
// Redis) with Redis answering and with Redis paused once the breaker is
// open: the difference is what a hung Redis adds.
func BenchmarkRedisPaused(b *testing.B) {
	_, usrv := proxytest.NewServer(b, proxytest.Simulated())
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: usrv.URL + "/v1"}},
		RateLimits: proxy.RateLimits{KeyRequests: 1 << 30, FailOpen: true}}
	srv := redistest.Start(b)
	gw := hungReplica(b, srv, cfg)
	ctx := context.Background()
	run := func(b *testing.B) {
		for b.Loop() {
			r := post(b, ctx, gw, "/v1/chat/completions", chatBody(false), nil)
			readAll(b, r.Body)
			if r.StatusCode != http.StatusOK {
				b.Fatalf("status %d", r.StatusCode)
			}
		}
	}
	b.Run("redis answers", run)
	srv.Pause(b)
	defer srv.Continue(b)
	for range 3 * store.DefaultBreakerFailures { // open the breaker
		readAll(b, post(b, ctx, gw, "/v1/chat/completions", chatBody(false), nil).Body)
	}
	b.Run("redis paused, breaker open", run)
}

// syncBuffer is a log's output, safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRedisDownLogsOnce: while Redis is unreachable, 200 rate-limited
// requests are served (RATE_LIMIT_FAIL_OPEN) and the log says so once,
// with the breaker opening once: the warnings of the store failing are
// held to one per message every 10 s, with the number left out. Before,
// each request logged its own (231,000 lines, 85 MB, in 70 s of load).
func TestRedisDownLogsOnce(t *testing.T) {
	_, usrv := proxytest.NewServer(t, proxytest.Simulated())
	var out syncBuffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	r, err := store.OpenRedisWith(strings.Replace(strings.TrimSuffix(closedURL(t), "/v1"), "http://", "redis://", 1), store.RedisOptions{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: usrv.URL + "/v1"}},
		RateLimits: proxy.RateLimits{KeyRequests: 1000, ProjectRequests: 1000, FailOpen: true}}
	gw := serveGateway(t, cfg, proxy.Options{Logger: log, Limiter: store.NewRedisLimiter(r)})
	ctx := testContext(t)
	for i := range 200 {
		resp := post(t, ctx, gw, "/v1/chat/completions", chatBody(false), http.Header{"X-Project-Id": {"p"}})
		if b := readAll(t, resp.Body); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d with Redis down: %d %s", i, resp.StatusCode, b)
		}
	}
	lines := strings.Count(out.String(), "shared store failed")
	opened := strings.Count(out.String(), "Redis is failing")
	t.Logf("%d store warnings, %d breaker openings, %d bytes of log", lines, opened, len(out.String()))
	if lines > 4 || opened != 1 {
		t.Errorf("%d store warnings and %d breaker openings logged for 200 requests, want at most 4 (one a message) and 1", lines, opened)
	}
}

// TestRedisHangCostsOneTimeout: the first request after Redis hangs
// (SIGSTOP) makes several calls to it before it is served (the rate
// limits of its key, project and address, its stream's log), and they
// share one deadline: the request waits one REDIS_TIMEOUT, not one (and a
// retry) for each call until the breaker opens. Before, with a timeout of
// 300 ms, the first request took about 1.8 s.
func TestRedisHangCostsOneTimeout(t *testing.T) {
	_, usrv := proxytest.NewServer(t, proxytest.Simulated())
	srv := redistest.Start(t)
	const timeout = 300 * time.Millisecond
	r, err := store.OpenRedisWith(srv.URL, store.RedisOptions{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: usrv.URL + "/v1"}},
		RateLimits: proxy.RateLimits{KeyRequests: 1000, ProjectRequests: 1000, AddressRequests: 1000, FailOpen: true}}
	h, err := proxy.New(cfg, proxy.Options{Limiter: store.NewRedisLimiter(r), Streams: store.NewRedisStreams(r, time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	gw := newTestServer(t, h)
	ctx := testContext(t)
	header := resumableHeader("req-warm")
	header.Set("X-Project-Id", "p")
	readAll(t, post(t, ctx, gw, "/v1/chat/completions", chatBody(true), header).Body)
	srv.Pause(t)
	defer srv.Continue(t)
	header.Set("X-Request-Id", "req-hung")
	t0 := time.Now()
	resp := post(t, ctx, gw, "/v1/chat/completions", chatBody(true), header)
	body := readAll(t, resp.Body)
	took := time.Since(t0)
	t.Logf("the first request with Redis hung took %v", took)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("status %d %s; want a plain stream to its [DONE]", resp.StatusCode, body)
	}
	if took > 3*timeout {
		t.Errorf("the first request with Redis hung took %v; want about one REDIS_TIMEOUT (%v)", took, timeout)
	}
}
