package main

// The agent scenarios: a model that works through a 20-call coding session,
// and models that fall into the cosmetic loops DeepSeek users report. Each
// picks its next call from the request's own history (the calls of the turn
// that a tool message answered, and the notices the gateway appended since),
// so a whole tool loop run by a client SDK is scripted without any state in
// the double. e2e/test/agent.test.mjs runs them through GUARD_PROFILE=agent;
// the client's tools there produce the results, and the loops' data is
// repeated there as literals.

import (
	"encoding/json"
	"fmt"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// agentCall is one tool call the scripted model makes.
type agentCall struct{ name, args string }

func shellCall(cmd string) agentCall {
	b, _ := json.Marshal(map[string]string{"command": cmd})
	return agentCall{"run_shell", string(b)}
}

// agentSession is the legitimate session: explore (a search that finds
// nothing before the one that does), read, run the tests, then edit and run
// the same test command after each of five edits (its output the same
// several times in a row), read the edited file again, start a release and
// poll it until it is done. 20 calls.
func agentSession() []agentCall {
	s := []agentCall{shellCall("ls"), shellCall("grep -rn Timeout cmd"), shellCall("grep -rn Timeout pkg"),
		{"read_file", `{"path":"pkg/dial.go"}`}, shellCall("go test ./pkg")}
	for i := range 5 {
		s = append(s, agentCall{"edit_file", fmt.Sprintf(`{"path":"pkg/dial.go","edit":%d}`, i)}, shellCall("go test ./pkg"))
	}
	s = append(s, agentCall{"read_file", `{"path":"pkg/dial.go"}`}, shellCall("make release"))
	for range 3 {
		s = append(s, shellCall("make status"))
	}
	return s
}

// agentLead is the work done before a loop starts: the session's first 5
// calls.
const agentLead = 5

// agentLoops are the loops, by scenario: call n of the loop, forever.
var agentLoops = map[string]func(n int) agentCall{
	// A finished code-interpreter agent that keeps "verifying" with
	// execute_code calls differing only in form, all printing the same
	// (after NousResearch/hermes-agent issue 37255): no two calls are
	// written alike, so only a rule that sees through form stops it.
	"agent-loop-code": func(n int) agentCall {
		code := []string{"print('done')", `print("done")`, "print( 'done' )", "print('done');"}[n%4] + fmt.Sprintf("  # verify %d", n)
		b, _ := json.Marshal(map[string]string{"code": code})
		return agentCall{"execute_code", string(b)}
	},
	// A model that says it will stop the loop and sends the same shell
	// command again (after QwenLM/qwen-code issue 4695).
	"agent-loop-shell": func(int) agentCall { return shellCall("npm run build") },
}

// agentState is what the scripted model reads off a request.
type agentState struct {
	executed int  // calls of the turn a tool message answered
	notices  int  // system messages trailing the history: the gateway's notices
	tools    bool // whether the request offers tools
}

func readAgentState(req *chat.Request) agentState {
	st := agentState{executed: len(proxytest.Executed(req)), tools: len(req.Tools) > 0}
	for i := len(req.Messages) - 1; i >= 0 && req.Messages[i].Role == chat.RoleSystem; i-- {
		st.notices++
	}
	return st
}

// agentFinal is the scripted model's answer after k tool results.
func agentFinal(k int) string { return fmt.Sprintf("Final answer after %d tool results.", k) }

// agentScenario is the session (loop nil) or the session's lead followed by
// loop. The next call is the one after those the turn executed, whatever
// the notices said; after a notice the model says it will stop first.
// Offered no tools, or done with the session, it answers.
func agentScenario(loop func(int) agentCall) scenario {
	session := agentSession()
	if loop != nil {
		session = session[:agentLead]
	}
	return func(req *chat.Request) sim.Reply {
		st := readAgentState(req)
		k := st.executed
		if !st.tools || (loop == nil && k >= len(session)) {
			return answerText(req, agentFinal(k))
		}
		var next agentCall
		if k < len(session) {
			next = session[k]
		} else {
			next = loop(k - len(session) + st.notices)
		}
		text := ""
		if st.notices > 0 {
			text = "Let me stop this loop."
		}
		id := fmt.Sprintf("call_%d_%d", k, st.notices)
		if !req.Stream {
			call := chat.ToolCall{ID: id, Type: "function", Function: chat.FunctionCall{Name: next.name, Arguments: next.args}}
			msg := map[string]any{"content": nil, "tool_calls": []chat.ToolCall{call}}
			if text != "" {
				msg["content"] = text
			}
			return sim.Completion(req.Model, msg, chat.FinishToolCalls, usage())
		}
		s := sim.NewStream(req.Model).Role()
		if text != "" {
			s = s.Content(text)
		}
		half := len(next.args) / 2
		return finish(req, s.ToolCall(0, id, next.name, next.args[:half], next.args[half:]), chat.FinishToolCalls)
	}
}

// answerText answers in text, streamed or not as asked.
func answerText(req *chat.Request, text string) sim.Reply {
	if !req.Stream {
		return sim.Completion(req.Model, map[string]any{"content": text}, chat.FinishStop, usage())
	}
	return finish(req, sim.NewStream(req.Model).Role().Content(text), chat.FinishStop)
}

func init() {
	scenarios["agent-session"] = agentScenario(nil)
	for name, loop := range agentLoops {
		scenarios[name] = agentScenario(loop)
	}
}
