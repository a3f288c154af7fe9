package protocol_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
)

// TestRetry: an upstream call that fails in a way the failure table calls
// safe to retry is made again, up to the exchange's Retry, while nothing
// reached the client, on both strategies; any other failure, a Retry-After
// longer than the bound, or a failure after bytes were written stands.
func TestRetry(t *testing.T) {
	answer := streamReply(stream().Role().Content("done").Finish("stop").Done())
	status := func(code int, retryAfter string) reply {
		h := http.Header{}
		if retryAfter != "" {
			h.Set("Retry-After", retryAfter)
		}
		return reply{sendErr: &protocol.UpstreamError{Status: code, Header: h, Body: []byte(`{"error":{"message":"busy"}}`)}}
	}
	unreachable := reply{sendErr: fmt.Errorf("%w: connection refused", protocol.ErrUpstreamUnreachable)}
	policy := protocol.Retry{Attempts: 2, Base: time.Millisecond, MaxWait: time.Second}
	tests := []struct {
		name    string
		replies []reply
		retry   protocol.Retry
		calls   int
		wantErr int // the status of the error that stands, 0: the answer
		retries int // upstream_retry traces
	}{
		{name: "503 then an answer", replies: []reply{status(503, ""), answer}, retry: policy, calls: 2, retries: 1},
		{name: "429 with Retry-After 0, then an answer", replies: []reply{status(429, "0"), answer}, retry: policy, calls: 2, retries: 1},
		{name: "unreachable twice, then an answer", replies: []reply{unreachable, unreachable, answer}, retry: policy, calls: 3, retries: 2},
		{name: "503 three times: the attempts run out", replies: []reply{status(503, ""), status(503, ""), status(503, "")}, retry: policy, calls: 3, wantErr: 503, retries: 2},
		{name: "Retry-After over the bound is not waited for", replies: []reply{status(429, "3600")}, retry: policy, calls: 1, wantErr: 429},
		{name: "400 is never retried", replies: []reply{status(400, "")}, retry: policy, calls: 1, wantErr: 400},
		{name: "no retry policy", replies: []reply{status(503, "")}, calls: 1, wantErr: 503},
	}
	strategies := []func(*recorder) protocol.Strategy{
		func(rec *recorder) protocol.Strategy { return protocol.Standard{Tracer: rec} },
		func(rec *recorder) protocol.Strategy { return protocol.NewTwoStage(protocol.TwoStageConfig{}, rec) },
	}
	for _, tt := range tests {
		for _, newStrategy := range strategies {
			rec := &recorder{}
			s := newStrategy(rec)
			t.Run(s.Name()+"/"+tt.name, func(t *testing.T) {
				u := newUpstream(t, tt.replies...)
				x := exchange(newRequest(t, true, history(), ""), u, protocol.Limits{})
				x.Retry = tt.retry
				res := run(t, s, x)
				var ue *protocol.UpstreamError
				switch {
				case tt.wantErr == 0:
					if !answered(res) {
						t.Errorf("events %v (error %v), want the answer and [DONE]", kinds(res.events), res.err)
					}
				case !errors.As(res.err, &ue) || ue.Status != tt.wantErr:
					t.Errorf("error = %v, want the upstream's %d", res.err, tt.wantErr)
				}
				if n := len(u.sent()); n != tt.calls {
					t.Errorf("upstream calls = %d, want %d", n, tt.calls)
				}
				if n := len(rec.kinds(metrics.TraceUpstreamRetry)); n != tt.retries {
					t.Errorf("upstream_retry traces = %d, want %d", n, tt.retries)
				}
			})
		}
	}
}

// TestRetryNotAfterBytes: once the guard wrote text, a re-ask that fails
// is not retried: the client has part of an answer.
func TestRetryNotAfterBytes(t *testing.T) {
	dup := streamReply(stream().Role().Content("Reading again.").ToolCall(0, "c9", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Done())
	u := newUpstream(t, dup, reply{sendErr: &protocol.UpstreamError{Status: 503, Header: http.Header{}}})
	x := exchange(newRequest(t, true, history(ran("c1", "read_file", `{"path":"a.go"}`)), ""), u, protocol.Limits{})
	x.Retry = protocol.Retry{Attempts: 3, Base: time.Millisecond}
	res := run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), x)
	var ue *protocol.UpstreamError
	if !errors.As(res.err, &ue) || ue.Status != 503 {
		t.Fatalf("error = %v, want the upstream's 503", res.err)
	}
	if n := len(u.sent()); n != 2 {
		t.Errorf("upstream calls = %d, want 2 (no retry of the re-ask)", n)
	}
}

