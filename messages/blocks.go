package messages

import (
	"encoding/json"
	"fmt"

	"github.com/phasegate/phasegate/chat"
)

// where names block j of message i, for an error.
func where(i, j int) string { return fmt.Sprintf("messages[%d].content[%d]", i, j) }

// isString reports whether raw is a JSON string.
func isString(raw json.RawMessage) bool { return len(raw) >= 2 && raw[0] == '"' }

// textJoin joins JSON strings into one, a newline between two, without
// decoding them: a string's body is valid inside another.
type textJoin struct {
	first json.RawMessage
	b     []byte
	n     int
}

func (t *textJoin) add(raw json.RawMessage) {
	switch t.n {
	case 0:
		t.first = raw
	case 1:
		t.b = append(append(t.b, t.first[:len(t.first)-1]...), `\n`...)
		t.b = append(t.b, raw[1:]...)
	default:
		t.b = append(append(t.b[:len(t.b)-1], `\n`...), raw[1:]...)
	}
	t.n++
}

// json returns the joined string; "" when nothing was added.
func (t *textJoin) json() json.RawMessage {
	switch t.n {
	case 0:
		return json.RawMessage(`""`)
	case 1:
		return t.first
	}
	return t.b
}

// fields drops the fields of a block a chat upstream has no place for.
func (b *builder) fields(bl *block) {
	if !isNull(bl.CacheControl) {
		b.drop("cache_control")
	}
	if !isNull(bl.Citations) {
		b.drop("citations")
	}
}

// messages translates the messages. Consecutive messages of one role are
// one turn, as Anthropic's API reads them. A system message among them
// (Claude Code sends one after the user's first) is a chat system message
// in the same place.
func (b *builder) messages(req *request) error {
	if !req.hasMessages {
		return chat.InvalidRequest("messages", "missing required parameter: messages")
	}
	msgs := req.messages
	if len(msgs) == 0 {
		return chat.InvalidRequest("messages", "messages must hold at least one message")
	}
	roles := make([]string, len(msgs))
	for i, m := range msgs {
		roles[i], _ = stringOf(m.role)
		switch {
		case isNull(m.role):
			return chat.InvalidRequest(fmt.Sprintf("messages[%d].role", i), "missing required parameter: messages[%d].role", i)
		case roles[i] != "user" && roles[i] != "assistant" && roles[i] != "system":
			return chat.InvalidRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role must be user, assistant or system, not %s", i, brief(m.role))
		}
		if !m.hasContent {
			return chat.InvalidRequest(fmt.Sprintf("messages[%d].content", i), "missing required parameter: messages[%d].content", i)
		}
	}
	for i := 0; i < len(msgs); {
		j := i + 1
		for j < len(msgs) && roles[j] == roles[i] {
			j++
		}
		var err error
		switch roles[i] {
		case "user":
			err = b.userTurn(msgs, i, j)
		case "system":
			err = b.systemTurn(msgs, i, j)
		default:
			err = b.assistantTurn(msgs, i, j)
		}
		if err != nil {
			return err
		}
		i = j
	}
	return nil
}

// systemTurn translates system messages [from, to) into one chat
// system message in their place: their text blocks joined, any other
// block dropped.
func (b *builder) systemTurn(msgs []inMessage, from, to int) error {
	var text textJoin
	for i := from; i < to; i++ {
		bls := msgs[i].content
		for j := range bls {
			bl := &bls[j]
			b.fields(bl)
			switch {
			case bl.Type == "":
				return chat.InvalidRequest(where(i, j)+".type", "missing required parameter: %s.type", where(i, j))
			case bl.Type != "text":
				b.dropAs("system."+bl.Type, "content")
			case !isString(bl.Text):
				return chat.InvalidRequest(where(i, j)+".text", "%s.text must be a string", where(i, j))
			default:
				text.add(bl.Text)
			}
		}
	}
	if text.n > 0 {
		b.msgs = append(b.msgs, chatMessage{Role: "system", Content: text.json()})
	}
	return nil
}

// userTurn translates user messages [from, to): their tool results as
// tool messages first (the chat API wants them right after the call),
// then one user message with their text and images.
func (b *builder) userTurn(msgs []inMessage, from, to int) error {
	var results []chatMessage
	var text textJoin
	var parts [][]byte
	images := false
	for i := from; i < to; i++ {
		bls := msgs[i].content
		for j := range bls {
			bl := &bls[j]
			b.fields(bl)
			switch bl.Type {
			case "text":
				if !isString(bl.Text) {
					return chat.InvalidRequest(where(i, j)+".text", "%s.text must be a string", where(i, j))
				}
				text.add(bl.Text)
				parts = append(parts, append(append([]byte(`{"type":"text","text":`), bl.Text...), '}'))
			case "image":
				part, err := b.image(bl, where(i, j))
				if err != nil {
					return err
				}
				parts, images = append(parts, part), true
			case "tool_result":
				m, err := b.toolResult(bl, where(i, j))
				if err != nil {
					return err
				}
				results = append(results, m)
			case "":
				return chat.InvalidRequest(where(i, j)+".type", "missing required parameter: %s.type", where(i, j))
			default:
				b.dropAs(bl.Type, blockField(bl.Type))
			}
		}
	}
	b.msgs = append(b.msgs, results...)
	switch {
	case images:
		b.msgs = append(b.msgs, chatMessage{Role: "user", Content: joinArray(parts)})
	case text.n > 0 || len(results) == 0:
		b.msgs = append(b.msgs, chatMessage{Role: "user", Content: text.json()})
	}
	return nil
}

