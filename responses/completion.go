package responses

import (
	"encoding/json"
	"fmt"
)

// completionView is what the translation reads of a chat.completion.
type completionView struct {
	Choices []struct {
		Message struct {
			Content          json.RawMessage `json:"content"`
			ReasoningContent json.RawMessage `json:"reasoning_content"`
			ToolCalls        []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage     json.RawMessage `json:"usage"`
	Phasegate *struct {
		UsageEstimated bool `json:"usage_estimated"`
	} `json:"phasegate"`
}

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
			r.add(&outItem{typ: TypeReasoning, id: NewID("rs_"), text: t})
		}
		if t := inner(ch.Message.Content); t != nil || (len(ch.Message.ToolCalls) == 0 && string(ch.Message.Content) == `""`) {
			r.add(&outItem{typ: TypeMessage, id: NewID("msg_"), text: t})
		}
		for _, tc := range ch.Message.ToolCalls {
			callID, _ := json.Marshal(tc.ID)
			name, _ := json.Marshal(tc.Function.Name)
			r.add(&outItem{typ: TypeFunctionCall, id: NewID("fc_"), callID: callID, name: name, args: inner(tc.Function.Arguments)})
		}
	}
	r.setUsage(c.Usage, c.Phasegate != nil && c.Phasegate.UsageEstimated)
	r.end(finish)
	return nil
}
