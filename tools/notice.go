package tools

import "fmt"

// Notice texts, kept verbatim: agents and their tests match them, and the
// final instruction is the one given when refused duplicates run out.
const (
	duplicateText         = "Duplicate tool call detected (already executed in this turn). Do NOT call this tool again. Use previous results."
	cycleBudgetText       = "Maximum tool execution cycles (%d) reached. Provide final answer without further tool calls."
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
}

// RefusalsLeft returns how many more calls may be refused before the
// final answer is forced, never below 0.
func (b Budget) RefusalsLeft() int { return max(b.MaxRefused-b.Refused, 0) }

func (b Budget) suffix(rule string) string {
	return fmt.Sprintf(" (rule: %s; tool executions used: %d of %d; refused attempts left: %d of %d)",
		rule, b.Executions, b.MaxExecutions, b.RefusalsLeft(), b.MaxRefused)
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
		why = "its last two identical runs gave the same result"
		if j.Variant {
			why = "its last two runs, the same but for form, gave the same result"
		}
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
	return fmt.Sprintf("tool runs of this turn used up (%d of %d): the model answers now, without tools.", b.Executions, b.MaxExecutions)
}

// CycleBudgetNotice returns the final instruction injected when the turn
// has used its MAX_PHASE_CYCLES tool executions (b.MaxExecutions).
func CycleBudgetNotice(b Budget) string {
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
	if progressive {
		repeat = "repeat a tool call only when something changed since its last run; a call that returned the same result twice, even written differently, is refused"
	}
	return fmt.Sprintf("%s call at most one tool per response (further calls are dropped); %s; "+
		"at most %d tool executions in this turn (%d used), then you must answer without tools; "+
		"after %d refused calls you must answer without tools. When you have what you need, answer. (profile: %s)",
		RulesNoticeLead, repeat, b.MaxExecutions, b.Executions, b.MaxRefused, profile)
}
