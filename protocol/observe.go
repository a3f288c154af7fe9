package protocol

import (
	"context"
	"fmt"
	"slices"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
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
// model made it, under the request's profile and limits, against the turn
// before that message and the calls of the message before it (the guard
// forwards one call per response, so a parallel message's calls reach it
// one after another: the second of two identical calls is a repeat). A
// call made when the turn had spent its cycle budget is
// VerdictOverCycleBudget. Every verdict is counted
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
	results := map[string]chat.Message{}
	for _, m := range history[last+1:] {
		if _, seen := results[m.ToolCallID]; m.Role == chat.RoleTool && !seen {
			results[m.ToolCallID] = m
		}
	}
	var out []Observed
	ran := history[last]
	ran.ToolCalls = nil
	for _, tc := range history[last].ToolCalls {
		if _, executed := results[tc.ID]; !executed {
			continue
		}
		// The turn as the guard would have seen it: the calls of the
		// message before this one executed, with their results.
		before := append(append(slices.Clip(history[:last]), ran), toolResults(ran.ToolCalls, results)...)
		o := g.observeCall(ctx, x, g.rulesFor(x, before), tc)
		out = append(out, o)
		ran.ToolCalls = append(ran.ToolCalls, tc)
	}
	return out
}

// toolResults are the results of calls, in their order.
func toolResults(calls []chat.ToolCall, results map[string]chat.Message) []chat.Message {
	out := make([]chat.Message, 0, len(calls))
	for _, c := range calls {
		out = append(out, results[c.ID])
	}
	return out
}

// observeCall judges one executed call by rules, as the guard would (the
// progress rule, then the call policy), counts and traces its would-be
// verdict.
func (g *TwoStage) observeCall(ctx context.Context, x *Exchange, rules guardRules, tc chat.ToolCall) Observed {
	o := Observed{Call: tc}
	if d := rules.progressRule.judge(&Step{}, &view{}); d != nil && d.act == actFinal {
		o.Verdict, o.Reason = VerdictOverCycleBudget, fmt.Sprintf("the turn had spent its %d tool executions (%s)", rules.maxCycles, cycleBudgetName(rules.profile))
	} else {
		d := rules.calls.judge(&Step{Kind: StepCall, Call: &tc}, &view{})
		logSchemaErr(ctx, x.RequestID, d.judgement)
		o.Verdict, o.Reason = string(d.judgement.Verdict), d.judgement.Reason
	}
	g.cfg.Metrics.ObservedToolCall(o.Verdict)
	g.tracer.Trace(ctx, metrics.Trace{Kind: metrics.TraceObservedToolCall, RequestID: x.RequestID, ProjectID: x.ProjectID,
		CycleIndex: rules.ledger.CycleIndex(), Tool: tc.Function.Name, ToolCallID: tc.ID, Verdict: o.Verdict, Reason: o.Reason})
	return o
}

// cycleBudgetName is the setting of a profile's cycle budget.
func cycleBudgetName(p Profile) string {
	if p == ProfileAgent {
		return "AGENT_MAX_PHASE_CYCLES, counting those that brought nothing new"
	}
	return "MAX_PHASE_CYCLES"
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
