package tools

import (
	"strings"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/jsonscan"
)

// Accumulator reassembles the streamed tool-call deltas of one upstream
// response (choice 0). Its zero value is ready to use. It is not safe for
// concurrent use.
//
// Calls are kept in the order their first fragment arrived. A fragment
// belongs to the latest call of its index, except:
//   - a fragment whose non-empty id differs from that call's id starts a new
//     call: Ollama streams every parallel call at index 0 with distinct ids
//     (ollama/ollama#15457);
//   - a fragment of an unseen index that carries neither id nor name
//     continues the latest call: SGLang numbers the first fragment of a call
//     differently from the rest (sgl-project/sglang#6310), and a call that
//     starts with no name could not be judged anyway.
//
// The id, type and name of a call are the first non-empty ones seen, so an
// upstream that repeats them on every fragment changes nothing. Arguments
// are appended byte for byte.
type Accumulator struct {
	calls    []*pending
	finished bool
}

type pending struct {
	index         int
	id, typ, name string
	// args is a Builder so that First hands out the arguments without
	// copying them: the stream pump calls it after every fragment.
	args strings.Builder
	scan jsonscan.Stream
}

// Add records one fragment.
func (a *Accumulator) Add(d chat.ToolCallDelta) {
	p := a.callFor(d)
	if p.id == "" {
		p.id = d.ID
	}
	if p.typ == "" {
		p.typ = d.Type
	}
	if p.name == "" {
		p.name = d.Function.Name
	}
	if d.Function.Arguments != "" {
		start := p.args.Len()
		p.args.WriteString(d.Function.Arguments)
		p.scan.Feed(p.args.String(), start)
	}
}

func (a *Accumulator) callFor(d chat.ToolCallDelta) *pending {
	for i := len(a.calls) - 1; i >= 0; i-- {
		p := a.calls[i]
		if p.index != d.Index {
			continue
		}
		if d.ID != "" && p.id != "" && d.ID != p.id {
			break
		}
		return p
	}
	// Here the index is unseen, or d has a new id.
	if d.ID == "" && d.Function.Name == "" && len(a.calls) > 0 {
		return a.calls[len(a.calls)-1]
	}
	p := &pending{index: d.Index}
	a.calls = append(a.calls, p)
	return p
}

// Finish records that the upstream finished the response (a finish reason,
// or the end of the stream): every call seen so far is then complete.
func (a *Accumulator) Finish() { a.finished = true }

// Len returns the number of calls seen.
func (a *Accumulator) Len() int { return len(a.calls) }

// First returns the first call seen and whether it is complete: its
// arguments form one complete JSON value, or a later call has started, or
// Finish was called. A complete call's arguments may still be malformed
// (cut off by a later call or by the end of the stream, or not valid JSON);
// judging them is the Policy's job. complete reflects the bytes seen so
// far: bytes after a closed value other than whitespace make it incomplete
// again until a later call starts or the upstream finishes.
//
// The call's type is "function" when the upstream sent none, the only type
// chat completions streams. With no call seen, First returns the zero
// call and false.
func (a *Accumulator) First() (call chat.ToolCall, complete bool) {
	if len(a.calls) == 0 {
		return chat.ToolCall{}, false
	}
	p := a.calls[0]
	call = chat.ToolCall{
		ID:   p.id,
		Type: p.typ,
		Function: chat.FunctionCall{
			Name:      p.name,
			Arguments: p.args.String(),
		},
	}
	if call.Type == "" {
		call.Type = "function"
	}
	complete = a.finished || len(a.calls) > 1 || p.scan.Complete()
	return call, complete
}
