package protocol

import (
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/tools"
)

// verdictDropped is the label of a call of the forced final answer: it
// is dropped, not judged.
const verdictDropped = "dropped"

// callRule is the call policy: it judges the first complete call of an
// answer, native (StepCall) or written into the content (StepLeaked), by
// the request's tools.Policy (which, under the agent profile, holds the
// progress rule's loop verdicts). Its decisions: actForward or actRefuse
// with the Judgement, labelled by its verdict; actDrop on the forced final
// answer; actPass on other steps.
type callRule struct {
	policy *tools.Policy
}

func (c callRule) judge(st *Step, v *view) *decision {
	if st.Kind != StepCall && st.Kind != StepLeaked {
		return nil
	}
	if v.final {
		reason := "tool call in the forced final answer"
		if st.Kind == StepLeaked {
			reason = "leaked " + reason
		}
		return &decision{act: actDrop, label: verdictDropped, reason: reason}
	}
	var j tools.Judgement
	switch {
	case st.Kind == StepCall:
		j = c.policy.Judge(*st.Call)
	case st.Leak.Err != nil:
		j = tools.Judgement{Verdict: tools.VerdictMalformed, Tool: st.Leak.Call.Function.Name,
			Reason: "A tool call was written into the content as text and could not be read: " + st.Leak.Err.Error() + "."}
	default:
		j = c.policy.Judge(st.Leak.Call)
	}
	d := &decision{act: actRefuse, label: string(j.Verdict), judgement: j}
	if j.Verdict == tools.VerdictForward {
		d.act = actForward
	}
	return d
}

func (callRule) labels() (decided, counted []string) {
	for _, v := range tools.Verdicts() {
		decided = append(decided, string(v))
	}
	return append(decided, verdictDropped), metrics.Verdicts
}
