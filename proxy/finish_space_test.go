package proxy_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// An upstream may write a space after the colon of "finish_reason": a
// resumable stream cancelled after such a finish, before [DONE], still
// ends with one finish: the gateway sees the upstream's and adds none.
func TestResumeCancelAfterSpacedFinish(t *testing.T) {
	events := sim.NewStream(testModel).Role().Content("one ").Finish("stop").Events()
	last := &events[len(events)-1]
	spaced := strings.Replace(last.Data, `"finish_reason":"stop"`, `"finish_reason": "stop"`, 1)
	if spaced == last.Data {
		t.Fatalf("the finish chunk %s has no finish_reason to space", last.Data)
	}
	last.Data = spaced
	up, usrv := proxytest.NewServer(t, proxytest.Script(sim.Reply{Events: events, Hang: true}))
	gw := newGateway(t, config(usrv))
	ctx := testContext(t)
	const id = "req-spaced-finish"
	resp := post(t, ctx, gw, "/v1/chat/completions", chatBody(true), resumableHeader(id))
	live := readIDEvents(t, resp.Body, len(events))
	if len(live) != len(events) || !strings.Contains(live[len(live)-1].data, `"finish_reason": "stop"`) {
		t.Fatalf("before the cancel the stream got %v; want the upstream's %d events, its finish last", live, len(events))
	}
	if r := post(t, ctx, gw, "/v1/phasegate/requests/"+id+"/cancel", "", nil); r.StatusCode != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.StatusCode, readAll(t, r.Body))
	}
	select {
	case <-up.Cancelled():
	case <-time.After(wait):
		t.Fatal("upstream still open after the cancel")
	}
	rest := readIDEvents(t, resp.Body, 0)
	if len(rest) == 0 || rest[len(rest)-1].data != chat.Done {
		t.Fatalf("after the cancel the stream got %v; want it to end with [DONE]", rest)
	}
	var finishes []string
	for _, ev := range append(live, rest...) {
		c, err := chat.DecodeChunk([]byte(ev.data))
		if err == nil && c.FinishReason() != "" {
			finishes = append(finishes, c.FinishReason())
		}
	}
	if len(finishes) != 1 {
		t.Errorf("the stream carried finish reasons %q (events %v); want exactly one", finishes, append(live, rest...))
	}
}

// The request's span names the finish reason an upstream wrote with a
// space after the colon, as it names one written without.
func TestTraceOfSpacedFinish(t *testing.T) {
	events := sim.NewStream("m").Role().Content("one").Finish("length").Done().Events()
	for i := range events {
		events[i].Data = strings.Replace(events[i].Data, `"finish_reason":"length"`, "\"finish_reason\" :\t\"length\"", 1)
	}
	_, usrv := proxytest.NewServer(t, proxytest.Script(sim.Reply{Events: events}))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}}
	gw := serveGateway(t, cfg, proxy.Options{TracerProvider: tp})
	out := readAll(t, post(t, testContext(t), gw, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil).Body)
	if !strings.Contains(string(out), "\"finish_reason\" :\t\"length\"") {
		t.Fatalf("stream %s: want the upstream's finish forwarded as it came", out)
	}
	var server sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindServer {
			server = s
		}
	}
	if server == nil {
		t.Fatal("no request span ended")
	}
	wantAttrs(t, "request", server.Attributes(), map[attribute.Key]string{"gen_ai.response.finish_reasons": `["length"]`})
}
