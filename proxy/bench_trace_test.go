package proxy_test

// What metrics and tracing cost on the hot path, through the real router
// on loopback:
//
//	go test ./proxy -run '^$' -bench '^BenchmarkObservability$' -benchtime 2000x -count 3

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
	"github.com/phasegate/phasegate/tracing"
)

// BenchmarkObservability serves a 200-chunk text stream through the guard
// and reports the CPU time of the whole process per request and per
// chunk: with metrics only (tracing off, the default), with tracing on and
// every request sampled, its spans batched and exported over OTLP/HTTP to
// a collector double that reads and discards them, and with tracing on
// but no request sampled.
func BenchmarkObservability(b *testing.B) {
	reply := benchText(sim.NewStream(testModel).Role(), benchChunks-2).Finish("stop").Usage(20, benchChunks, nil).Done().Reply()
	// A tool declared: a request without one is passed through.
	body := `{"model":"` + testModel + `","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Say something."}],` +
		`"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}]}`
	for _, mode := range []struct {
		name    string
		sampler sdktrace.Sampler // nil: tracing off
	}{
		{"metrics-only", nil},
		{"tracing-100%", sdktrace.AlwaysSample()},
		{"tracing-0%", sdktrace.NeverSample()},
	} {
		b.Run(mode.name, func(b *testing.B) {
			up, usrv := proxytest.NewServer(b, func(proxytest.Received) sim.Reply { return reply })
			opts := proxy.Options{TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), DefaultProtocol: proxy.ProtocolTwoStage}
			if mode.sampler != nil {
				tp := collectorDouble(b, mode.sampler)
				opts.TracerProvider = tp
				opts.Tracer = tracing.SpanEvents{}
				opts.TwoStage = protocol.NewTwoStage(protocol.TwoStageConfig{}, tracing.SpanEvents{})
			}
			gw := serveGateway(b, config(usrv), opts)
			perReq := benchCPU(b, gw.URL+"/v1/chat/completions", body)
			oneCallEach(b, up, b.N+1)
			throughGuard(b, gw.URL+"/v1/chat/completions", body)
			b.ReportMetric(perReq/benchChunks, "cpu-µs/chunk")
		})
	}
}

// collectorDouble returns a tracer provider sampling with sampler that
// batches spans and exports them over OTLP/HTTP to a loopback server that
// reads and discards them. Both stop when the benchmark ends.
func collectorDouble(b *testing.B, sampler sdktrace.Sampler) *sdktrace.TracerProvider {
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(col.URL+"/v1/traces"))
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(exp))
	b.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		col.Close()
	})
	return tp
}
