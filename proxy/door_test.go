package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// doorSeries sums the series of metric name whose door label is door:
// how many there are, and their counts (a counter's value, a histogram's
// observations).
func doorSeries(t *testing.T, g prometheus.Gatherer, name, door string) (series int, count float64) {
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
			if labelsAre(s, "door", door) {
				series++
				count += s.GetCounter().GetValue() + float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return series, count
}

// A request is counted, timed and traced under the door it came by: the
// door label of requests (a door's own refusals included), first token
// and overhead, and the phasegate.door attribute of its span. Every
// door's series exist, at 0, before its first request.
func TestDoorLabel(t *testing.T) {
	_, usrv := proxytest.NewServer(t, proxytest.Simulated())
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, []string{"deepseek"})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}}
	gw := serveGateway(t, cfg, proxy.Options{Metrics: m, Gatherer: reg, TracerProvider: tp, DefaultProtocol: proxy.ProtocolTwoStage,
		TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{Metrics: m}, nil)})
	ctx := testContext(t)
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"` + sim.Model + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/responses", `{"model":"` + sim.Model + `","stream":true,"input":"hi"}`},
		{"/v1/responses", `{"model":"` + sim.Model + `","input":"hi","previous_response_id":"resp_unknown"}`},
	} {
		resp := post(t, ctx, gw, tc.path, tc.body, nil)
		readAll(t, resp.Body)
		if resp.StatusCode != http.StatusOK && !strings.Contains(tc.body, "resp_unknown") {
			t.Fatalf("%s: status %d", tc.path, resp.StatusCode)
		}
	}

	for _, tc := range []struct {
		name                      string
		chat, responses, messages float64
	}{
		{name: "phasegate_requests_total", chat: 1, responses: 2},
		{name: "phasegate_time_to_first_token_seconds", chat: 1, responses: 1},
		{name: "phasegate_gateway_overhead_seconds", chat: 1, responses: 1},
	} {
		for door, want := range map[string]float64{metrics.DoorChat: tc.chat, metrics.DoorResponses: tc.responses, metrics.DoorMessages: tc.messages} {
			n, got := doorSeries(t, reg, tc.name, door)
			if n == 0 || got != want {
				t.Errorf("%s{door=%q}: %d series counting %v, want series counting %v", tc.name, door, n, got, want)
			}
		}
	}
	doors := map[string]int{}
	for _, s := range rec.Ended() {
		if s.SpanKind() != trace.SpanKindServer {
			continue
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "phasegate.door" {
				doors[kv.Value.AsString()]++
			}
		}
	}
	if fmt.Sprint(doors) != "map[chat:1 responses:2]" {
		t.Errorf("server spans by phasegate.door: %v, want chat 1, responses 2", doors)
	}
}

// The one resume wrapper numbers any door's events when asked
// (X-Phasegate-Event-Ids: true): a resumable Responses stream's events
// carry id lines from 1, and its replay is the live stream byte for byte.
func TestResponsesEventIDs(t *testing.T) {
	_, gw := rsGateway(t, proxytest.Simulated())
	ctx := testContext(t)
	hdr := http.Header{"X-Phasegate-Resumable": {"true"}, "X-Phasegate-Event-Ids": {"true"}}
	resp := post(t, ctx, gw, "/v1/responses", `{"model":"`+sim.Model+`","input":"hi","stream":true}`, hdr)
	live := rsNoComments(readAll(t, resp.Body))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Phasegate-Resumable") != "true" {
		t.Fatalf("stream: %d, X-Phasegate-Resumable %q", resp.StatusCode, resp.Header.Get("X-Phasegate-Resumable"))
	}
	blocks := strings.Split(strings.TrimSuffix(live, "\n\n"), "\n\n")
	for i, b := range blocks {
		if want := fmt.Sprintf("id: %d\nevent: ", i+1); !strings.HasPrefix(b, want) {
			t.Fatalf("event %d starts %q, want %q", i, b[:min(len(b), 40)], want)
		}
	}
	var id string
	if _, data, ok := strings.Cut(blocks[0], "\ndata: "); ok {
		var ev struct {
			Response struct {
				ID string `json:"id"`
			} `json:"response"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("first event: %v", err)
		}
		id = ev.Response.ID
	}
	replay := get(t, ctx, gw, "/v1/responses/"+id+"?stream=true", http.Header{"X-Phasegate-Event-Ids": {"true"}})
	if got := rsNoComments(readAll(t, replay.Body)); replay.StatusCode != http.StatusOK || got != live {
		t.Errorf("replay of %q: %d\n%s\nwant the live stream\n%s", id, replay.StatusCode, got, live)
	}
}
