package proxy_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
	"github.com/phasegate/phasegate/tracing"
)

// TestTraceOfRefusal: a guarded request whose first upstream answer
// repeats an executed call (refused, re-asked) and whose second is a new
// call (forwarded) is one server span, a child of the client's trace,
// with one client span per upstream call, siblings, each sent upstream
// as the call's traceparent; the guard's verdicts are events of the
// request's span, without the call's arguments; the GenAI attributes say
// what was asked and answered.
func TestTraceOfRefusal(t *testing.T) {
	const args = `{"city":"Paris-the-secret-argument"}`
	up, usrv := proxytest.NewServer(t, proxytest.Script(
		sim.NewStream("m").Role().ToolCall(0, "call_2", "get_weather", args).Finish(chat.FinishToolCalls).Done().Reply(),
		sim.NewStream("m").Role().ToolCall(0, "call_3", "get_time", `{"timezone":"Europe/Paris"}`).Finish(chat.FinishToolCalls).
			Usage(30, 6, nil).Done().Reply(),
	))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}}
	gw := serveGateway(t, cfg, proxy.Options{TracerProvider: tp, Tracer: tracing.SpanEvents{}, DefaultProtocol: proxy.ProtocolTwoStage,
		TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, tracing.SpanEvents{})})

	// The client's own trace: the gateway's span must join it.
	clientCtx, client := tp.Tracer("client").Start(context.Background(), "agent step")
	body := `{"model":"deepseek-v4-flash","stream":true,"stream_options":{"include_usage":true},
	  "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}},
	           {"type":"function","function":{"name":"get_time","parameters":{"type":"object"}}}],
	  "messages":[{"role":"user","content":"Weather and time in Paris?"},
	    {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":` + quote(args) + `}}]},
	    {"role":"tool","tool_call_id":"call_1","content":"sunny"}]}`
	req, _ := http.NewRequestWithContext(tsContext(t), http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
	propagation.TraceContext{}.Inject(clientCtx, propagation.HeaderCarrier(req.Header))
	resp, err := gw.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	client.End()
	if !strings.Contains(string(out), "get_time") || strings.Contains(string(out), "Paris-the-secret") {
		t.Fatalf("answer %s: want the new call forwarded and the repeat refused", out)
	}

	var server sdktrace.ReadOnlySpan
	var calls []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.SpanKind() {
		case trace.SpanKindServer:
			server = s
		case trace.SpanKindClient:
			calls = append(calls, s)
		}
	}
	if server == nil || len(calls) != 2 {
		t.Fatalf("ended spans: server %v, %d client spans; want 1 and 2", server != nil, len(calls))
	}
	if server.Parent().SpanID() != client.SpanContext().SpanID() || server.SpanContext().TraceID() != client.SpanContext().TraceID() {
		t.Errorf("request span's parent %v, want the client's span %v", server.Parent().SpanID(), client.SpanContext().SpanID())
	}
	if server.Name() != "chat deepseek-v4-flash" {
		t.Errorf("request span name %q, want %q", server.Name(), "chat deepseek-v4-flash")
	}
	received := up.Received()
	for i, c := range calls {
		if c.Parent().SpanID() != server.SpanContext().SpanID() {
			t.Errorf("call %d: parent %v, want the request span %v (re-asks are siblings)", i, c.Parent().SpanID(), server.SpanContext().SpanID())
		}
		got := propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(received[i].Header))
		if sc := trace.SpanContextFromContext(got); sc.SpanID() != c.SpanContext().SpanID() || sc.TraceID() != c.SpanContext().TraceID() {
			t.Errorf("call %d: traceparent sent upstream %q, want the call's span %v", i, received[i].Header.Get("traceparent"), c.SpanContext().SpanID())
		}
		// The guard closes each answer at its complete call, before the
		// upstream's finish: the calls' spans have no finish reasons.
		wantAttrs(t, "call", c.Attributes(), map[attribute.Key]string{
			"gen_ai.operation.name": "chat", "gen_ai.provider.name": "deepseek", "gen_ai.request.model": "deepseek-v4-flash"})
	}
	wantAttrs(t, "request", server.Attributes(), map[attribute.Key]string{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "deepseek", "gen_ai.request.model": "deepseek-v4-flash",
		"gen_ai.response.finish_reasons": `["tool_calls"]`, "phasegate.protocol": proxy.ProtocolTwoStage})
	for _, k := range []attribute.Key{"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"} {
		if v := attr(server.Attributes(), k); v.AsInt64() <= 0 {
			t.Errorf("request span: %s = %v, want the tokens of both calls", k, v.String())
		}
	}

	var verdicts []string
	for _, ev := range server.Events() {
		for _, a := range ev.Attributes {
			if strings.Contains(a.Value.String(), "Paris-the-secret") {
				t.Errorf("event %s carries the call's arguments: %s=%s", ev.Name, a.Key, a.Value.String())
			}
		}
		if v := attr(ev.Attributes, tracing.AttrVerdict); v.Type() != attribute.EMPTY {
			verdicts = append(verdicts, ev.Name+":"+v.AsString()+"@"+attr(ev.Attributes, tracing.AttrCycleIndex).String())
		}
	}
	want := []string{"tool_call:duplicate@1", "duplicate_tool_call:duplicate@1", "tool_call:forward@1"}
	if !slices.Equal(verdicts, want) {
		t.Errorf("guard events %v, want %v", verdicts, want)
	}
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

func attr(attrs []attribute.KeyValue, k attribute.Key) attribute.Value {
	for _, a := range attrs {
		if a.Key == k {
			return a.Value
		}
	}
	return attribute.Value{}
}

func wantAttrs(t *testing.T, what string, attrs []attribute.KeyValue, want map[attribute.Key]string) {
	t.Helper()
	for k, v := range want {
		if got := attr(attrs, k).String(); got != v {
			t.Errorf("%s span: %s = %q, want %q", what, k, got, v)
		}
	}
}
