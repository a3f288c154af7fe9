package protocol

import (
	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/tools"
)

// guardRules are the rules one request is judged by: its profile, its
// budgets, and the call policy on its turn's ledger. The guard
// (guardRun) and observe mode (Observe) build them the same way, here, so
// observe counts what enforce would do.
type guardRules struct {
	profile                Profile
	maxCycles, maxRefusals int
	// allow is the plan-mode allowlist, nil outside plan mode; non-nil and
	// empty when plan mode has no allowlist, which allows nothing.
	allow  []string
	ledger *tools.Ledger
	policy *tools.Policy
}

// rulesFor builds the rules of x on the turn history holds.
func (g *TwoStage) rulesFor(x *Exchange, history []chat.Message) guardRules {
	r := guardRules{profile: g.cfg.Profile, maxCycles: g.cfg.MaxPhaseCycles, maxRefusals: g.cfg.MaxDuplicateAttempts}
	if x.Limits.Profile != "" {
		r.profile = x.Limits.Profile
	}
	if r.profile == ProfileAgent {
		r.maxCycles = g.cfg.AgentMaxPhaseCycles
	}
	if n := x.Limits.MaxPhaseCycles; n > 0 && n < r.maxCycles {
		r.maxCycles = n
	}
	if n := x.Limits.MaxDuplicateAttempts; n > 0 && n < r.maxRefusals {
		r.maxRefusals = n
	}
	if x.Limits.Plan {
		r.allow = append([]string{}, g.cfg.PlanTools...)
	}
	r.ledger = tools.NewLedger(x.ProjectID, history)
	r.policy = g.policyOn(x, r.profile, r.allow, r.ledger)
	return r
}

// policyOn is the call policy of x under profile on ledger.
func (g *TwoStage) policyOn(x *Exchange, profile Profile, allow []string, ledger *tools.Ledger) *tools.Policy {
	p := tools.NewPolicy(x.Request.Tools, allow, ledger).Repeatable(g.cfg.RepeatableTools)
	switch {
	case profile == ProfileAgent:
		p.Progressive(tools.DefaultMaxWasted, g.cfg.MaxFailingStreak)
	case g.cfg.StrictDuplicates == DuplicatesResults:
		p.ResultDuplicates()
	}
	return p
}

// used is what the turn spent of its cycle budget: every tool execution
// under the strict profile; under the agent profile only the executions
// that brought nothing new (tools.Policy.Stale), so that long real work
// is never cut and a loop the other rules miss still ends.
func (r guardRules) used() int {
	if r.profile == ProfileAgent {
		return r.policy.Stale()
	}
	return r.ledger.CycleIndex()
}

// budget is where the request stands, refused calls aside.
func (r guardRules) budget(refused int) tools.Budget {
	return tools.Budget{Executions: r.used(), MaxExecutions: r.maxCycles, Refused: refused, MaxRefused: r.maxRefusals,
		NoProgress: r.profile == ProfileAgent}
}
