package proxy

import (
	"context"
	"time"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/protocol/chat"
	"github.com/phasegate/phasegate/tokens"
)

// timedUpstream records how long each upstream call took to answer.
type timedUpstream struct {
	next     protocol.Upstream
	m        *metrics.Metrics
	provider string
}

func (u *timedUpstream) Send(ctx context.Context, req *chat.Request) (*protocol.Response, error) {
	start := time.Now()
	resp, err := u.next.Send(ctx, req)
	if err == nil {
		u.m.UpstreamAnswered(u.provider, time.Since(start))
	}
	return resp, err
}

// requestMeter is the protocol.Meter of one request: it counts the tokens
// of every upstream call by source, the failures by the kind the failure
// table gives them, and learns the tokenizer's error from reported usage.
type requestMeter struct {
	m        *metrics.Metrics
	provider string
	model    string
	// tokens learns from the prompt_tokens upstreams report for prompts
	// the gateway counted; nil, or learn false (the simulated model, whose
	// counts are no tokenizer's), learns nothing.
	tokens *tokens.Counter
	learn  bool
}

func (r *requestMeter) Usage(u protocol.Usage) {
	r.m.Tokens(r.provider, u.PromptTokens, u.CompletionTokens, u.Estimated)
	if r.learn && r.tokens != nil && !u.Estimated && u.Prompt.Counted > 0 {
		r.tokens.Observe(r.model, u.Prompt.Counted, u.PromptTokens)
	}
}

func (r *requestMeter) Failed(err error) {
	if kind := protocol.Classify(err).UpstreamKind; kind != "" {
		r.m.UpstreamFailed(r.provider, kind)
	}
}
