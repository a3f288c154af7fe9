package proxy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
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
