package protocol

import (
	"github.com/phasegate/phasegate/envelope"
	"github.com/phasegate/phasegate/tools"
)

// guardRule is one rule of the guard: it judges a step of an upstream answer,
// with what it may read of the request (view), and returns its decision.
// Both are passed by pointer, not to copy them on every step, and are
// read only; nil is actPass, so that the steps no rule stops (most text)
// cost no decision. A rule writes nothing, counts nothing and changes nothing of
// the request: the guard loop (guardRun.apply) acts on the decision. The rules
// are the call policy (callRule), the turn's budgets by progress
// (progressRule), the orchestrator envelope (envelopeRule) and degenerate
// text (degenerateScan); each lives in a file of its own.
type guardRule interface {
	judge(st *Step, v *view) *decision
	// labels are the labels the rule's decisions carry, and the values
	// the label of the metric that counts them allows: every one of the
	// first must be one of the second, or a decision would go uncounted.
	labels() (decided, counted []string)
}

// allRules lists one value of each rule of the guard, for what holds of
// them all (every label a decision carries is counted): a new rule is
// added here.
func allRules() []guardRule {
	return []guardRule{callRule{}, progressRule{}, envelopeRule{}, &degenerateScan{}}
}

// view is what a rule may read besides the step; it is read only.
type view struct {
	// final: the answer is the forced final one, whose calls are dropped.
	final bool
	// refused is the number of calls refused so far in the request.
	refused int
	// cut: an answer of the request was cut for degenerate text already.
	cut bool
	// env is where the envelope rule stands in the request.
	env envelopeState
	// said is the answer's content so far, for the keyword fallback; nil
	// outside the envelope rule.
	said interface{ content() string }
}

// act is what the guard does on a decision.
type act uint8

const (
	// actPass: nothing decided; the step goes on as it would (text is
	// written, the finish written).
	actPass act = iota
	// actHold: the step is held for what follows (an envelope open at a
	// call or the finish).
	actHold
	// actWrite: text is written in place of the step (an envelope as
	// forwarded), and the decision counted.
	actWrite
	// actReport: the decision is counted (and its report kept); then the
	// step goes on as it would.
	actReport
	// actForward: the call is forwarded and the response ends.
	actForward
	// actRefuse: the call is refused with its verdict's notice, and the
	// model asked again.
	actRefuse
	// actDrop: the call of the forced final answer is dropped.
	actDrop
	// actReask: the answer is stopped (read on to its usage at the
	// finish) and the model asked again with the notice.
	actReask
	// actCut: the answer is stopped at once; the model is asked again
	// with the notice or, final, the response finished with it.
	actCut
	// actFinal: a budget is spent: the notice, then one final answer with
	// no tools.
	actFinal
)

// decision is a rule's verdict on a step. Each act sets the fields its
// rule's comment names.
type decision struct {
	act act
	// label is the value the decision is counted under in its rule's
	// metric; "" counts nothing.
	label string
	// reason says why, for the trace.
	reason string
	// notice is the text for the model, shown the line for the client
	// ("" shows nothing).
	notice, shown string
	// final: the response ends with the decision (actCut).
	final bool
	// judgement is the call policy's (actForward, actRefuse).
	judgement tools.Judgement
	// envelope is the envelope judged (the envelope rule's acts); report
	// the verdict kept for the phase metadata, nil to keep the one
	// before; text the envelope as forwarded (actWrite).
	envelope *envelope.Result
	report   *EnvelopeReport
	text     string
	// field is the field whose text became degenerate (actCut).
	field string
}
