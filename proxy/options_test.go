package proxy_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// countingTracer counts trace events; requests trace concurrently.
type countingTracer struct{ n atomic.Int64 }

func (c *countingTracer) Trace(context.Context, metrics.Trace) { c.n.Add(1) }

// TestEveryRouteWithFullOptions serves each chat route of a gateway built
// the way cmd/phasegate builds it: a tracer that is a slice
// (metrics.Tracers), the guard, the default protocol set.
func TestEveryRouteWithFullOptions(t *testing.T) {
	_, usrv := proxytest.NewServer(t, func(proxytest.Received) sim.Reply {
		return sim.NewStream(testModel).Role().Content("hi").Finish("stop").Done().Reply()
	})
	tracer := metrics.Tracers{&countingTracer{}}
	gw := serveGateway(t, config(usrv), proxy.Options{
		Tracer:          tracer,
		TwoStage:        protocol.NewTwoStage(protocol.TwoStageConfig{}, tracer),
		DefaultProtocol: proxy.ProtocolTwoStage,
	})
	for _, route := range []string{"/v1/chat/completions", "/standard/v1/chat/completions", "/two-stage/v1/chat/completions"} {
		t.Run(route, func(t *testing.T) {
			body := `{"model":"` + testModel + `","stream":true,"messages":[{"role":"user","content":"hello"}]}`
			req, err := http.NewRequestWithContext(testContext(t), http.MethodPost, gw.URL+route, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := gw.Client().Do(req)
			if err != nil {
				t.Fatalf("POST %s: %v", route, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("status: got %d, want 200", resp.StatusCode)
			}
		})
	}
}

// TestProtocolRoutesServeTheAPI: an SDK whose base URL is a protocol route
// lists models and reaches other endpoints through it.
func TestProtocolRoutesServeTheAPI(t *testing.T) {
	up, usrv := proxytest.NewServer(t, func(r proxytest.Received) sim.Reply {
		if strings.HasSuffix(r.Path, "/models") {
			return sim.Reply{Body: []byte(`{"object":"list","data":[{"id":"m1","object":"model"}]}`)}
		}
		return sim.Reply{Body: []byte(`{"object":"list","data":[]}`)}
	})
	gw := newGateway(t, config(usrv))
	for _, prefix := range []string{"/v1", "/standard/v1", "/two-stage/v1"} {
		for _, path := range []string{"/models", "/embeddings"} {
			t.Run(prefix+path, func(t *testing.T) {
				method, body := http.MethodGet, ""
				if path == "/embeddings" {
					method, body = http.MethodPost, `{"model":"text-embedding-3-small","input":"x"}`
				}
				req, err := http.NewRequestWithContext(testContext(t), method, gw.URL+prefix+path, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := gw.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("status: got %d, want 200", resp.StatusCode)
				}
			})
		}
	}
	for _, r := range up.Received() {
		if r.Path != "/v1/models" && r.Path != "/v1/embeddings" {
			t.Errorf("upstream got path %q, want /v1/models or /v1/embeddings", r.Path)
		}
	}
}