// answered reports a sequence that ended without error with [DONE] after
// a chunk saying "done".
func answered(res result) bool {
	n := len(res.events)
	if res.err != nil || n < 2 || res.events[n-1].Kind != protocol.KindDone {
		return false
	}
	for _, ev := range res.events {
		if ev.Kind == protocol.KindChunk && strings.Contains(string(ev.Data), `"done"`) {
			return true
		}
	}
	return false
}

// TestFallback: once the retries of a failure safe to retry are spent
// before any byte reached the client, the request goes to the fallback
// model on its upstream, named in X-Phasegate-Fallback-Model, on both
// strategies; a failure not safe to retry, or one after bytes, does not
// fall back.
func TestFallback(t *testing.T) {
	answer := streamReply(stream().Role().Content("done").Finish("stop").Done())
	busy := reply{sendErr: &protocol.UpstreamError{Status: 503, Header: http.Header{}}}
	bad := reply{sendErr: &protocol.UpstreamError{Status: 400, Header: http.Header{}}}
	tests := []struct {
		name          string
		first         []reply
		fallbackCalls int
		wantFallback  bool
	}{
		{name: "503 after its retry", first: []reply{busy, busy}, fallbackCalls: 1, wantFallback: true},
		{name: "400 never falls back", first: []reply{bad}, fallbackCalls: 0},
	}
	for _, tt := range tests {
		for _, s := range []protocol.Strategy{protocol.Standard{}, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)} {
			t.Run(s.Name()+"/"+tt.name, func(t *testing.T) {
				first := newUpstream(t, tt.first...)
				fb := newUpstream(t, answer)
				x := exchange(newRequest(t, true, history(), ""), first, protocol.Limits{})
				x.Retry = protocol.Retry{Attempts: 1, Base: time.Millisecond}
				x.Fallback = &protocol.Fallback{Model: "backup-model", Upstream: fb}
				res := run(t, s, x)
				if got := len(fb.sent()); got != tt.fallbackCalls {
					t.Fatalf("fallback calls = %d, want %d", got, tt.fallbackCalls)
				}
				if !tt.wantFallback {
					if res.err == nil {
						t.Errorf("no error, want the first upstream's")
					}
					return
				}
				if !answered(res) {
					t.Fatalf("events %v (error %v), want the fallback's answer", kinds(res.events), res.err)
				}
				if m := fb.sent()[0].Model; m != "backup-model" {
					t.Errorf("fallback got model %q, want backup-model", m)
				}
				if h := res.events[0].Header.Get("X-Phasegate-Fallback-Model"); h != "backup-model" {
					t.Errorf("X-Phasegate-Fallback-Model = %q, want backup-model", h)
				}
			})
		}
	}
}

// TestFallbackReasks: the guard's later calls of a request that fell back
// go to the fallback model too.
func TestFallbackReasks(t *testing.T) {
	dup := streamReply(stream().Role().ToolCall(0, "c9", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Done())
	answer := streamReply(stream().Role().Content("done").Finish("stop").Done())
	first := newUpstream(t, reply{sendErr: &protocol.UpstreamError{Status: 502, Header: http.Header{}}})
	fb := newUpstream(t, dup, answer)
	x := exchange(newRequest(t, true, history(ran("c1", "read_file", `{"path":"a.go"}`)), ""), first, protocol.Limits{})
	x.Fallback = &protocol.Fallback{Model: "backup-model", Upstream: fb}
	read(t, run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), x))
	sent := fb.sent()
	if len(sent) != 2 || sent[0].Model != "backup-model" || sent[1].Model != "backup-model" {
		t.Errorf("fallback calls %d, want the call and its re-ask, both to backup-model", len(sent))
	}
}
