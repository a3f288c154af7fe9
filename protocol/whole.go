package protocol

import (
	"encoding/json"
	"iter"
	"maps"
	"slices"

	"github.com/phasegate/phasegate/chat"
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
