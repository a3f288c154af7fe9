package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
)

// Delays of the slow upstream below: before its headers, before its first
// text chunk, and before its finish.
const (
	delayHeaders = 150 * time.Millisecond
	delayText    = 100 * time.Millisecond
	delayFinish  = 100 * time.Millisecond
)

// slowUpstream streams one short answer, waiting known times before its
// headers, its first token and its finish: every one of them is time the
// gateway waits on the upstream.
func slowUpstream(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	pause := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
		}
	}
	pause(delayHeaders)
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	send := func(data string) {
		fmt.Fprintf(w, "data: %s\n\n", data)
		_ = rc.Flush()
	}
	const head = `"id":"c1","object":"chat.completion.chunk","created":1,"model":"m"`
	send(`{` + head + `,"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`)
	pause(delayText)
	send(`{` + head + `,"choices":[{"index":0,"delta":{"content":"Hello"}}]}`)
	pause(delayFinish)
	send(`{` + head + `,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}`)
	send("[DONE]")
}

// TestFirstTokenAndOverhead: through a slow upstream, the time to the
// first token covers the waits before it (headers, first text), and the
// gateway's overhead leaves out every wait on the upstream, so it stays
// far below them; tokens go to the configured model's label, or other.
func TestFirstTokenAndOverhead(t *testing.T) {
	usrv := httptest.NewServer(http.HandlerFunc(slowUpstream))
	t.Cleanup(usrv.Close)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, []string{"deepseek"}, "deepseek-v4-flash")
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}}
	gw := serveGateway(t, cfg, proxy.Options{Metrics: m, Gatherer: reg, DefaultProtocol: proxy.ProtocolTwoStage,
		TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{Metrics: m}, nil)})

	for _, tc := range []struct{ route, model string }{
		{"/standard/v1/chat/completions", "deepseek-v4-flash"},
		{"/two-stage/v1/chat/completions", "Some-Client-String"},
	} {
		body := `{"model":"` + tc.model + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		req, _ := http.NewRequestWithContext(tsContext(t), http.MethodPost, gw.URL+tc.route, strings.NewReader(body))
		resp, err := gw.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.route, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "Hello") {
			t.Fatalf("%s: answer %q lacks the text", tc.route, b)
		}
	}

	const slack = 150 * time.Millisecond // a shared machine under -race
	for _, proto := range metrics.Protocols {
		first := histogram(t, reg, "phasegate_time_to_first_token_seconds", proto)
		if want := delayHeaders + delayText; first.GetSampleCount() != 1 || seconds(first) < want || seconds(first) > want+slack {
			t.Errorf("%s: time to first token %v over %d requests, want 1 request in [%v, %v]: the opening chunk carries no token",
				proto, seconds(first), first.GetSampleCount(), want, want+slack)
		}
		over := histogram(t, reg, "phasegate_gateway_overhead_seconds", proto)
		if over.GetSampleCount() != 1 || seconds(over) <= 0 || seconds(over) > slack/3 {
			t.Errorf("%s: overhead %v over %d requests, want 1 request in (0, %v]: upstream waits (%v) are not the gateway's",
				proto, seconds(over), over.GetSampleCount(), slack/3, delayHeaders+delayText+delayFinish)
		}
	}
	for _, model := range []string{"deepseek-v4-flash", metrics.OtherModel} {
		if got := modelTokens(t, reg, model); got != 9 {
			t.Errorf("model %q: %v tokens counted, want 9 (7 in, 2 out)", model, got)
		}
	}
}

// histogram returns the series of histogram name with door chat,
// protocol proto and provider deepseek.
func histogram(t *testing.T, g prometheus.Gatherer, name, proto string) *dto.Histogram {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			if labelsAre(s, "door", metrics.DoorChat, "protocol", proto, "provider", "deepseek") {
				return s.GetHistogram()
			}
		}
	}
	t.Fatalf("no %s{door=\"chat\",protocol=%q,provider=\"deepseek\"}", name, proto)
	return nil
}

func modelTokens(t *testing.T, g prometheus.Gatherer, model string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "phasegate_model_tokens_total" {
			for _, s := range mf.GetMetric() {
				if labelsAre(s, "model", model) {
					sum += s.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// labelsAre reports whether s has every name, value pair of kv.
func labelsAre(s *dto.Metric, kv ...string) bool {
	for i := 0; i < len(kv); i += 2 {
		found := false
		for _, lp := range s.GetLabel() {
			found = found || lp.GetName() == kv[i] && lp.GetValue() == kv[i+1]
		}
		if !found {
			return false
		}
	}
	return true
}

func seconds(h *dto.Histogram) time.Duration {
	return time.Duration(h.GetSampleSum() * float64(time.Second))
}
