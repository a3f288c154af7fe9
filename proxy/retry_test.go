package proxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// TestE2ERetry: an upstream that answers 503, then 429 with Retry-After,
// then the answer, is asked three times on both routes; the client sees
// only the answer, and each retry is counted by the failure's kind.
func TestE2ERetry(t *testing.T) {
	for _, route := range []string{"/standard/v1/chat/completions", "/two-stage/v1/chat/completions"} {
		t.Run(route, func(t *testing.T) {
			t.Parallel()
			busy := sim.Error(http.StatusServiceUnavailable, "overloaded", "server_error", "overloaded")
			limited := sim.Error(http.StatusTooManyRequests, "slow down", "rate_limit_error", "rate_limited")
			limited.Header = http.Header{"Retry-After": {"0"}}
			good := sim.NewStream(tsModel).Role().Content("after ", "retries").Finish("stop").Done().Reply()
			up, usrv := proxytest.NewServer(t, proxytest.Script(busy, limited, good))
			reg := prometheus.NewRegistry()
			m := metrics.New(reg, []string{"deepseek"})
			cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}},
				Retry: protocol.Retry{Attempts: 2, Base: time.Millisecond, MaxWait: time.Second}}
			gw := serveGateway(t, cfg, proxy.Options{Metrics: m, Gatherer: reg,
				TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{Metrics: m}, nil)})
			resp, got := tsPost(t, gw, route, tsBody(true, ""), nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, want 200: %s", resp.StatusCode, got)
			}
			text := ""
			for _, d := range tsData(t, got) {
				var c struct {
					Choices []struct {
						Delta struct {
							Content string `json:"content"`
						} `json:"delta"`
					} `json:"choices"`
				}
				if json.Unmarshal([]byte(d), &c) == nil && len(c.Choices) > 0 {
					text += c.Choices[0].Delta.Content
				}
			}
			if text != "after retries" {
				t.Errorf("content %q, want the third answer's", text)
			}
			if n := len(up.Received()); n != 3 {
				t.Errorf("upstream calls = %d, want 3", n)
			}
			for kind, want := range map[string]float64{"status_5xx": 1, "status_4xx": 1} {
				if got := gathered(t, reg, "phasegate_upstream_retries_total", "kind", kind); got != want {
					t.Errorf("retries of kind %s = %v, want %v", kind, got, want)
				}
			}
		})
	}
}

// TestE2EModelFallback: a model whose provider keeps failing falls back,
// after its retries, to the configured model on another provider when the
// gateway holds that provider's key, with the client told in
// X-Phasegate-Fallback-Model; without that key it does not (the client's
// own key never goes to a provider its model does not route to).
func TestE2EModelFallback(t *testing.T) {
	for _, serverKey := range []bool{true, false} {
		t.Run(fmt.Sprintf("gateway holds the backup's key: %v", serverKey), func(t *testing.T) {
			t.Parallel()
			busy := sim.Error(http.StatusServiceUnavailable, "overloaded", "server_error", "overloaded")
			down, dsrv := proxytest.NewServer(t, proxytest.Script(busy, busy))
			backup, bsrv := proxytest.NewServer(t, proxytest.Script(sim.NewStream("gpt-backup").Role().Content("from the backup").Finish("stop").Done().Reply()))
			openai := proxy.Provider{Name: "openai", BaseURL: bsrv.URL + "/v1"}
			if serverKey {
				openai.APIKey = "sk-backup-0123456789"
			}
			cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: dsrv.URL + "/v1"}, openai},
				Retry:     protocol.Retry{Attempts: 1, Base: time.Millisecond},
				Fallbacks: []proxy.Fallback{{Pattern: "deepseek-*", Model: "gpt-backup"}}}
			gw := serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
			resp, got := tsPost(t, gw, "/v1/chat/completions", tsBody(true, ""), http.Header{"Authorization": {"Bearer sk-client-own-0123456789"}})
			if n := len(down.Received()); n != 2 {
				t.Errorf("calls to the failing provider = %d, want 2 (the call and its retry)", n)
			}
			if !serverKey {
				if resp.StatusCode != http.StatusServiceUnavailable || len(backup.Received()) != 0 {
					t.Errorf("status %d with %d backup calls, want the 503 relayed and no backup call", resp.StatusCode, len(backup.Received()))
				}
				return
			}
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Phasegate-Fallback-Model") != "gpt-backup" {
				t.Fatalf("status %d, fallback %q: %s", resp.StatusCode, resp.Header.Get("X-Phasegate-Fallback-Model"), got)
			}
			b := backup.Received()
			if len(b) != 1 || !strings.Contains(string(b[0].Body), `"model":"gpt-backup"`) || b[0].Header.Get("Authorization") != "Bearer sk-backup-0123456789" {
				t.Errorf("the backup got %d calls; want one for gpt-backup with the gateway's own key", len(b))
			}
		})
	}
}

