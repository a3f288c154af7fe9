package proxy

import (
	"context"
	"iter"
	"time"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/pricing"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/tokens"
)

// timedUpstream records how long each upstream call took to answer, and
// adds every wait on the upstream to *wait: the time in Send (connecting,
// sending, waiting for the headers; for an answer that is not a stream,
// reading its body) and, for a stream, the time from each request for the
// next event to its arrival. What the consumer does with an event between
// two waits (judging, encoding, writing to the client) is not a wait. It
// is owned by one request, which reads *wait once the strategy is done.
type timedUpstream struct {
	next     protocol.Upstream
	m        *metrics.Metrics
	provider string
	wait     *time.Duration
	// trace, when set, gets a span for each call.
	trace *requestTrace
}

func (u *timedUpstream) Send(ctx context.Context, req *chat.Request) (*protocol.Response, error) {
	if u.trace != nil {
		ctx = u.trace.startCall(ctx, u.provider, req.Model)
	}
	start := time.Now()
	resp, err := u.next.Send(ctx, req)
	d := time.Since(start)
	*u.wait += d
	if err == nil {
		u.m.UpstreamAnswered(u.provider, d)
		if resp.Events != nil {
			resp.Events = timedEvents(resp.Events, u.wait)
		}
	}
	if u.trace != nil {
		u.traced(resp, err)
	}
	return resp, err
}

// traced follows the call's answer in its span: finish reasons, failure,
// the time it was released.
func (u *timedUpstream) traced(resp *protocol.Response, err error) {
	t := u.trace
	switch {
	case err != nil:
		t.callFailed(err)
		t.callClosed()
	case resp.Events != nil:
		// Outside the timing: reading finish reasons is the gateway's work.
		resp.Events = tracedEvents(resp.Events, t)
		release := resp.Close
		resp.Close = func() {
			release()
			t.callClosed()
		}
	default:
		t.callData(resp.Body)
		t.callClosed()
	}
}

// timedEvents adds to *wait the time each event of events took to come.
func timedEvents(events iter.Seq2[[]byte, error], wait *time.Duration) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		t := time.Now()
		for data, err := range events {
			*wait += time.Since(t)
			if !yield(data, err) {
				return
			}
			t = time.Now()
		}
		*wait += time.Since(t)
	}
}

// requestMeter is the protocol.Meter of one request: it counts the tokens
// of every upstream call by source, the failures by the kind the failure
// table gives them, and learns the tokenizer's error from reported usage.
type requestMeter struct {
	m *metrics.Metrics
	// door is the door label of the request (door.name).
	door     string
	provider string
	model    string
	// label is the model label of the request (metrics.ModelLabel).
	label string
	// trace, when set, gets the usage of each call.
	trace *requestTrace
	// tokens learns from the prompt_tokens upstreams report for prompts
	// the gateway counted; nil, or learn false (the simulated model, whose
	// counts are no tokenizer's), learns nothing.
	tokens *tokens.Counter
	learn  bool
	// spent sums the tokens, in and out, of every call, for the rate
	// limits.
	spent int
	// usage sums the tokens of every call, cache hits apart, and refused
	// lists the verdict of each call the guard refused: what the request's
	// session is charged and what the refusals saved (proxy/session.go).
	usage   pricing.Usage
	refused []string
}

// Refused is told of a tool call the guard did not forward.
func (r *requestMeter) Refused(verdict string) { r.refused = append(r.refused, verdict) }

func (r *requestMeter) Usage(u protocol.Usage) {
	r.spent += u.PromptTokens + u.CompletionTokens
	r.usage.Prompt += u.PromptTokens
	r.usage.CacheHit += u.CacheHitTokens
	r.usage.Completion += u.CompletionTokens
	r.m.Tokens(r.provider, u.PromptTokens, u.CompletionTokens, u.Estimated)
	r.m.ModelTokens(r.label, u.PromptTokens, u.CompletionTokens)
	r.trace.usage(u)
	if r.learn && r.tokens != nil && !u.Estimated && u.Prompt.Counted > 0 {
		r.tokens.Observe(r.model, u.Prompt.Counted, u.PromptTokens)
	}
}

func (r *requestMeter) Failed(err error) {
	if kind := protocol.Classify(err).UpstreamKind; kind != "" {
		r.m.UpstreamFailed(r.door, r.provider, kind)
	}
}
