package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// completionView is what the translation reads of a chat.completion.
type completionView struct {
	Choices []struct {
		Message      messageView `json:"message"`
		FinishReason string      `json:"finish_reason"`
	} `json:"choices"`
	Usage     json.RawMessage `json:"usage"`
	Phasegate *gatewayView    `json:"phasegate"`
}

// messageView is what the translation reads of a chat message: a
// completion's message, or a chunk's delta. Strings are kept raw, with
// their quotes.
type messageView struct {
	Content          json.RawMessage `json:"content"`
	ReasoningContent json.RawMessage `json:"reasoning_content"`
	ToolCalls        []struct {
		Index    int             `json:"index"`
		ID       json.RawMessage `json:"id"`
		Function struct {
			Name      json.RawMessage `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// gatewayView is what the translation reads of the gateway's own member.
type gatewayView struct {
	UsageEstimated bool `json:"usage_estimated"`
}

// estimated reports whether g says the usage is estimated.
func (g *gatewayView) estimated() bool { return g != nil && g.UsageEstimated }

// FromCompletion fills r, and ends it, from the body of one
// chat.completion: reasoning, then text, then function calls, as a
// stream would have made them.
func FromCompletion(r *Response, body []byte) error {
	var c completionView
	if err := json.Unmarshal(body, &c); err != nil {
		return fmt.Errorf("decode chat completion: %w", err)
	}
	finish := ""
	if len(c.Choices) > 0 {
		ch := &c.Choices[0]
		finish = ch.FinishReason
		if t := inner(ch.Message.ReasoningContent); t != nil {
			it := &outItem{typ: TypeReasoning, id: NewID("rs_"), text: bytes.Clone(t)}
			r.seal(it)
			r.add(it)
		}
		if t := inner(ch.Message.Content); t != nil || (len(ch.Message.ToolCalls) == 0 && string(ch.Message.Content) == `""`) {
			r.add(&outItem{typ: TypeMessage, id: NewID("msg_"), text: bytes.Clone(t)})
		}
		for _, tc := range ch.Message.ToolCalls {
			it := r.call(quoted(tc.ID), quoted(tc.Function.Name))
			it.args = bytes.Clone(inner(tc.Function.Arguments))
			r.add(it)
		}
	}
	r.setUsage(c.Usage, c.Phasegate.estimated())
	r.end(finish)
	return nil
}
