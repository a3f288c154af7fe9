package proxy_test

import (
	"encoding/json"
	"net/http"
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
