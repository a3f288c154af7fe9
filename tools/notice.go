package tools

import "fmt"

// Notice texts, kept verbatim: agents and their tests match them, and the
// final instruction is the one given when refused duplicates run out.
const (
	duplicateText         = "Duplicate tool call detected (already executed in this turn). Do NOT call this tool again. Use previous results."
	cycleBudgetText       = "Maximum tool execution cycles (%d) reached. Provide final answer without further tool calls."
	noProgressBudgetText  = "Maximum tool executions without progress (%d) reached in this turn. Provide final answer without further tool calls."
	duplicateExceededText = "Maximum duplicate tool call attempts exceeded. Provide a final answer now using existing results ONLY. Do NOT call tools."
)

// Budget is where a request stands against its budgets, as every notice
// reports it.
type Budget struct {
	// Executions is the number of tool calls executed in the turn (the
	// cycle index); MaxExecutions is MAX_PHASE_CYCLES.
	Executions, MaxExecutions int
	// Refused is the number of calls refused in this client request,
	// counting the one the notice is about; MaxRefused is the retry budget,
	// MAX_DUPLICATE_ATTEMPTS.
	Refused, MaxRefused int
	// NoProgress: Executions counts only the executions that brought
	// nothing new (the agent profile's budget, AGENT_MAX_PHASE_CYCLES).
	NoProgress bool
}

// RefusalsLeft returns how many more calls may be refused before the
// final answer is forced, never below 0.
func (b Budget) RefusalsLeft() int { return max(b.MaxRefused-b.Refused, 0) }

func (b Budget) suffix(rule string) string {
	what := "tool executions"
	if b.NoProgress {
		what = "tool executions that brought nothing new"
	}
	return fmt.Sprintf(" (rule: %s; %s used: %d of %d; refused attempts left: %d of %d)",
		rule, what, b.Executions, b.MaxExecutions, b.RefusalsLeft(), b.MaxRefused)
}

// Notice returns the system notice injected after a refused call: what was
// wrong (j.Reason, which quotes no argument values), what to do instead,
// the rule and the budget left. It returns "" for VerdictForward.
func Notice(j Judgement, b Budget) string {
	var do string
	switch j.Verdict {
	case VerdictForward:
		return ""
	case VerdictDuplicate:
		return duplicateText + b.suffix(string(j.Verdict))
	case VerdictMalformed:
		do = "Send the call again with arguments that are one complete JSON object, or answer without it."
	case VerdictUndeclared:
		do = "Call only a declared tool, or answer without tools."
	case VerdictNoProgress:
		do = "Use the results you have, change something before running it again, or answer."
	case VerdictCycle:
		do = "Break the cycle: use the results you have, try something different, or answer."
	case VerdictFailingStreak:
		do = fmt.Sprintf("Its last error was: %q. Do not send it again as it is: fix the cause, try another way, or answer.", j.Quote)
	case VerdictNotAllowed:
		do = "Call only an allowed tool, or answer without tools."
	case VerdictSchemaInvalid:
		do = "Send the call again with arguments that match the tool's parameters schema, or answer without it."
	default:
		do = "The call was not executed."
	}
	return j.Reason + " " + do + b.suffix(string(j.Verdict))
}

// Shown returns the line a person reading the client's output is shown
// for a refused call, where the model gets Notice's full instruction: what
// was refused and why, and the refusals left; when none is left, that the
// model now answers without tools (no second line follows for that). It
// returns "" for VerdictForward.
func Shown(j Judgement, b Budget) string {
	var why string
	switch j.Verdict {
	case VerdictForward:
		return ""
	case VerdictDuplicate:
		why = "it already ran with the same arguments in this turn"
	case VerdictMalformed:
		why = "its arguments are not one complete JSON object"
	case VerdictUndeclared:
		why = "this request declares no such tool"
	case VerdictNoProgress:
		switch {
		case j.Wasted == 0: // the rule of REPEATABLE_TOOLS
			why = "its last two identical runs gave the same result"
		case j.Variant:
			why = fmt.Sprintf("its last runs, the same but for form, gave the same result, and the %d calls since anything new came back were wasted", j.Wasted)
		default:
			why = fmt.Sprintf("its last identical runs gave the same result, and the %d calls since anything new came back were wasted", j.Wasted)
		}
	case VerdictCycle:
		why = "it would go round a cycle of calls that keep returning the same results"
	case VerdictFailingStreak:
		why = fmt.Sprintf("it failed several times in a row with the same error: %q", j.Quote)
	case VerdictNotAllowed:
		why = "plan mode does not allow it"
	case VerdictSchemaInvalid:
		why = "its arguments do not match the tool's parameters"
	default:
		why = string(j.Verdict)
	}
	line := "refused a tool call: " + why
	if j.Tool != "" {
		line = fmt.Sprintf("refused %s: %s", QuoteName(j.Tool), why)
	}
	if left := b.RefusalsLeft(); left > 0 {
		return fmt.Sprintf("%s (%d of %d refusals left).", line, left, b.MaxRefused)
	}
	return fmt.Sprintf("%s. No refusals left (%d of %d used): the model answers now, without tools.", line, b.MaxRefused, b.MaxRefused)
}

