package protocol

import (
	"bytes"
	"encoding/json"
	"iter"
	"maps"
	"slices"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/jsonscan"
)

// wholeChoice is what the guard reads of a whole chat.completion's
// choice.
type wholeChoice struct {
	Message struct {
		Role             string          `json:"role"`
		Content          *string         `json:"content"`
		ReasoningContent *string         `json:"reasoning_content"`
		ToolCalls        []chat.ToolCall `json:"tool_calls"`
	} `json:"message"`
	FinishReason *string `json:"finish_reason"`
}

// wholeEvents yields the chunks a stream of body, a whole chat.completion,
// would have carried, so the guard's reader reads a whole answer step by
// step as it reads a stream, every rule applied: the usage first, alone
// (an answer the guard stops early has reported what it cost), the
// opening, the reasoning, the content, the tool calls of the first choice
// (each a chunk of its own kind), the finish, [DONE]. Each chunk after
// the usage's carries the completion's id, created, model,
// system_fingerprint and every top-level member the guard does not read,
// as a stream's chunks do. The degenerate text rule reads the content
// whole: an answer that ends in repetition is cut, one that repeated
// itself for a while and went on is not. A
// body that is not such a completion is an *InvalidResponseError, with
// the upstream's message when it is an error object.
func wholeEvents(body []byte) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		chunks, ok := completionChunks(body)
		if !ok {
			err := errorObject(body, "in its answer")
			if err == nil {
				err = invalidResponse(nil, "the upstream's answer is not a chat completion with a choice")
			}
			yield(nil, err)
			return
		}
		for _, c := range chunks {
			if !yield(c, nil) {
				return
			}
		}
		yield([]byte(chat.Done), nil)
	}
}

// completionChunks builds wholeEvents' chunks of body, [DONE] aside; not
// ok when body is not a chat.completion with a choice.
func completionChunks(body []byte) ([][]byte, bool) {
	if out, ok := walkCompletion(body); ok {
		return out, true
	}
	return decodeCompletion(body)
}

// decodeCompletion is completionChunks by encoding/json: for what the walk
// leaves, and the reference it is fuzzed against.
func decodeCompletion(body []byte) ([][]byte, bool) {
	var top map[string]json.RawMessage
	var choices []wholeChoice
	if json.Unmarshal(body, &top) != nil || json.Unmarshal(top["choices"], &choices) != nil || len(choices) == 0 {
		return nil, false
	}
	head := wholeHead(top)
	ch := choices[0]
	var out [][]byte
	add := func(choices string, v any) {
		b, err := json.Marshal(v)
		if err == nil {
			c := make([]byte, 0, len(head)+len(choices)+len(b)+3)
			out = append(out, append(append(append(append(c, head...), choices...), b...), `}]}`...))
		}
	}
	if u := top["usage"]; len(u) > 0 && string(u) != "null" {
		out = append(out, append(append([]byte(`{"choices":[],"usage":`), u...), '}'))
	}
	const delta = `[{"index":0,"finish_reason":null,"delta":`
	role := ch.Message.Role
	if role == "" {
		role = chat.RoleAssistant
	}
	add(delta, chat.Delta{Role: role, Content: new(string)})
	if r := ch.Message.ReasoningContent; r != nil && *r != "" {
		add(delta, chat.Delta{ReasoningContent: r})
	}
	if c := ch.Message.Content; c != nil && *c != "" {
		add(delta, chat.Delta{Content: c})
	}
	if len(ch.Message.ToolCalls) > 0 {
		tds := make([]chat.ToolCallDelta, len(ch.Message.ToolCalls))
		for i, tc := range ch.Message.ToolCalls {
			tds[i] = chat.ToolCallDelta{Index: i, ID: tc.ID, Type: tc.Type}
			tds[i].Function.Name, tds[i].Function.Arguments = tc.Function.Name, tc.Function.Arguments
		}
		add(delta, chat.Delta{ToolCalls: tds})
	}
	if ch.FinishReason != nil {
		add(`[{"index":0,"delta":{},"finish_reason":`, *ch.FinishReason)
	}
	return out, true
}

// wholeHead is the start every chunk of a completion whose top-level
// members are top shares, up to the value of "choices".
func wholeHead(top map[string]json.RawMessage) []byte {
	h := []byte(`{"object":"chat.completion.chunk"`)
	for _, k := range slices.Sorted(maps.Keys(top)) {
		switch k {
		case "object", "choices", "usage":
			continue
		}
		key, _ := json.Marshal(k)
		h = append(append(append(append(h, ','), key...), ':'), top[k]...)
	}
	return append(h, `,"choices":`...)
}

// rawCompletion is what walkCompletion reads of a chat.completion: raw
// JSON values, spliced into the chunks as the upstream wrote them.
type rawCompletion struct {
	// head is the chunks' start: their object, then every top-level
	// member but choices, usage and object, as written; keys are their
	// keys, each between NULs.
	head, keys                      []byte
	usage, role, content, reasoning []byte
	finish                          []byte
	// calls: the message makes tool calls. slow: the walk leaves body to
	// the decoder.
	calls, slow                     bool
	seenChoices, seenUsage, seenObj bool
	seen                            uint8 // members of the first choice and its message
}