// TestE2ERetryAfterTooLong: a Retry-After too large for a duration
// (18446744074 s wraps a nanosecond count) is a wait too long, not an
// immediate retry: the client gets the upstream's 429 after one call.
func TestE2ERetryAfterTooLong(t *testing.T) {
	for _, value := range []string{"18446744074", "184467440737095516160"} {
		t.Run(value, func(t *testing.T) {
			t.Parallel()
			limited := sim.Error(http.StatusTooManyRequests, "slow down", "rate_limit_error", "rate_limited")
			limited.Header = http.Header{"Retry-After": {value}}
			good := sim.NewStream(tsModel).Role().Content("retried").Finish("stop").Done().Reply()
			up, usrv := proxytest.NewServer(t, proxytest.Script(limited, good))
			cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}},
				Retry: protocol.Retry{Attempts: 2, Base: time.Millisecond, MaxWait: time.Second}}
			gw := newGateway(t, cfg)
			resp, got := tsPost(t, gw, "/standard/v1/chat/completions", tsBody(true, ""), nil)
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Errorf("status = %d, want the upstream's 429: %s", resp.StatusCode, got)
			}
			if n := len(up.Received()); n != 1 {
				t.Errorf("upstream calls = %d, want 1: a Retry-After past UPSTREAM_RETRY_MAX_WAIT is not waited for", n)
			}
		})
	}
}

// deadUpstream accepts requests and never answers them; it counts them.
func deadUpstream(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	quit := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = io.Copy(io.Discard, r.Body) // so that the server sees the gateway hang up
		select {
		case <-r.Context().Done(): // the gateway gave up
		case <-quit:
		}
	}))
	t.Cleanup(func() { close(quit); srv.Close() })
	return srv, &n
}

// TestE2EOneFirstByteDeadline: an upstream that accepts and never answers,
// with retries and a fallback as dead: the first-byte bound is the
// request's, not each attempt's, so the client gets its 504 after one
// call, not after a call, its retries, the fallback and its retries.
func TestE2EOneFirstByteDeadline(t *testing.T) {
	for _, route := range []string{"/standard/v1/chat/completions", "/two-stage/v1/chat/completions"} {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s stream=%v", route, stream), func(t *testing.T) {
				t.Parallel()
				dead, calls := deadUpstream(t)
				backup, backupCalls := deadUpstream(t)
				cfg := proxy.Config{
					Providers: []proxy.Provider{{Name: "deepseek", BaseURL: dead.URL + "/v1"}, {Name: "openai", BaseURL: backup.URL + "/v1", APIKey: "sk-backup-0123456789"}},
					Retry:     protocol.Retry{Attempts: 2, Base: time.Millisecond, MaxWait: time.Second},
					Timeouts:  proxy.Timeouts{FirstByte: 300 * time.Millisecond},
					Fallbacks: []proxy.Fallback{{Pattern: "deepseek-*", Model: "gpt-backup"}}}
				gw := serveGateway(t, cfg, proxy.Options{TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
				resp, got := tsPost(t, gw, route, tsBody(stream, ""), nil)
				if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(got), `"code":"upstream_timeout"`) {
					t.Errorf("status = %d %s, want 504 upstream_timeout", resp.StatusCode, got)
				}
				if n, m := calls.Load(), backupCalls.Load(); n != 1 || m != 0 {
					t.Errorf("calls = %d to the model, %d to its fallback; want 1 and 0: no time is left after a first-byte timeout", n, m)
				}
			})
		}
	}
}

// TestE2ERetryWithinFirstByteDeadline: a failure that leaves time (a
// 503 at once) is still retried and falls back within the deadline.
func TestE2ERetryWithinFirstByteDeadline(t *testing.T) {
	busy := sim.Error(http.StatusServiceUnavailable, "overloaded", "server_error", "overloaded")
	down, dsrv := proxytest.NewServer(t, proxytest.Script(busy, busy, busy))
	backup, bsrv := proxytest.NewServer(t, proxytest.Script(sim.NewStream("gpt-backup").Role().Content("from the backup").Finish("stop").Done().Reply()))
	cfg := proxy.Config{
		Providers: []proxy.Provider{{Name: "deepseek", BaseURL: dsrv.URL + "/v1"}, {Name: "openai", BaseURL: bsrv.URL + "/v1", APIKey: "sk-backup-0123456789"}},
		Retry:     protocol.Retry{Attempts: 2, Base: time.Millisecond, MaxWait: time.Second},
		Timeouts:  proxy.Timeouts{FirstByte: time.Minute},
		Fallbacks: []proxy.Fallback{{Pattern: "deepseek-*", Model: "gpt-backup"}}}
	gw := newGateway(t, cfg)
	resp, got := tsPost(t, gw, "/standard/v1/chat/completions", tsBody(true, ""), nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(got), "from the backup") {
		t.Errorf("status = %d %s, want the backup's answer", resp.StatusCode, got)
	}
	if n, m := len(down.Received()), len(backup.Received()); n != 3 || m != 1 {
		t.Errorf("calls = %d to the model, %d to its fallback; want 3 and 1", n, m)
	}
}