// ShownCycleBudget returns the line the client is shown when the turn has
// used its MAX_PHASE_CYCLES tool executions, where the model gets
// CycleBudgetNotice.
func ShownCycleBudget(b Budget) string {
	if b.NoProgress {
		return fmt.Sprintf("tool runs of this turn that brought nothing new used up (%d of %d): the model answers now, without tools.", b.Executions, b.MaxExecutions)
	}
	return fmt.Sprintf("tool runs of this turn used up (%d of %d): the model answers now, without tools.", b.Executions, b.MaxExecutions)
}

// CycleBudgetNotice returns the final instruction injected when the turn
// has used its MAX_PHASE_CYCLES tool executions (b.MaxExecutions), or,
// under the agent profile, its AGENT_MAX_PHASE_CYCLES executions that
// brought nothing new.
func CycleBudgetNotice(b Budget) string {
	if b.NoProgress {
		return fmt.Sprintf(noProgressBudgetText, b.MaxExecutions) + b.suffix("AGENT_MAX_PHASE_CYCLES")
	}
	return fmt.Sprintf(cycleBudgetText, b.MaxExecutions) + b.suffix("MAX_PHASE_CYCLES")
}

// DuplicateExceededNotice returns the final instruction of the
// DuplicateExceeded contract, injected when the request has spent its
// refusal budget, MAX_DUPLICATE_ATTEMPTS (b.MaxRefused).
func DuplicateExceededNotice(b Budget) string {
	return duplicateExceededText + b.suffix("MAX_DUPLICATE_ATTEMPTS")
}

// RulesNoticeLead opens the rules notice, so a reader of a request can
// tell it from the notices about refused calls.
const RulesNoticeLead = "Tool-call rules of this gateway:"

// RulesNotice returns the system message that states the guard's rules
// and budgets to the model before any violation, beside the agent's own
// system prompt: one
// tool call per response, no repeated call in a turn (progressive: no
// repeat without new results, even in another form), the cycle budget
// and where the turn stands, the refusals a request may see, the profile.
func RulesNotice(profile string, progressive bool, b Budget) string {
	repeat := "do not repeat a tool call already executed in this turn with the same arguments; use its result"
	budget := "tool executions"
	if progressive {
		repeat = "repeat a tool call only when something changed since its last run; calls that keep returning the same results, even written differently or in a cycle, are refused, and so is a tool that keeps failing with the same error"
	}
	if b.NoProgress {
		budget = "tool executions that bring nothing new"
	}
	return fmt.Sprintf("%s call at most one tool per response (further calls are dropped); %s; "+
		"at most %d %s in this turn (%d used), then you must answer without tools; "+
		"after %d refused calls you must answer without tools. When you have what you need, answer. (profile: %s)",
		RulesNoticeLead, repeat, b.MaxExecutions, budget, b.Executions, b.MaxRefused, profile)
}

// DegenerateNotice is the notice injected after an answer was cut for
// repeating one phrase over and over; the repeated text is not sent back.
const DegenerateNotice = "Your last answer repeated the same text over and over, so it was cut off. Answer again, saying each thing once; if you are done, give your final answer now."

// ShownDegenerate returns the line the client is shown when an answer was
// cut for repeating itself: the model is asked once more, or, when final,
// the answer ends here.
func ShownDegenerate(final bool) string {
	if final {
		return "the answer repeated the same text over and over again and was cut: it ends here."
	}
	return "the answer repeated the same text over and over and was cut: the model is asked once more."
}
