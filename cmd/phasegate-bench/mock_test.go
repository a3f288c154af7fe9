package main

import (
	"context"
	"errors"
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
// gateway's metrics. A looping answer is cut, and uncut then fails the
// run.
func TestMockAnswersNotCut(t *testing.T) {
	ctx := context.Background()
	url := guardedGateway(t, answers())
	for _, c := range allCases {
		ask(t, url, c)
	}
	if err := uncut(ctx, &stack{servers: []*server{{url: url}}}); err != nil {
		t.Fatalf("uncut on every case: %v", err)
	}

	// Far longer than any case, the mock's text still repeats no phrase.
	url = guardedGateway(t, map[string]*answer{"stream": textAnswer(1000, 0)})
	ask(t, url, benchCase{name: "long", scenario: "stream", stream: true})
	if err := uncut(ctx, &stack{servers: []*server{{url: url}}}); err != nil {
		t.Fatalf("uncut on a 1,000-word answer: %v", err)
	}

	// The stream scenario with its words in a plain loop, as the mock had
	// them: 200 words are one phrase 25 times (1,150 bytes), just short of
	// what the guard sees as degenerate; 400 are cut.
	looped := textAnswer(400, 0)
	for i := range 400 {
		looped.events[1+i] = event(textChunk(textWords[i%len(textWords)] + " "))
	}
	url = guardedGateway(t, map[string]*answer{"stream": looped})
	ask(t, url, benchCase{name: "looped", scenario: "stream", stream: true})
	if err := uncut(ctx, &stack{servers: []*server{{url: url}}}); !errors.Is(err, errFailed) {
		t.Fatalf("uncut on a run whose answer the guard cut: %v, want errFailed", err)
	}
}
