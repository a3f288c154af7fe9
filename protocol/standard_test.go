package protocol_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/protocol"
)

// TestStandard: the pass-through forwards every event byte for byte, in
// order, and tells a finished stream from a truncated one.
func TestStandard(t *testing.T) {
	full := stream().Role().Content("Hel", "lo").Raw(vendorChunk).Finish("stop").Usage(1, 2, map[string]any{"prompt_cache_hit_tokens": 1}).Done()
	tests := []struct {
		name    string
		up      reply
		wantErr error // nil: the run ends cleanly
		// wantDone is whether [DONE] reaches the consumer.
		wantDone bool
	}{
		{name: "a finished stream", up: streamReply(full), wantDone: true},
		{name: "a finish reason without [DONE]", up: streamReply(stream().Role().Content("hi").Finish("length"))},
		{name: "[DONE] without a finish reason", up: streamReply(stream().Role().Content("hi").Done()), wantDone: true},
		{name: "cut off", up: streamReply(stream().Role().Content("hi")), wantErr: protocol.ErrTruncated},
		{name: "a read error", up: reply{data: streamReply(stream().Role().Content("hi")).data, readErr: errRead}, wantErr: errRead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, tt.up)
			req := newRequest(t, true, history(), "")
			res := run(t, protocol.Standard{}, exchange(req, u, protocol.Limits{}))
			if !errors.Is(res.err, tt.wantErr) || (tt.wantErr == nil) != (res.err == nil) {
				t.Errorf("error = %v, want %v", res.err, tt.wantErr)
			}
			if len(res.events) == 0 || res.events[0].Kind != protocol.KindStart || res.events[0].Header.Get("X-Upstream") != "fake" {
				t.Fatalf("first event is not the start with the upstream's headers: %v", kinds(res.events))
			}
			var got []string
			for _, ev := range res.events[1:] {
				switch ev.Kind {
				case protocol.KindChunk:
					got = append(got, string(ev.Data))
				case protocol.KindDone:
					got = append(got, "[DONE]")
				default:
					t.Errorf("unexpected %q event", ev.Kind)
				}
			}
			if diff := cmp.Diff(tt.up.data, got); diff != "" {
				t.Errorf("events (-upstream +consumer):\n%s", diff)
			}
			if sent := u.sent(); len(sent) != 1 || string(sent[0].Encode()) != string(req.Encode()) {
				t.Errorf("the upstream did not get the client's request unchanged")
			}
			u.checkClosed(t)
		})
	}
}

// TestStandardNonStreaming: a non-streaming answer is one response event,
// and an upstream error is returned as it came.
func TestStandardNonStreaming(t *testing.T) {
	body := []byte(`{"id":"x","object":"chat.completion","choices":[],"x_vendor":1}`)
	res := run(t, protocol.Standard{}, exchange(newRequest(t, false, history(), ""), newUpstream(t, reply{body: body}), protocol.Limits{}))
	if res.err != nil || len(res.events) != 1 || res.events[0].Kind != protocol.KindResponse || string(res.events[0].Data) != string(body) {
		t.Errorf("events = %v, err = %v; want one response event with the body as it came", kinds(res.events), res.err)
	}
	ue := &protocol.UpstreamError{Status: http.StatusBadRequest}
	res = run(t, protocol.Standard{}, exchange(newRequest(t, false, history(), ""), newUpstream(t, reply{sendErr: ue}), protocol.Limits{}))
	var got *protocol.UpstreamError
	if !errors.As(res.err, &got) || got.Status != http.StatusBadRequest {
		t.Errorf("error = %v, want the *protocol.UpstreamError", res.err)
	}
}

// TestStandardConsumerStops: leaving the range closes the upstream.
func TestStandardConsumerStops(t *testing.T) {
	u := newUpstream(t, streamReply(stream().Role().Content("a", "b", "c").Finish("stop").Done()))
	n := 0
	s := protocol.Standard{}
	for _, err := range s.Run(context.Background(), exchange(newRequest(t, true, history(), ""), u, protocol.Limits{})) {
		if err != nil {
			t.Fatalf("error = %v, want none", err)
		}
		if n++; n == 2 {
			break
		}
	}
	u.checkClosed(t)
	// The opening chunk goes out at once, so the consumer leaving at it
	// has seen one upstream event.
	if r := u.response(t, 0); r.read != 1 {
		t.Errorf("upstream events read = %d, want 1: nothing after the consumer left", r.read)
	}
}

