package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
)

// guardedGateway serves the mock with answers and, in front of it, a
// gateway whose /v1 is the guard; it returns the gateway's URL.
func guardedGateway(t *testing.T, answers map[string]*answer) string {
	t.Helper()
	proxy.ReleaseMode()
	up := httptest.NewServer(&mock{answers: answers})
	t.Cleanup(up.Close)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, []string{"openai"})
	h, err := proxy.New(proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: up.URL + "/v1"}}},
		proxy.Options{TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{Metrics: m}, nil), DefaultProtocol: proxy.ProtocolTwoStage,
			Metrics: m, Gatherer: reg})
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	gw := httptest.NewServer(h)
	t.Cleanup(gw.Close)
	return gw.URL
}

// ask sends case c to the guard (a tool declared) and reads the answer.
func ask(t *testing.T, url string, c benchCase) {
	t.Helper()
	resp := proxytest.Do(t, proxytest.Context(t), http.DefaultClient, http.MethodPost, url+"/v1/chat/completions",
		string(c.body(target{tools: true}, "")))
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d, %v: %s", c.name, resp.StatusCode, err, b)
	}
}

// TestMockAnswersNotCut holds the mock's answers to what the cases
// measure: the guard passes each of them as it came, none is cut as
// degenerate text (and asked again), and uncut reads that from the
// gateway's metrics. The mock's words loop; at twice the stream's length
// the loop is cut, and uncut then fails the run.
func TestMockAnswersNotCut(t *testing.T) {
	ctx := context.Background()
	url := guardedGateway(t, answers())
	for _, c := range allCases {
		ask(t, url, c)
	}
	if n, err := counterOf(ctx, url+"/metrics", "phasegate_degenerate_text_total"); err != nil || n != 0 {
		t.Fatalf("degenerate answers %v, %v; want 0", n, err)
	}
	st := &stack{servers: []*server{{url: url}}}
	if err := uncut(ctx, st); err != nil {
		t.Fatalf("uncut: %v", err)
	}

	// The stream scenario's words loop; twice as many make the loop long
	// enough for the guard to call it degenerate.
	looped := textAnswer(400, 0)
	url = guardedGateway(t, map[string]*answer{"stream": looped})
	ask(t, url, benchCase{name: "looped", scenario: "stream", stream: true})
	st = &stack{servers: []*server{{url: url}}}
	if err := uncut(ctx, st); err == nil {
		t.Fatal("uncut passed a run whose answer the guard cut")
	}
}
