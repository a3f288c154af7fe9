package chunkscan

import "encoding/json"

// view is a chat.completion.chunk (choice is choiceView) or a
// chat.completion (completionChoice) as encoding/json reads the Fields.
type view[choice any] struct {
	ID        json.RawMessage `json:"id"`
	Choices   []choice        `json:"choices"`
	Usage     json.RawMessage `json:"usage"`
	Error     json.RawMessage `json:"error"`
	Phasegate *gatewayView    `json:"phasegate"`
}

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

// finishView is what a choice says of how its answer ended.
type finishView struct {
	FinishReason json.RawMessage `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason"`
	MatchedStop  json.RawMessage `json:"matched_stop"`
}

type choiceView struct {
	Delta messageView `json:"delta"`
	finishView
}

type completionChoice struct {
	Message messageView `json:"message"`
	finishView
}

// gatewayView is what a door reads of the gateway's own member.
type gatewayView struct {
	UsageEstimated bool `json:"usage_estimated"`
}

func (c choiceView) parts() (messageView, finishView)       { return c.Delta, c.finishView }
func (c completionChoice) parts() (messageView, finishView) { return c.Message, c.finishView }

// Decode reads the fields of a chunk with encoding/json: the way for the
// chunks a Scanner leaves, and the reference it is fuzzed against.
func Decode(data []byte) (Fields, error) { return decode[choiceView](data) }

// DecodeCompletion reads the same fields of a chat.completion, the first
// choice's message in the place of a chunk's delta.
func DecodeCompletion(body []byte) (Fields, error) { return decode[completionChoice](body) }

func decode[C interface {
	parts() (messageView, finishView)
}](data []byte) (Fields, error) {
	var c view[C]
	if err := json.Unmarshal(data, &c); err != nil {
		return Fields{}, err
	}
	f := c.fields()
	if len(c.Choices) > 0 {
		m, fin := c.Choices[0].parts()
		f.message(&m, &fin)
	}
	return f, nil
}

func (c *view[choice]) fields() Fields {
	return Fields{ID: c.ID, Usage: c.Usage, Error: c.Error, Estimated: c.Phasegate != nil && c.Phasegate.UsageEstimated}
}

func (f *Fields) message(m *messageView, fin *finishView) {
	f.Content, f.Reasoning, f.Finish = m.Content, m.ReasoningContent, fin.FinishReason
	f.StopReason = fin.StopReason
	if f.StopReason == nil {
		f.StopReason = fin.MatchedStop
	}
	for _, tc := range m.ToolCalls {
		f.Calls = append(f.Calls, Call{Index: tc.Index, ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
}

// decodeExtension is Extension with encoding/json.
func decodeExtension(ext []byte, estimated bool) (bool, error) {
	g := gatewayView{UsageEstimated: estimated}
	if err := json.Unmarshal(ext, &g); err != nil {
		return estimated, err
	}
	return g.UsageEstimated, nil
}
