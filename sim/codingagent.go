package sim

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/phasegate/phasegate/chat"
)

// Simulated models for real coding-agent CLIs (Claude Code, Codex, Qwen
// Code, OpenCode and the like). Each agent declares its own tools under its
// own names (Bash, exec_command, run_shell_command, bash), so the models
// find the tool that runs shell commands, and the one that reads files,
// by their schemas (FindTools) and play one scenario each. Every step is
// decided from the request's history alone: any replica serves any step.
//
// The prompt names the project's directory as "project at /abs/path"; the
// read tool is given absolute paths under it, as agents ask.
const (
	// AgentSessionModel plays a legitimate survey of a project: the eight
	// read-only commands of AgentSessionSteps, each once, then an answer.
	AgentSessionModel = "phasegate-sim-agent-session"
	// AgentLoopModel runs AgentLoopCommand again and again, whatever it
	// is told, and answers only once it is offered no tools.
	AgentLoopModel = "phasegate-sim-agent-loop"
	// AgentCosmeticModel runs the same no-op in ever new cosmetic variants
	// (CosmeticVariant: echo done, echo  done, echo "done", echo  "done",
	// echo done; …)
	// and answers only once it is offered no tools.
	AgentCosmeticModel = "phasegate-sim-agent-cosmetic"
	// AgentThinkingModel thinks as DeepSeek's thinking mode does: each of
	// its two commands comes with reasoning_content, which must come back
	// intact on the assistant message of that call in every later request.
	// Its answer says whether it did: ThinkingIntact, or what was lost.
	AgentThinkingModel = "phasegate-sim-agent-thinking"
)

// Answers of the agent models, for checks of what the agent showed.
const (
	// AgentAnswerLead opens every final answer of the agent models.
	AgentAnswerLead = "Final answer (simulated):"
	// ThinkingIntact is in AgentThinkingModel's answer when every
	// reasoning_content it wrote came back unchanged.
	ThinkingIntact = "every reasoning_content came back intact"
)

// AgentLoopCommand is what AgentLoopModel runs forever.
const AgentLoopCommand = "wc -l README.md"

// AgentStep is one step of AgentSessionModel's survey: Command runs in the
// shell tool, unless Read names a file and the agent declares a tool that
// reads files, which then reads it.
type AgentStep struct{ Command, Read string }

// AgentSessionSteps returns the survey's steps in order: read-only, each
// different, each exiting 0 in a directory that holds a README.md with at
// least one non-empty line.
func AgentSessionSteps() []AgentStep {
	return []AgentStep{
		{Command: "pwd"},
		{Command: "ls -la"},
		{Command: "cat README.md", Read: "README.md"},
		{Command: "wc -l README.md"},
		{Command: "grep -c . README.md"},
		{Command: "find . -maxdepth 2 -type f -name '*.md'"},
		{Command: "head -n 3 README.md"},
		{Command: "du -sk ."},
	}
}

// cosmeticForms are the spellings AgentCosmeticModel goes through, each
// first with one space after echo, then with two; each lap through them
// widens the gap by two more, so no two variants are ever equal.
var cosmeticForms = []string{"echo done", `echo "done"`, "echo done;", "echo 'done'", "echo done # check", `echo "done";`}

// CosmeticVariant returns AgentCosmeticModel's k-th command (from 0): a
// shell no-op that prints "done", spelled unlike every other k's.
func CosmeticVariant(k int) string {
	n := len(cosmeticForms)
	form := cosmeticForms[(k/2)%n]
	gap := 1 + k%2 + 2*(k/(2*n))
	return strings.Replace(form, "echo ", "echo"+strings.Repeat(" ", gap), 1)
}

// agentDecide plays the agent model req names.
func agentDecide(req *chat.Request) turn {
	tb := FindTools(req.Tools)
	h := readAgentHistory(req, tb)
	if tb.Shell.Name == "" || toolChoiceNone(req) {
		return agentAnswer(req.Model, h)
	}
	switch req.Model {
	case AgentSessionModel:
		for _, s := range AgentSessionSteps() {
			if !h.done(s, tb) {
				return agentStep(tb, h, "session", s, "Next step of the survey.", "")
			}
		}
	case AgentLoopModel:
		return agentStep(tb, h, "loop", AgentStep{Command: AgentLoopCommand}, "Check the line count again.", "Let me check once more. ")
	case AgentCosmeticModel:
		return agentStep(tb, h, "cosmetic", AgentStep{Command: CosmeticVariant(h.calls + h.notices)}, "Confirm it is done.", "Let me confirm it is done. ")
	case AgentThinkingModel:
		if h.calls < len(thinkingSteps) {
			s := AgentStep{Command: thinkingSteps[h.calls]}
			return agentStep(tb, h, "think", s, thinkingText(agentCallID("think", h)), "")
		}
	}
	return agentAnswer(req.Model, h)
}

// thinkingSteps are AgentThinkingModel's commands.
var thinkingSteps = []string{"pwd", "ls -la"}

// thinkingText is the reasoning_content AgentThinkingModel writes with
// the call id: a function of the id alone, so a later request is checked
// without state, even one offered no tools. It spans lines and holds
// non-ASCII text and markup, which a lossy client would mangle.
func thinkingText(id string) string {
	return fmt.Sprintf("Reasoning of %s: the user wants a survey.\n  Look before touching — read-only <first> ✓", id)
}

// agentCallID names the next call: unique within a session by the calls
// and notices before it, and across sessions by the project's directory,
// as a provider's ids are (the gateway remembers reasoning by call id).
func agentCallID(scenario string, h agentHistory) string {
	f := fnv.New32a()
	_, _ = f.Write([]byte(h.dir))
	return fmt.Sprintf("call_%s_%08x_%d", scenario, f.Sum32(), h.calls+h.notices+1)
}

// agentStep calls the tool that runs s: the read tool when s reads a file
// and the agent has one, else the shell tool.
func agentStep(tb Toolbox, h agentHistory, scenario string, s AgentStep, reasoning, text string) turn {
	id := agentCallID(scenario, h)
	var args string
	var name string
	if s.Read != "" && tb.Read.Name != "" {
		name, args = tb.Read.Name, tb.Read.arguments(h.path(s.Read))
	} else {
		name, args = tb.Shell.Name, tb.Shell.arguments(s.Command)
	}
	return turn{reasoning: reasoning, text: text, call: &chat.ToolCall{ID: id, Type: "function",
		Function: chat.FunctionCall{Name: name, Arguments: args}}}
}

// agentAnswer is the final answer of the agent model named model.
func agentAnswer(model string, h agentHistory) turn {
	say := func(s string) turn { return turn{reasoning: "Answer now.", text: AgentAnswerLead + " " + s} }
	switch model {
	case AgentSessionModel:
		return say(fmt.Sprintf("surveyed the project with %d of %d read-only commands; README.md is its only document.", h.calls, len(AgentSessionSteps())))
	case AgentLoopModel:
		return say("README.md has as many lines as the first count said; I stopped counting.")
	case AgentCosmeticModel:
		return say("it is done; I stopped confirming.")
	case AgentThinkingModel:
		if len(h.lost) > 0 {
			return say("reasoning_content did not come back intact: " + strings.Join(h.lost, "; ") + ".")
		}
		return say(fmt.Sprintf("ran %d commands; %s.", h.calls, ThinkingIntact))
	}
	return say("done.")
}
