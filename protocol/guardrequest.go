package protocol

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/tools"
)

// The upstream request of each internal call of the guard, and the
// headers of its response.

// withRules appends history to msgs with the rules notice, when on,
// after its leading system messages: the model reads the rules before the
// conversation, and the notice never enters the client's history.
func (r *guardRun) withRules(msgs, history []chat.Message) []chat.Message {
	if r.rules == "" {
		return append(msgs, history...)
	}
	i := 0
	for i < len(history) && history[i].Role == chat.RoleSystem {
		i++
	}
	msgs = append(msgs, history[:i]...)
	msgs = append(msgs, chat.NewMessage(chat.RoleSystem, r.rules))
	return append(msgs, history[i:]...)
}

// upstreamRequest builds the request of one internal call and counts it:
// the client's request as the proxy fitted it, made to stream with usage
// (unless the guard asks for a whole answer), plus what the guard appended, fitted again when anything was appended or
// tools were taken away.
func (r *guardRun) upstreamRequest(final bool) (*chat.Request, Prompt, error) {
	req := r.x.Request.Clone()
	if !r.whole() {
		if err := streamWithUsage(req); err != nil {
			return nil, Prompt{}, err
		}
	}
	if len(r.extra) > 0 || r.rules != "" {
		msgs := make([]chat.Message, 0, len(req.Messages)+len(r.extra)+1)
		req.SetMessages(append(r.withRules(msgs, req.Messages), r.extra...))
	}
	switch {
	case final:
		// The forced final answer: no tools to call, nothing forcing one.
		req.SetTools(nil)
		req.Delete("tool_choice")
		req.Delete("parallel_tool_calls")
	case r.x.Limits.Plan:
		// The same non-nil allowlist the policy judges by: FilterTools
		// reads nil as "no plan mode" and would show every tool.
		req.SetTools(tools.FilterTools(req.Tools, r.allow))
		if len(req.Tools) == 0 {
			req.Delete("tool_choice")
			req.Delete("parallel_tool_calls")
		}
	}
	if r.x.Tokens == nil || len(r.extra) == 0 && r.rules == "" && !final && !r.x.Limits.Plan {
		return req, r.x.Prompt, nil
	}
	// What the guard appended must fit too: the history makes room,
	// oldest first; the notices are system messages and stay.
	p, err := r.x.Tokens.Fit(req)
	return req, p, err
}

// whole reports whether the guard asks the upstream for whole answers:
// WholeAnswers, for a client that asked for one.
func (r *guardRun) whole() bool { return r.g.cfg.WholeAnswers && !r.x.Request.Stream }

// streamWithUsage makes req a stream that reports its usage.
func streamWithUsage(req *chat.Request) error {
	if err := req.Set("stream", true); err != nil {
		return &GuardError{Err: fmt.Errorf("build upstream request: %w", err)}
	}
	so := map[string]json.RawMessage{}
	if raw, ok := req.Field("stream_options"); ok {
		_ = json.Unmarshal(raw, &so) // a non-object is replaced
	}
	so["include_usage"] = json.RawMessage("true")
	if err := req.Set("stream_options", so); err != nil {
		return &GuardError{Err: fmt.Errorf("build upstream request: %w", err)}
	}
	return nil
}

// headers are the upstream's headers plus the phase metadata known up
// front.
func (r *guardRun) headers(up http.Header) http.Header {
	h := up.Clone()
	h.Set("X-Phasegate-Phase", string(r.phase))
	h.Set("X-Phasegate-Phase-Index", strconv.Itoa(r.phaseIndex))
	h.Set("X-Phasegate-Cycle-Index", strconv.Itoa(r.ledger.CycleIndex()))
	h.Set("X-Phasegate-Max-Phase-Cycles", strconv.Itoa(r.maxCycles))
	h.Set("X-Phasegate-Max-Duplicate-Attempts", strconv.Itoa(r.maxRefusals))
	h.Set("X-Phasegate-Guard-Profile", string(r.profile))
	if r.x.ProjectID != "" {
		h.Set("X-Phasegate-Project-Id", r.x.ProjectID)
	}
	return h
}
