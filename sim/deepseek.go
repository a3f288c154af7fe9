package sim

import (
	"fmt"
	"strings"

	"github.com/phasegate/phasegate/chat"
)

// More simulated models, each playing one DeepSeek failure.
const (
	// LeakyModel writes its tool call into the content as DeepSeek's
	// special tokens instead of a tool_calls delta, the markers split
	// across chunks.
	LeakyModel = "phasegate-sim-leaky"
	// TestsModel plays an agent fixing a bug: run the tests, edit, run
	// the tests again, and then keep re-running them without editing.
	TestsModel = "phasegate-sim-tests"
)

// turnState is what a simulated model reads off the current turn: the
// calls made and the notices appended after them.
type turnState struct {
	executed []chat.ToolCall
	notices  int
	// rules is whether the request states the gateway's rules up front
	// (a system message opening with rulesLead): a looping model that was
	// told the rules heeds the first refusal and answers, where one that
	// was not tries again until the refusals are spent.
	rules bool
}

// rulesLead opens the guard's rules notice (tools.RulesNoticeLead).
const rulesLead = "Tool-call rules of this gateway:"

// heeds reports whether the model stops looping now: it was told the
// rules and a refusal followed.
func (st turnState) heeds() bool { return st.rules && st.notices > 0 }

func readTurn(req *chat.Request) turnState {
	lastUser := 0
	for i, m := range req.Messages {
		if m.Role == chat.RoleUser {
			lastUser = i
		}
	}
	var st turnState
	for _, m := range req.Messages[:lastUser] {
		st.rules = st.rules || m.Role == chat.RoleSystem && strings.HasPrefix(m.Text(), rulesLead)
	}
	for _, m := range req.Messages[lastUser+1:] {
		switch m.Role {
		case chat.RoleSystem:
			st.notices++
		case chat.RoleAssistant:
			st.executed = append(st.executed, m.ToolCalls...)
		}
	}
	return st
}

// leakDecide writes the first declared tool's call as leaked special
// tokens; once it has a result, it answers.
func leakDecide(req *chat.Request) turn {
	st := readTurn(req)
	if len(req.Tools) == 0 || len(st.executed) > 0 || st.notices > 0 {
		return turn{reasoning: "Answer from what I have.", text: "Final answer (simulated): the tool said what it said."}
	}
	t := req.Tools[0].Function
	leaked := "I'll look that up.\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>" + t.Name +
		"\n```json\n" + exampleArguments(t.Parameters) + "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
	return turn{reasoning: "Call the tool.", text: leaked}
}

// testsDecide plays the test-rerun loop with the tools run_tests and
// edit_file: run, edit, run, then run again and again.
func testsDecide(req *chat.Request) turn {
	st := readTurn(req)
	if len(req.Tools) == 0 || st.notices > 0 {
		return turn{reasoning: "The tests do not move; report.", text: "Final answer (simulated): one test still fails after my edit; here is the failure."}
	}
	k := len(st.executed)
	call := func(name, args string) *chat.ToolCall {
		return &chat.ToolCall{ID: fmt.Sprintf("call_tests_%d", k+1), Type: "function", Function: chat.FunctionCall{Name: name, Arguments: args}}
	}
	if k == 1 {
		return turn{reasoning: "Fix the first failure.", text: "Editing the code. ", call: call("edit_file", `{"path":"calc.go","change":"fix rounding"}`)}
	}
	return turn{reasoning: "Run the tests.", text: "Running the tests. ", call: call("run_tests", `{"package":"./..."}`)}
}
