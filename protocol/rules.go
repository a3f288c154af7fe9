package protocol

import (
	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/tools"
)

// guardRules are the rules one request is judged by, built once, here,
// for the guard (guardRun) and observe mode (Observe) alike, so observe
// counts what enforce would do: the turn's budgets (progressRule, whose
// profile, budgets and ledger the request reads too) and the call policy
// on the turn's ledger.
type guardRules struct {
	progressRule
	// allow is the plan-mode allowlist, nil outside plan mode; non-nil and
	// empty when plan mode has no allowlist, which allows nothing.
	allow []string
	calls callRule
}

// rulesFor builds the rules of x on the turn history holds.
func (g *TwoStage) rulesFor(x *Exchange, history []chat.Message) guardRules {
	r := guardRules{progressRule: progressRule{profile: g.cfg.Profile, maxCycles: g.cfg.MaxPhaseCycles, maxRefusals: g.cfg.MaxDuplicateAttempts}}
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
	r.calls = callRule{policy: r.policy}
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