// TestStandardTransient: an answer that ends transiently before anything
// was said is retried unseen, up to MaxTransientRetries times; after that,
// or once something was said, the upstream's reason is passed on as it
// came. The client gets one opening chunk, the first answer's, sent at
// once; the chunks of an answer asked again after it are marked Again.
func TestStandardTransient(t *testing.T) {
	busy := streamReply(stream().Role().Finish(protocol.FinishInsufficientResource).Done())
	cut := streamReply(stream().Role())
	good := streamReply(stream().Role().Content("hi").Finish("stop").Done())
	late := streamReply(stream().Role().Content("half").Finish(protocol.FinishInsufficientResource).Done())
	tests := []struct {
		name     string
		replies  []reply
		want     reply // what the consumer gets
		wantErr  error
		wantSent int
	}{
		{name: "busy, then an answer", replies: []reply{busy, good}, want: good, wantSent: 2},
		{name: "cut at the opening, then an answer", replies: []reply{cut, good}, want: good, wantSent: 2},
		{name: "busy past the retries: passed on", replies: []reply{busy, busy, busy}, want: busy, wantSent: 3},
		{name: "cut past the retries: truncated", replies: []reply{cut, cut, cut}, wantErr: protocol.ErrTruncated, wantSent: 3},
		{name: "busy after text: passed on, no retry", replies: []reply{late}, want: late, wantSent: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, tt.replies...)
			res := run(t, protocol.Standard{}, exchange(newRequest(t, true, history(), ""), u, protocol.Limits{}))
			if !errors.Is(res.err, tt.wantErr) || (tt.wantErr == nil) != (res.err == nil) {
				t.Errorf("error = %v, want %v", res.err, tt.wantErr)
			}
			var got []string
			starts, again := 0, 0
			for _, ev := range res.events {
				switch ev.Kind {
				case protocol.KindStart:
					starts++
				case protocol.KindChunk:
					got = append(got, string(ev.Data))
					if ev.Again {
						again++
					}
				case protocol.KindDone:
					got = append(got, "[DONE]")
				}
			}
			if starts != 1 {
				t.Errorf("start events: got %d, want 1", starts)
			}
			// The first answer's opening, then the answer that stood less
			// its own.
			want := []string{tt.replies[0].data[0]}
			if tt.wantErr == nil {
				want = append(want, tt.want.data[1:]...)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("events (-want +consumer):\n%s", diff)
			}
			wantAgain := 0 // every chunk after the opening, when retried
			if len(tt.replies) > 1 && tt.wantErr == nil {
				wantAgain = len(want) - 2 // less the opening and [DONE]
			}
			if again != wantAgain {
				t.Errorf("chunks marked Again: got %d, want %d", again, wantAgain)
			}
			if n := len(u.sent()); n != tt.wantSent {
				t.Errorf("upstream calls: got %d, want %d", n, tt.wantSent)
			}
		})
	}
}

// TestStandardTransientNonStreaming: a whole answer that ended with
// insufficient_system_resource is retried before anything is written, up
// to MaxTransientRetries times; then it is passed on as it came.
func TestStandardTransientNonStreaming(t *testing.T) {
	body := func(finish string) reply {
		return reply{body: []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"` + finish + `"}]}`)}
	}
	busy, good := body(protocol.FinishInsufficientResource), body("stop")
	tests := []struct {
		name     string
		replies  []reply
		want     reply
		wantSent int
	}{
		{name: "busy, then an answer", replies: []reply{busy, good}, want: good, wantSent: 2},
		{name: "busy past the retries: passed on", replies: []reply{busy, busy, busy}, want: busy, wantSent: 3},
		{name: "an answer at once", replies: []reply{good}, want: good, wantSent: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, tt.replies...)
			res := run(t, protocol.Standard{}, exchange(newRequest(t, false, history(), ""), u, protocol.Limits{}))
			if res.err != nil {
				t.Fatalf("error = %v, want none", res.err)
			}
			if len(res.events) != 1 || res.events[0].Kind != protocol.KindResponse || string(res.events[0].Data) != string(tt.want.body) {
				t.Errorf("events = %v, want one response event with %s", kinds(res.events), tt.want.body)
			}
			if n := len(u.sent()); n != tt.wantSent {
				t.Errorf("upstream calls: got %d, want %d", n, tt.wantSent)
			}
		})
	}
}
