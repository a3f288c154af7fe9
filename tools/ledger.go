package tools

import (
	"slices"

	"github.com/phasegate/phasegate/chat"
)

// Ledger is what the history of one request says about the current turn
// (its executed calls and their results since the last user message). The
// gateway keeps no per-conversation state: the ledger is
// derived from the request each time, so any replica can serve any request.
// A Ledger is read-only once built and safe for concurrent reads.
type Ledger struct {
	projectID string
	executed  []Executed
	// args are the parsed arguments of each executed call; nil when they
	// are malformed.
	args    []map[string]any
	blocked map[Signature]struct{}
}

// Executed is a tool call of the turn that the client ran: an assistant
// message of the turn holds the call and a tool message of the turn answers
// its tool_call_id.
type Executed struct {
	Call chat.ToolCall
	// Signature is the call's signature, or "" when its arguments are
	// malformed.
	Signature Signature
	// Result is the text of the answering tool message.
	Result string
}

// NewLedger reads the turn out of msgs: the messages after the last user
// message, or all of them when there is none. A tool message answers the
// latest unanswered call with its tool_call_id that precedes it in the
// turn: some upstreams number call ids per response ("call_0"), so an id
// may repeat within a turn. Calls no tool message answers were not run and
// are not in the ledger; a call answered twice counts once.
func NewLedger(projectID string, msgs []chat.Message) *Ledger {
	turn := msgs
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == chat.RoleUser {
			turn = msgs[i+1:]
			break
		}
	}
	type call struct {
		call     chat.ToolCall
		answered bool
		result   string
	}
	var calls []call
	for _, m := range turn {
		switch m.Role {
		case chat.RoleAssistant:
			for _, c := range m.ToolCalls {
				calls = append(calls, call{call: c})
			}
		case chat.RoleTool:
			if m.ToolCallID == "" {
				continue
			}
			for i := len(calls) - 1; i >= 0; i-- {
				if !calls[i].answered && calls[i].call.ID == m.ToolCallID {
					calls[i].answered, calls[i].result = true, m.Text()
					break
				}
			}
		}
	}
	l := &Ledger{projectID: projectID, blocked: make(map[Signature]struct{})}
	for _, c := range calls {
		if !c.answered {
			continue
		}
		// Malformed arguments were still run by the client: they count as
		// an execution but match no later call.
		var sig Signature
		args, problem := parseArguments(c.call.Function.Arguments)
		if problem == "" {
			sig = signatureOf(projectID, c.call.Function.Name, args)
			l.blocked[sig] = struct{}{}
		} else {
			args = nil
		}
		l.executed = append(l.executed, Executed{Call: c.call, Signature: sig, Result: c.result})
		l.args = append(l.args, args)
	}
	return l
}

// ProjectID returns the project the signatures belong to.
func (l *Ledger) ProjectID() string { return l.projectID }

// CycleIndex returns the number of tool calls executed in the turn.
func (l *Ledger) CycleIndex() int { return len(l.executed) }

// Blocked reports whether a call with signature sig was executed in the
// turn. The zero Signature is never blocked.
func (l *Ledger) Blocked(sig Signature) bool {
	_, ok := l.blocked[sig]
	return ok
}

// Executed returns the executed calls in the order the assistant made
// them, in a new slice.
func (l *Ledger) Executed() []Executed { return slices.Clone(l.executed) }

// NoProgress reports whether the last two executed calls of the turn with
// signature sig returned the same result, as an agent reads it
// (NormaliseResult). With fewer than two such calls
// there is no evidence either way, and it reports false.
func (l *Ledger) NoProgress(sig Signature) bool {
	var last, prev *Executed
	for i := len(l.executed) - 1; i >= 0; i-- {
		if l.executed[i].Signature != sig {
			continue
		}
		if last == nil {
			last = &l.executed[i]
			continue
		}
		prev = &l.executed[i]
		break
	}
	return prev != nil && (prev.Result == last.Result || NormaliseResult(prev.Result) == NormaliseResult(last.Result))
}