func joinArray(items [][]byte) json.RawMessage {
	out := []byte{'['}
	for i, it := range items {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, it...)
	}
	return append(out, ']')
}

// image translates an image block into a chat image_url part.
func (b *builder) image(bl *block, param string) ([]byte, error) {
	if !b.cfg.Images {
		e := chat.InvalidRequest(param, "%s is an image, and the upstream that serves this model takes no images: send the request without it, or to a model that reads images", param)
		e.Code = "unsupported_parameter"
		return nil, e
	}
	var src struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	}
	if isNull(bl.Source) {
		return nil, chat.InvalidRequest(param+".source", "missing required parameter: %s.source", param)
	}
	if err := decodeRaw(bl.Source, param+".source", &src); err != nil {
		return nil, err
	}
	var url string
	switch src.Type {
	case "base64":
		url = "data:" + src.MediaType + ";base64," + src.Data
	case "url":
		url = src.URL
	default:
		e := chat.InvalidRequest(param+".source.type", "image sources of type %q are not supported by this gateway: send the image as base64 or by url (it holds no files)", short(src.Type))
		e.Code = "unsupported_parameter"
		return nil, e
	}
	return append(appendString([]byte(`{"type":"image_url","image_url":{"url":`), url), "}}"...), nil
}

// toolResult translates a tool_result block into a tool message. Its
// text blocks are joined; an error result says so first, since the chat
// API has no is_error.
func (b *builder) toolResult(bl *block, param string) (chatMessage, error) {
	if !isString(bl.ToolUseID) {
		return chatMessage{}, chat.InvalidRequest(param+".tool_use_id", "%s.tool_use_id must be a string", param)
	}
	isError := string(bl.IsError) == "true"
	if !isNull(bl.IsError) && !isError && string(bl.IsError) != "false" {
		return chatMessage{}, chat.InvalidRequest(param+".is_error", "%s.is_error must be true or false", param)
	}
	var text textJoin
	if !isNull(bl.Content) {
		inner, err := blocksOf(bl.Content, param+".content")
		if err != nil {
			return chatMessage{}, err
		}
		for k := range inner {
			b.fields(&inner[k])
			if inner[k].Type != "text" || !isString(inner[k].Text) {
				b.dropAs("tool_result."+inner[k].Type, "content")
				continue
			}
			text.add(inner[k].Text)
		}
	}
	content := text.json()
	if isError {
		content = append([]byte(`"Error: `), content[1:]...)
	}
	return chatMessage{Role: "tool", ToolCallID: bl.ToolUseID, Content: content}, nil
}

// assistantTurn translates assistant messages [from, to) into one
// assistant message: its thinking as reasoning_content (DeepSeek's
// thinking mode wants it back), its text, its tool calls.
func (b *builder) assistantTurn(msgs []inMessage, from, to int) error {
	var text, reasoning textJoin
	var calls []chatCall
	for i := from; i < to; i++ {
		bls := msgs[i].content
		for j := range bls {
			bl := &bls[j]
			b.fields(bl)
			switch bl.Type {
			case "text":
				if !isString(bl.Text) {
					return chat.InvalidRequest(where(i, j)+".text", "%s.text must be a string", where(i, j))
				}
				text.add(bl.Text)
			case "thinking":
				if !isString(bl.Thinking) {
					return chat.InvalidRequest(where(i, j)+".thinking", "%s.thinking must be a string", where(i, j))
				}
				if !b.cfg.DeepSeek {
					b.drop("thinking")
					continue
				}
				reasoning.add(bl.Thinking)
			case "tool_use":
				c, err := toolCall(bl, where(i, j))
				if err != nil {
					return err
				}
				calls = append(calls, c)
				b.useID(bl.ID)
			case "":
				return chat.InvalidRequest(where(i, j)+".type", "missing required parameter: %s.type", where(i, j))
			default:
				b.dropAs(bl.Type, blockField(bl.Type))
			}
		}
	}
	m := chatMessage{Role: "assistant", ToolCalls: calls}
	if text.n > 0 || len(calls) == 0 {
		m.Content = text.json()
	}
	if reasoning.n > 0 {
		m.Reasoning = reasoning.json()
	}
	b.msgs = append(b.msgs, m)
	return nil
}

// toolCall translates a tool_use block: its input goes as the call's
// arguments, the raw JSON the client sent.
func toolCall(bl *block, param string) (chatCall, error) {
	if !isString(bl.ID) {
		return chatCall{}, chat.InvalidRequest(param+".id", "%s.id must be a string", param)
	}
	if !isString(bl.Name) {
		return chatCall{}, chat.InvalidRequest(param+".name", "%s.name must be a string", param)
	}
	args := bl.Input
	switch {
	case isNull(args):
		args = json.RawMessage("{}")
	case args[0] != '{':
		return chatCall{}, chat.InvalidRequest(param+".input", "%s.input must be an object, not %s", param, jsonKind(args))
	}
	return chatCall{ID: bl.ID, Name: bl.Name, Arguments: args}, nil
}

// useID notes id, a tool_use id of the history (Reply.ToolUseIDs).
func (b *builder) useID(id json.RawMessage) {
	if b.ids == nil {
		b.ids = make(map[string]bool)
	}
	b.ids[string(inner(id))] = true
}

// blockField is the Field of a dropped block of type typ.
func blockField(typ string) string {
	if typ == "redacted_thinking" {
		return typ
	}
	return "content"
}
