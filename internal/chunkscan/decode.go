package chunkscan

import "encoding/json"

// chunkView is a chat.completion.chunk as Decode reads it.
type chunkView struct {
	ID      json.RawMessage `json:"id"`
	Choices []struct {
		Delta struct {
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
		} `json:"delta"`
		FinishReason json.RawMessage `json:"finish_reason"`
		StopReason   json.RawMessage `json:"stop_reason"`
		MatchedStop  json.RawMessage `json:"matched_stop"`
	} `json:"choices"`
	Usage     json.RawMessage `json:"usage"`
	Error     json.RawMessage `json:"error"`
	Phasegate *struct {
		UsageEstimated bool `json:"usage_estimated"`
	} `json:"phasegate"`
}

// Decode reads the fields of a chunk with encoding/json: the way for the
// chunks a Scanner leaves, and the reference it is fuzzed against.
func Decode(data []byte) (Fields, error) {
	var c chunkView
	if err := json.Unmarshal(data, &c); err != nil {
		return Fields{}, err
	}
	f := Fields{ID: c.ID, Usage: c.Usage, Error: c.Error, Estimated: c.Phasegate != nil && c.Phasegate.UsageEstimated}
	if len(c.Choices) == 0 {
		return f, nil
	}
	ch := &c.Choices[0]
	f.Content, f.Reasoning, f.Finish = ch.Delta.Content, ch.Delta.ReasoningContent, ch.FinishReason
	f.StopReason = ch.StopReason
	if f.StopReason == nil {
		f.StopReason = ch.MatchedStop
	}
	for _, tc := range ch.Delta.ToolCalls {
		f.Calls = append(f.Calls, Call{Index: tc.Index, ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return f, nil
}
