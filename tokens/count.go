package tokens

import (
	"bytes"
	"encoding/json"
	"hash/maphash"
	"strings"

	"github.com/phasegate/phasegate/chat"
)

// Framing, from OpenAI's cookbook "How to count tokens with tiktoken"
// (num_tokens_from_messages and num_tokens_for_tools), which match the
// prompt_tokens of gpt-3.5-turbo, gpt-4 and gpt-4o.
const (
	tokensPerMessage = 3 // <|start|>{role/name}\n{content}<|end|>\n
	tokensPerName    = 1
	replyPriming     = 3 // <|start|>assistant<|message|>
	propInit         = 3
	propKey          = 3
	enumInit         = -3
	enumItem         = 3
	funcEnd          = 12
)

// Estimates the cookbook does not give.
const (
	// perToolCall frames one tool call of an assistant message: DeepSeek's
	// template wraps a call in about 8 tokens of markup
	// (<｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json…```
	// <｜tool▁call▁end｜>); OpenAI does not document its own.
	perToolCall = 8
	// Image parts, as OpenAI prices a 1024×1024 image: 85 at detail low,
	// 85 + 4×170 at high. Other non-text parts (audio, files) count the
	// same: their size is not in the request.
	imageLowTokens = 85
	imageTokens    = 765
)

func (c *Counter) key(kind uint8, e *encoding, b []byte) cacheKey {
	return cacheKey{hash: maphash.Bytes(c.seed, b), size: uint32(len(b)), kind: kind, enc: e.id}
}

// messageTokens counts one message, through the cache.
func (c *Counter) messageTokens(e *encoding, m *chat.Message) int {
	return c.cached(kindMessage, e, m.Raw, func() int { return c.countMessage(e, m) })
}

// toolTokens counts one tool definition, through the cache.
func (c *Counter) toolTokens(e *encoding, t *chat.Tool) int {
	return c.cached(kindTool, e, t.Raw, func() int { return c.countTool(e, t) })
}

// cached returns the count of raw from the cache, or counts it and keeps
// the count. Without a raw form there is nothing to key on.
func (c *Counter) cached(kind uint8, e *encoding, raw []byte, count func() int) int {
	if len(raw) == 0 {
		return count()
	}
	k := c.key(kind, e, raw)
	if n, ok := c.cache.get(k); ok {
		return n
	}
	n := count()
	c.cache.put(k, n)
	return n
}

// textTokens counts plain text, through the cache.
func (c *Counter) textTokens(e *encoding, s string) int {
	k := cacheKey{hash: maphash.String(c.seed, s), size: uint32(len(s)), kind: kindText, enc: e.id}
	if n, ok := c.cache.get(k); ok {
		return n
	}
	n := c.countText(e, s)
	c.cache.put(k, n)
	return n
}

// countMessage counts a message as the cookbook does: the framing, then
// every string field (role, content, name…), a name one more. Fields that
// are not shown to the model are skipped: tool_call_id, and the ids and
// types of tool calls. Unknown string fields count: better to overcount
// than to send a prompt the upstream rejects.
func (c *Counter) countMessage(e *encoding, m *chat.Message) int {
	n := tokensPerMessage + c.countText(e, m.Role) + c.countContent(e, m.Content)
	if m.ReasoningContent != nil {
		n += c.countText(e, *m.ReasoningContent)
	}
	for _, tc := range m.ToolCalls {
		n += perToolCall + c.countText(e, tc.Function.Name) + c.countText(e, tc.Function.Arguments)
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(m.Raw, &fields) != nil {
		return n
	}
	for k, v := range fields {
		switch k {
		case "role", "content", "reasoning_content", "tool_calls", "tool_call_id":
		case "name":
			n += tokensPerName + c.countText(e, jsonString(v))
		case "function_call": // deprecated form of a single tool call
			var f chat.FunctionCall
			if json.Unmarshal(v, &f) == nil {
				n += perToolCall + c.countText(e, f.Name) + c.countText(e, f.Arguments)
			}
		default:
			if len(v) > 0 && v[0] == '"' {
				n += c.countText(e, jsonString(v))
			}
		}
	}
	return n
}

// countContent counts message content: a string, an array of parts or
// null.
func (c *Counter) countContent(e *encoding, raw json.RawMessage) int {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0
	}
	if raw[0] == '"' {
		return c.countText(e, jsonString(raw))
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Refusal  string `json:"refusal"`
		ImageURL struct {
			Detail string `json:"detail"`
		} `json:"image_url"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return c.countText(e, string(raw))
	}
	n := 0
	for _, p := range parts {
		switch p.Type {
		case "text":
			n += c.countText(e, p.Text)
		case "refusal":
			n += c.countText(e, p.Refusal)
		case "image_url":
			if p.ImageURL.Detail == "low" {
				n += imageLowTokens
			} else {
				n += imageTokens
			}
		default:
			n += imageTokens
		}
	}
	return n
}

// countTool counts a tool definition as the cookbook's
// num_tokens_for_tools does for flat schemas: the function's
// "name:description", then per property "name:type:description" and its
// enum values. What it does not cover (nested schemas, items, defaults,
// $defs) counts as compact JSON text, which overestimates a little. A tool
// that is not a function counts as its JSON text.
func (c *Counter) countTool(e *encoding, t *chat.Tool) int {
	if t.Type != "" && t.Type != "function" {
		return c.countText(e, compact(t.Raw))
	}
	f := t.Function
	n := e.funcInit + c.countText(e, f.Name+":"+strings.TrimSuffix(f.Description, "."))
	var params map[string]json.RawMessage
	if json.Unmarshal(f.Parameters, &params) != nil {
		return n
	}
	for k, v := range params {
		switch k {
		case "type", "required":
		case "properties":
			n += c.countProperties(e, v)
		default:
			n += c.countText(e, k+":"+compact(v))
		}
	}
	return n
}

func (c *Counter) countProperties(e *encoding, raw json.RawMessage) int {
	var props map[string]map[string]json.RawMessage
	if json.Unmarshal(raw, &props) != nil {
		return c.countText(e, compact(raw))
	}
	if len(props) == 0 {
		return 0
	}
	n := propInit
	for name, p := range props {
		n += propKey
		typ := jsonString(p["type"])
		if typ == "" {
			typ = compact(p["type"])
		}
		desc := strings.TrimSuffix(jsonString(p["description"]), ".")
		n += c.countText(e, name+":"+typ+":"+desc)
		for k, v := range p {
			switch k {
			case "type", "description":
			case "enum":
				var items []json.RawMessage
				if json.Unmarshal(v, &items) != nil {
					n += c.countText(e, compact(v))
					continue
				}
				n += enumInit
				for _, it := range items {
					s := jsonString(it)
					if s == "" {
						s = compact(it)
					}
					n += enumItem + c.countText(e, s)
				}
			default:
				n += c.countText(e, k+":"+compact(v))
			}
		}
	}
	return n
}

// jsonString decodes a JSON string; anything else is "".
func jsonString(raw json.RawMessage) string {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
