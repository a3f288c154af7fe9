package sim

import (
	"encoding/json"
	"fmt"

	"github.com/phasegate/phasegate/chat"
)

// Simulated models of long-running agents, for the guard's agent profile.
const (
	// SessionModel plays a coding agent's legitimate long turn: the 20
	// calls of SessionScript, one a response (explore, read, edit, test,
	// fix, test, commit), then an answer. It reads no tool result: the
	// client's tools make the results change, as a real repository's do.
	SessionModel = "phasegate-sim-session"
	// VerifyModel plays the cosmetic loop of NousResearch/hermes-agent
	// issue 37255: one execute_code call does the work, then the model
	// keeps "verifying" with execute_code calls that differ only in form
	// (quotes, spaces, a comment) and print the same thing, and refusals
	// do not stop it; it answers only once it is offered no tools, or,
	// when the request states the gateway's rules, after the first
	// refusal.
	VerifyModel = "phasegate-sim-verify"
)

// SessionStep is one call of SessionScript.
type SessionStep struct{ Name, Arguments string }

// SessionScript returns the calls SessionModel makes, in order. The same
// call comes back after an edit (the tests re-run, a file read again
// after it was written) and searches find nothing before they find
// something, as real sessions do.
func SessionScript() []SessionStep {
	tests := SessionStep{"run_tests", `{"package":"./calc"}`}
	read := SessionStep{"read_file", `{"path":"calc/round.go"}`}
	return []SessionStep{
		{"list_files", `{"path":"."}`},
		{"search", `{"pattern":"Round","path":"cmd"}`},
		{"search", `{"pattern":"Round","path":"calc"}`},
		read,
		tests,
		{"edit_file", `{"path":"calc/round.go","change":"round half away from zero"}`},
		tests,
		{"read_file", `{"path":"calc/round_test.go"}`},
		{"edit_file", `{"path":"calc/round.go","change":"handle negative zero"}`},
		tests,
		read,
		{"edit_file", `{"path":"calc/round.go","change":"keep the sign of tiny values"}`},
		tests,
		{"run_tests", `{"package":"./..."}`},
		{"read_file", `{"path":"CHANGELOG.md"}`},
		{"edit_file", `{"path":"CHANGELOG.md","change":"note the rounding fix"}`},
		{"search", `{"pattern":"TODO","path":"calc"}`},
		{"git", `{"args":"diff --stat"}`},
		{"git", `{"args":"commit -am 'calc: round half away from zero'"}`},
		{"git", `{"args":"status --short"}`},
	}
}

// sessionDecide makes the next call of SessionScript, counted by the calls
// the turn holds; offered no tools, or at the script's end, it answers.
func sessionDecide(req *chat.Request) turn {
	st := readTurn(req)
	script := SessionScript()
	k := len(st.executed)
	if len(req.Tools) == 0 || toolChoiceNone(req) || k >= len(script) {
		if k < len(script) {
			return turn{reasoning: "No tools left; say where I stopped.", text: fmt.Sprintf("Final answer (simulated): stopped after %d of %d steps; the rounding fix is not finished.", k, len(script))}
		}
		return turn{reasoning: "Done; report.", text: fmt.Sprintf("Final answer (simulated): fixed the rounding in calc/round.go and committed it, after %d tool calls; all tests pass.", k)}
	}
	s := script[k]
	return turn{reasoning: "Next step of the fix.", call: &chat.ToolCall{ID: fmt.Sprintf("call_session_%d", k+1), Type: "function",
		Function: chat.FunctionCall{Name: s.Name, Arguments: s.Arguments}}}
}

// VerifyWork is the code of VerifyModel's first call, the one that does
// the work; every later call only prints "done".
const VerifyWork = "import csv\nrows = list(csv.reader(open('sales.csv')))\nprint(sum(float(r[2]) for r in rows[1:]))"

// verifyVariants are VerifyModel's verification calls, in turn: the same
// program up to quotes, spaces and comments, as issue 37255 shows them.
var verifyVariants = []string{"print('done')", `print("done")`, "print('done')  # verify", "print( 'done' )", `print("done")  # final check`}

// verifyDecide plays the cosmetic loop; its n-th verification is counted
// by the calls and notices of the turn, so each refused call is followed
// by another variant.
func verifyDecide(req *chat.Request) turn {
	st := readTurn(req)
	if len(req.Tools) == 0 || toolChoiceNone(req) || st.heeds() {
		return turn{reasoning: "No tools left; answer.", text: "Final answer (simulated): the total of sales.csv is what the first run printed."}
	}
	code := VerifyWork
	text := "Let me compute the total. "
	if k := len(st.executed); k > 0 {
		code = verifyVariants[(k-1+st.notices)%len(verifyVariants)]
		text = "Let me verify once more, then stop. "
	}
	b, _ := json.Marshal(map[string]string{"code": code})
	args := string(b)
	return turn{reasoning: "Verify before answering.", text: text, call: &chat.ToolCall{ID: fmt.Sprintf("call_verify_%d", len(st.executed)+st.notices+1), Type: "function",
		Function: chat.FunctionCall{Name: "execute_code", Arguments: args}}}
}
