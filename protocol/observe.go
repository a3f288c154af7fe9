package protocol

import (
	"context"
	"fmt"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/tools"
)

// Mode is whether the guard acts on its verdicts, as GUARD_MODE spells it.
type Mode string

// Modes.
const (
	// ModeEnforce: the guard refuses, re-asks, injects its notices and
	// forces the final answer (the two-stage protocol of TwoStage). The
	// default.
	ModeEnforce Mode = "enforce"
	// ModeObserve: the request is passed through unchanged; the guard
	// judges the calls the client executed and counts and traces what it
	// would have decided (TwoStage.Observe).
	ModeObserve Mode = "observe"
)

// ParseMode reads a mode's name; "" is not one.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeEnforce, ModeObserve:
		return m, nil
	}
	return "", fmt.Errorf("must be %s or %s, got %q", ModeEnforce, ModeObserve, s)
}

// VerdictOverCycleBudget is the would-be verdict of a call executed when
// the turn had already spent its cycle budget: enforcing, the guard would
// have forced the final answer instead of letting the model call it.
const VerdictOverCycleBudget = "over_cycle_budget"

// Observed is the would-be verdict of one executed call.
type Observed struct {
	Call    chat.ToolCall
	Verdict string
	Reason  string
}

// Observe judges, without acting, the tool calls of the request's last
// assistant message that the client executed (a tool message of the
// request answers them): each as the guard would have judged it when the
// model made it, against the turn before that message, under the
// request's profile and limits. A call made when the turn had spent its
// cycle budget is VerdictOverCycleBudget. Every verdict is counted
// (metrics.ObservedToolCall) and traced; the request is not changed.
// Judging the calls once they come back keeps observe mode stateless and
// its traffic byte for byte what the upstream and the client sent: a call
// the client never ran is never judged.
func (g *TwoStage) Observe(ctx context.Context, x *Exchange) []Observed {
	history := x.History
	if history == nil {
		history = x.Request.Messages
	}
	last := lastCallMessage(history)
	if last < 0 {
		return nil
	}
	profile, maxCycles := g.cfg.Profile, g.cfg.MaxPhaseCycles
	if x.Limits.Profile != "" {
		profile = x.Limits.Profile
	}
	if profile == ProfileAgent {
		maxCycles = g.cfg.AgentMaxPhaseCycles
	}
	if n := x.Limits.MaxPhaseCycles; n > 0 && n < maxCycles {
		maxCycles = n
	}
	var allow []string
	if x.Limits.Plan {
		allow = append([]string{}, g.cfg.PlanTools...)
	}
	before := tools.NewLedger(x.ProjectID, history[:last])
	policy := tools.NewPolicy(x.Request.Tools, allow, before).Repeatable(g.cfg.RepeatableTools)
	if profile == ProfileAgent {
		policy.Progressive()
	}
	executed := map[string]bool{}
	for _, e := range tools.NewLedger(x.ProjectID, history).Executed()[before.CycleIndex():] {
		executed[e.Call.ID] = true
	}
	var out []Observed
	for _, tc := range history[last].ToolCalls {
		if !executed[tc.ID] {
			continue
		}
		o := Observed{Call: tc}
		if before.CycleIndex() >= maxCycles {
			o.Verdict, o.Reason = VerdictOverCycleBudget, fmt.Sprintf("the turn had spent its %d tool executions (MAX_PHASE_CYCLES)", maxCycles)
		} else {
			j := policy.Judge(tc)
			logSchemaErr(ctx, x.RequestID, j)
			o.Verdict, o.Reason = string(j.Verdict), j.Reason
		}
		g.cfg.Metrics.ObservedToolCall(o.Verdict)
		g.tracer.Trace(ctx, metrics.Trace{Kind: metrics.TraceObservedToolCall, RequestID: x.RequestID, ProjectID: x.ProjectID,
			CycleIndex: before.CycleIndex(), Tool: tc.Function.Name, ToolCallID: tc.ID, Verdict: o.Verdict, Reason: o.Reason})
		out = append(out, o)
	}
	return out
}

// lastCallMessage is the index of the last assistant message of the turn
// when it holds tool calls, else -1.
func lastCallMessage(history []chat.Message) int {
	for i := len(history) - 1; i >= 0 && history[i].Role != chat.RoleUser; i-- {
		if history[i].Role == chat.RoleAssistant {
			if len(history[i].ToolCalls) == 0 {
				return -1
			}
			return i
		}
	}
	return -1
}
