package protocol

import (
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/tools"
)

// The budgets a final answer is forced by, the budget label of
// phasegate_budget_exhausted_total (a session's are its own, package
// session's).
const (
	budgetCycles      = "MAX_PHASE_CYCLES"
	budgetAgentCycles = "AGENT_MAX_PHASE_CYCLES"
	budgetRefusals    = "MAX_DUPLICATE_ATTEMPTS"
)

// progressRule is the rule of the turn's budgets: the cycle budget, which
// under the agent profile counts only the executions that made no
// progress; the refusals one request may see; and, in enforce mode, a
// session's budget the request found spent. It judges the request as it
// stands, whatever the step: actFinal, labelled by the budget spent, with
// its notice; actPass while none is.
type progressRule struct {
	profile                Profile
	maxCycles, maxRefusals int
	ledger                 *tools.Ledger
	policy                 *tools.Policy
	// spent is the session's spent budget; nil when none is, and always
	// in observe mode, which judges the turn alone.
	spent *Spent
}

func (p progressRule) judge(_ *Step, v *view) *decision {
	if s := p.spent; s != nil {
		return &decision{act: actFinal, label: s.Budget, notice: s.Notice, shown: s.Shown}
	}
	b := p.budget(v.refused)
	if b.Executions >= b.MaxExecutions {
		budget := budgetCycles
		if b.NoProgress {
			budget = budgetAgentCycles
		}
		return &decision{act: actFinal, label: budget, notice: tools.CycleBudgetNotice(b), shown: tools.ShownCycleBudget(b)}
	}
	if v.refused >= p.maxRefusals {
		// The refusal's own line told the client the budget is spent.
		return &decision{act: actFinal, label: budgetRefusals, notice: tools.DuplicateExceededNotice(b)}
	}
	return nil
}

func (progressRule) labels() (decided, counted []string) {
	// A spent session's label is the session package's, one of
	// metrics.SessionCaps.
	return append([]string{budgetCycles, budgetAgentCycles, budgetRefusals}, metrics.SessionCaps...), metrics.Budgets
}

// used is what the turn spent of its cycle budget: every tool execution
// under the strict profile; under the agent profile only the executions
// that brought nothing new (tools.Policy.Stale), so that long real work
// is never cut and a loop the other rules miss still ends.
func (p progressRule) used() int {
	if p.profile == ProfileAgent {
		return p.policy.Stale()
	}
	return p.ledger.CycleIndex()
}

// budget is where the request stands, refused calls aside.
func (p progressRule) budget(refused int) tools.Budget {
	return tools.Budget{Executions: p.used(), MaxExecutions: p.maxCycles, Refused: refused, MaxRefused: p.maxRefusals,
		NoProgress: p.profile == ProfileAgent}
}
