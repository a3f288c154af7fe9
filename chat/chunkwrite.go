package chat

import (
	"fmt"
	"slices"
	"strconv"
)

// AppendJSON appends c as json.Marshal writes it, in one pass: members in
// the order of the struct, strings escaped as encoding/json escapes them
// (HTML characters too), the raw usage and extension compacted (and
// refused when they are not JSON). FuzzOutChunk holds it to json.Marshal.
func (c *OutChunk) AppendJSON(dst []byte) ([]byte, error) {
	b := appendJSONString(append(slices.Grow(dst, c.size()), `{"id":`...), c.ID)
	b = appendJSONString(append(b, `,"object":`...), c.Object)
	b = strconv.AppendInt(append(b, `,"created":`...), c.Created, 10)
	b = appendJSONString(append(b, `,"model":`...), c.Model)
	if c.SystemFingerprint != "" {
		b = appendJSONString(append(b, `,"system_fingerprint":`...), c.SystemFingerprint)
	}
	b = append(b, `,"choices":`...)
	if c.Choices == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range c.Choices {
			if i > 0 {
				b = append(b, ',')
			}
			b = c.Choices[i].appendJSON(b)
		}
		b = append(b, ']')
	}
	var err error
	if len(c.Usage) > 0 {
		if b, err = appendRaw(append(b, `,"usage":`...), c.Usage); err != nil {
			return dst, fmt.Errorf("encode chunk usage: %w", err)
		}
	}
	if len(c.Extension) > 0 {
		if b, err = appendRaw(append(b, `,"phasegate":`...), c.Extension); err != nil {
			return dst, fmt.Errorf("encode chunk extension: %w", err)
		}
	}
	return append(b, '}'), nil
}

// size is about the length of c written, escapes aside: what AppendJSON
// makes room for at once.
func (c *OutChunk) size() int {
	n := 128 + len(c.ID) + len(c.Model) + len(c.SystemFingerprint) + len(c.Usage) + len(c.Extension)
	for i := range c.Choices {
		d := &c.Choices[i].Delta
		n += 96
		if d.Content != nil {
			n += len(*d.Content)
		}
		if d.ReasoningContent != nil {
			n += len(*d.ReasoningContent)
		}
		for j := range d.ToolCalls {
			t := &d.ToolCalls[j]
			n += 64 + len(t.ID) + len(t.Function.Name) + len(t.Function.Arguments)
		}
	}
	return n
}

func (ch *ChunkChoice) appendJSON(b []byte) []byte {
	b = strconv.AppendInt(append(b, `{"index":`...), int64(ch.Index), 10)
	b = ch.Delta.appendJSON(append(b, `,"delta":`...))
	b = append(b, `,"finish_reason":`...)
	if ch.FinishReason == nil {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, *ch.FinishReason)
	}
	return append(b, '}')
}

func (d *Delta) appendJSON(b []byte) []byte {
	b = append(b, '{')
	n := len(b)
	sep := func() {
		if len(b) > n {
			b = append(b, ',')
		}
	}
	if d.Role != "" {
		b = appendJSONString(append(b, `"role":`...), d.Role)
	}
	if d.Content != nil {
		sep()
		b = appendJSONString(append(b, `"content":`...), *d.Content)
	}
	if d.ReasoningContent != nil {
		sep()
		b = appendJSONString(append(b, `"reasoning_content":`...), *d.ReasoningContent)
	}
	if len(d.ToolCalls) > 0 {
		sep()
		b = append(b, `"tool_calls":[`...)
		for i := range d.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = d.ToolCalls[i].appendJSON(b)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func (t *ToolCallDelta) appendJSON(b []byte) []byte {
	b = strconv.AppendInt(append(b, `{"index":`...), int64(t.Index), 10)
	if t.ID != "" {
		b = appendJSONString(append(b, `,"id":`...), t.ID)
	}
	if t.Type != "" {
		b = appendJSONString(append(b, `,"type":`...), t.Type)
	}
	b = append(b, `,"function":{`...)
	if t.Function.Name != "" {
		b = appendJSONString(append(b, `"name":`...), t.Function.Name)
		b = append(b, ',')
	}
	b = appendJSONString(append(b, `"arguments":`...), t.Function.Arguments)
	return append(b, "}}"...)
}