// walkCompletion is completionChunks in one walk, without decoding or
// encoding: for a completion whose first choice makes no tool call, whose
// keys have no escape, and that gives no member twice; not ok leaves body
// to completionChunks' decoder.
func walkCompletion(body []byte) ([][]byte, bool) {
	c := rawCompletion{head: []byte(`{"object":"chat.completion.chunk"`)}
	w := jsonscan.Walk(body)
	if w.Peek() != '{' {
		return nil, false
	}
	w.Object(func(key []byte) { c.member(&w, key) })
	w.End()
	if w.Err() != nil || w.EscapedKey() || c.slow || c.calls || c.role == nil && c.content == nil {
		return nil, false
	}
	return c.chunks(), true
}

// member reads one top-level member.
func (c *rawCompletion) member(w *jsonscan.Walker, key []byte) {
	switch string(key) {
	case "choices":
		c.slow = c.slow || c.seenChoices
		c.seenChoices = true
		first := true
		w.Array(func() {
			if !first {
				w.Value()
				return
			}
			first = false
			w.Object(func(key []byte) { c.choice(w, key) })
		})
	case "usage":
		c.slow = c.slow || c.seenUsage
		c.seenUsage = true
		c.usage = w.Value()
	case "object":
		c.slow = c.slow || c.seenObj
		c.seenObj = true
		w.Value()
	default:
		// A key that a client's decoder takes for a chunk field it is not
		// spelt as ("ID" beside "id") is read by the last one written,
		// which the decoder's sorted head would reorder: the decoder
		// writes it.
		c.slow = c.slow || foldsTo(key, "choices", "usage", "object") || bytes.Contains(c.keys, append(append([]byte{0}, key...), 0)) ||
			foldsTo(key, chunkFields...) && !slices.Contains(chunkFields, string(key))
		c.keys = append(append(append(c.keys, 0), key...), 0)
		c.head = append(append(append(append(c.head, ',', '"'), key...), '"', ':'), w.Value()...)
	}
}

// choice reads one member of the first choice.
func (c *rawCompletion) choice(w *jsonscan.Walker, key []byte) {
	switch string(key) {
	case "message":
		c.slow = c.slow || c.seen&seenMessage != 0
		c.seen |= seenMessage
		w.Object(func(key []byte) { c.message(w, key) })
	case "finish_reason":
		c.finish = c.text(seenFinish, w.Value())
	default:
		c.slow = c.slow || foldsTo(key, "message", "finish_reason")
		w.Value()
	}
}

// message reads one member of the first choice's message.
func (c *rawCompletion) message(w *jsonscan.Walker, key []byte) {
	switch string(key) {
	case "role":
		c.role = c.text(seenRole, w.Value())
	case "content":
		c.content = c.text(seenContent, w.Value())
	case "reasoning_content":
		c.reasoning = c.text(seenReasoning, w.Value())
	case "tool_calls":
		c.slow = c.slow || c.seen&seenCalls != 0
		c.seen |= seenCalls
		v := w.Value()
		c.calls = string(v) != "null" && string(v) != "[]"
	default:
		c.slow = c.slow || foldsTo(key, "role", "content", "reasoning_content", "tool_calls")
		w.Value()
	}
}

// Members of the first choice, and of its message, read so far.
const (
	seenMessage uint8 = 1 << iota
	seenFinish
	seenRole
	seenContent
	seenReasoning
	seenCalls
)

// text returns v, the value of the member bit, a string or null; a
// member given twice, or of another type, leaves the completion to the
// decoder.
func (c *rawCompletion) text(bit uint8, v []byte) []byte {
	if c.seen&bit != 0 || len(v) == 0 || v[0] != '"' && string(v) != "null" {
		c.slow = true
	}
	c.seen |= bit
	return v
}

// chunkFields are the top-level members of a chunk that clients decode.
var chunkFields = []string{"id", "created", "model", "system_fingerprint", "service_tier"}

// foldsTo reports whether key names one of names as encoding/json matches
// keys, without being spelt so.
func foldsTo(key []byte, names ...string) bool {
	for _, n := range names {
		if jsonscan.KeyIs(key, false, n) {
			return true
		}
	}
	return false
}

// chunks builds the chunks, [DONE] aside.
func (c *rawCompletion) chunks() [][]byte {
	var out [][]byte
	if len(c.usage) > 0 && string(c.usage) != "null" {
		out = append(out, append(append([]byte(`{"choices":[],"usage":`), c.usage...), '}'))
	}
	add := func(parts ...string) {
		b := append([]byte{}, c.head...)
		b = append(b, `,"choices":[{"index":0,`...)
		for _, p := range parts {
			b = append(b, p...)
		}
		out = append(out, append(b, `}]}`...))
	}
	role := string(c.role)
	if role == "" || role == "null" || role == `""` {
		role = `"` + chat.RoleAssistant + `"`
	}
	add(`"finish_reason":null,"delta":{"role":`, role, `,"content":""}`)
	if said(c.reasoning) {
		add(`"finish_reason":null,"delta":{"reasoning_content":`, string(c.reasoning), `}`)
	}
	if said(c.content) {
		add(`"finish_reason":null,"delta":{"content":`, string(c.content), `}`)
	}
	if len(c.finish) > 0 && string(c.finish) != "null" {
		add(`"delta":{},"finish_reason":`, string(c.finish))
	}
	return out
}

// said reports whether v, a raw string or null, says something.
func said(v []byte) bool { return len(v) > 2 && v[0] == '"' }
