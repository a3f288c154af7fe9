package protocol_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/protocol"
)

// benchUpstream answers every Send with the same prebuilt stream and
// records nothing but how many events were handed over. When mark is set
// it is called just before the event at index markAt is handed over.
type benchUpstream struct {
	data   [][]byte
	read   int
	markAt int
	mark   func()
}

func (u *benchUpstream) Send(context.Context, *chat.Request) (*protocol.Response, error) {
	return &protocol.Response{
		Status: http.StatusOK,
		Header: http.Header{"Content-Type": {"text/event-stream"}},
		Events: func(yield func([]byte, error) bool) {
			for i, d := range u.data {
				if u.mark != nil && i == u.markAt {
					u.mark()
				}
				u.read++
				if !yield(d, nil) {
					return
				}
			}
		},
		Close: func() {},
	}, nil
}

func benchData(r reply) [][]byte {
	out := make([][]byte, len(r.data))
	for i, d := range r.data {
		out[i] = []byte(d)
	}
	return out
}

// benchStreams are the upstream answers both strategies serve: a
// 200-chunk text answer, and an answer that reasons, says a little and
// makes a parallel burst of calls.
func benchStreams() (text, tool reply, lastArgs int) {
	s := stream().Role()
	for range 197 {
		s.Content("word ")
	}
	text = streamReply(s.Finish("stop").Usage(1000, 197, map[string]any{"prompt_cache_hit_tokens": 900}).Done())

	s = stream().Role()
	for range 20 {
		s.Reasoning("think ")
	}
	for range 10 {
		s.Content("say ")
	}
	pieces := []string{`{"path":"`}
	for range 18 {
		pieces = append(pieces, "dir/")
	}
	pieces = append(pieces, `a.go"}`)
	s.ToolCall(0, "call_a", "read_file", pieces...)
	lastArgs = len(streamReply(s).data) - 1 // the event that completes call 0
	s.ToolCall(1, "call_b", "read_file", `{"path":"b.go"}`).Finish("tool_calls").Usage(1000, 50, nil).Done()
	tool = streamReply(s)
	return text, tool, lastArgs
}

// BenchmarkStrategy measures the CPU cost of serving one request, and of
// each upstream chunk read, for the guard and the pass-through on the same
// streams. The upstream is in process, so the figures are the strategies'
// own work: decoding, judging, re-encoding.
func BenchmarkStrategy(b *testing.B) {
	text, tool, _ := benchStreams()
	strategies := []protocol.Strategy{protocol.Standard{}, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)}
	for _, st := range []struct {
		name string
		r    reply
	}{{"text-200", text}, {"tool-call", tool}} {
		for _, s := range strategies {
			b.Run(st.name+"/"+s.Name(), func(b *testing.B) {
				u := &benchUpstream{data: benchData(st.r)}
				req := newRequest(b, true, history(ran("c1", "list_dir", `{}`)), `"stream_options":{"include_usage":true}`)
				x := exchange(req, u, protocol.Limits{})
				ctx := context.Background()
				b.ReportAllocs()
				iterations := 0
				for b.Loop() {
					iterations++
					for _, err := range s.Run(ctx, x) {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				elapsed := b.Elapsed()
				b.ReportMetric(float64(elapsed.Nanoseconds())/float64(u.read), "ns/chunk")
				b.ReportMetric(float64(u.read)/float64(iterations), "chunks/op")
			})
		}
	}
}

// BenchmarkForwardDelay measures the delay between the upstream handing
// over the delta that completes a tool call and the consumer receiving
// the call: the pass-through forwards that delta as it is, the guard
// judges the call and writes it as one chunk.
func BenchmarkForwardDelay(b *testing.B) {
	_, tool, lastArgs := benchStreams()
	data := benchData(tool)
	tests := []struct {
		s protocol.Strategy
		// arrived reports whether the event carries the completed call.
		arrived func(ev protocol.Event) bool
	}{
		{protocol.Standard{}, func(ev protocol.Event) bool { return bytes.Equal(ev.Data, data[lastArgs]) }},
		{protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), func(ev protocol.Event) bool {
			return bytes.Contains(ev.Data, []byte(`"tool_calls"`))
		}},
	}
	for _, tt := range tests {
		b.Run(tt.s.Name(), func(b *testing.B) { benchForward(b, tt.s, data, lastArgs, tt.arrived) })
	}
}

// benchForward runs s over data and reports the mean time from the
// upstream handing over event markAt to the consumer getting the event
// arrived recognises.
func benchForward(b *testing.B, s protocol.Strategy, data [][]byte, markAt int, arrived func(protocol.Event) bool) {
	var sent time.Time
	u := &benchUpstream{data: data, markAt: markAt, mark: func() { sent = time.Now() }}
	x := exchange(newRequest(b, true, history(), ""), u, protocol.Limits{})
	ctx := context.Background()
	var total time.Duration
	iterations := 0
	for b.Loop() {
		iterations++
		found := false
		for ev, err := range s.Run(ctx, x) {
			if err != nil {
				b.Fatal(err)
			}
			if !found && ev.Kind == protocol.KindChunk && arrived(ev) {
				total += time.Since(sent)
				found = true
			}
		}
		if !found {
			b.Fatal("the awaited event never reached the consumer")
		}
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(iterations), "ns/forward")
}

// TestBenchStreams keeps the benchmark inputs honest: the guard forwards
// the first call whole, where the benchmark expects it.
func TestBenchStreams(t *testing.T) {
	text, tool, lastArgs := benchStreams()
	if n := len(text.data); n != 201 {
		t.Errorf("text stream has %d events, want 200 chunks and [DONE]", n)
	}
	u := newUpstream(t, tool)
	a := read(t, run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), exchange(newRequest(t, true, history(), ""), u, protocol.Limits{})))
	if len(a.calls) != 1 || a.calls[0].Function.Arguments != `{"path":"`+strings.Repeat("dir/", 18)+`a.go"}` {
		t.Fatalf("forwarded calls = %+v, want call_a whole", a.calls)
	}
	if got := u.response(t, 0).read; got != lastArgs+1 {
		t.Errorf("the guard read %d events, want %d: up to the one completing the call", got, lastArgs+1)
	}
}
