package messages

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/jsonscan"
)

// A request is read in one walk over its bytes, which validates them as
// encoding/json would and keeps raw values, rather than by decoding it
// level by level: a coding agent's request is mostly long strings (tool
// results, file contents), which encoding/json reads about ten times
// slower than the walk, once for each level it decodes. Keys match
// exactly, escapes read, as Anthropic's API matches them; of a member
// given twice, the last counts, as encoding/json has it.

// request is what the walk read of a request.
type request struct {
	// fields are the top-level members other than messages, raw.
	fields map[string]json.RawMessage
	// messages are the messages, read as they were walked; hasMessages
	// reports a messages member that is not null.
	messages    []inMessage
	hasMessages bool
}

// inMessage is one message of the request.
type inMessage struct {
	role       json.RawMessage
	content    []block
	hasContent bool
}

// block is one content block. Every field is the raw JSON the client
// wrote (nil when absent), so text crosses the door byte for byte; Type
// is the block's type, read.
type block struct {
	Type                                string
	Text, Thinking, ID, Name, Input     json.RawMessage
	ToolUseID, Content, IsError, Source json.RawMessage
	CacheControl, Citations             json.RawMessage
}

// reader walks one JSON value, noting the first thing in it the Messages
// API does not allow; the walk goes on to the end, so that a body that
// is not JSON is said to be so first, as encoding/json says it.
type reader struct {
	w   jsonscan.Walker
	err error
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// key returns a key as written between its quotes, escapes read.
func key(raw []byte) []byte {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw
	}
	var s string
	if json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &s) != nil {
		return raw
	}
	return []byte(s)
}

// stringOf returns the JSON string raw, read, and whether it is one.
func stringOf(raw []byte) (string, bool) {
	if !isString(raw) {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	return s, json.Unmarshal(raw, &s) == nil
}

// readRequest reads a request body.
func readRequest(body []byte) (*request, error) {
	r := reader{w: jsonscan.Walk(body)}
	switch c := r.w.Peek(); {
	case c == 0 && len(bytes.TrimSpace(body)) == 0:
		return nil, chat.InvalidRequest("model", "the request body is empty: send a JSON object with \"model\", \"max_tokens\" and \"messages\"")
	case c != '{':
		if !json.Valid(body) {
			return nil, chat.InvalidRequest("", "the request body is not valid JSON")
		}
		return nil, chat.InvalidRequest("", "request body must be a JSON object")
	}
	req := &request{fields: make(map[string]json.RawMessage, 16)}
	r.w.Object(func(raw []byte) {
		k := key(raw)
		if string(k) == "messages" {
			req.messages, req.hasMessages = r.messages()
			return
		}
		req.fields[string(k)] = r.w.Value()
	})
	r.w.End()
	if r.w.Err() != nil {
		return nil, chat.InvalidRequest("", "the request body is not valid JSON")
	}
	return req, r.err
}

// messages reads the messages array.
func (r *reader) messages() ([]inMessage, bool) {
	switch r.w.Peek() {
	case '[':
	case 'n':
		r.w.Value()
		return nil, false
	default:
		r.fail(chat.InvalidRequest("messages", "messages must be an array of messages, not %s", jsonKind(r.w.Value())))
		return nil, true
	}
	var out []inMessage
	r.w.Array(func() { out = append(out, r.message(len(out))) })
	return out, true
}

// message reads message i.
func (r *reader) message(i int) inMessage {
	var m inMessage
	if r.w.Peek() != '{' {
		r.fail(chat.InvalidRequest(fmt.Sprintf("messages[%d]", i), "messages[%d] must be a message object, not %s", i, jsonKind(r.w.Value())))
		return m
	}
	r.w.Object(func(raw []byte) {
		switch string(key(raw)) {
		case "role":
			m.role = r.w.Value()
		case "content":
			m.content, m.hasContent = r.content(func() string { return fmt.Sprintf("messages[%d].content", i) })
		default:
			r.w.Value()
		}
	})
	return m
}

// content reads a content: a string (one text block) or an array of
// blocks; false when it is null. param names it, for an error.
func (r *reader) content(param func() string) ([]block, bool) {
	switch r.w.Peek() {
	case '"':
		return []block{{Type: "text", Text: r.w.Value()}}, true
	case '[':
	case 'n':
		r.w.Value()
		return nil, false
	default:
		r.fail(chat.InvalidRequest(param(), "%s must be a string or an array of content blocks, not %s", param(), jsonKind(r.w.Value())))
		return nil, true
	}
	var out []block
	r.w.Array(func() { out = append(out, r.block(param, len(out))) })
	return out, true
}

// block reads block j of the content param names.
func (r *reader) block(param func() string, j int) block {
	var b block
	if r.w.Peek() != '{' {
		p := fmt.Sprintf("%s[%d]", param(), j)
		r.fail(chat.InvalidRequest(p, "%s must be a content block object, not %s", p, jsonKind(r.w.Value())))
		return b
	}
	var typ []byte
	r.w.Object(func(raw []byte) {
		v := r.w.Value
		switch string(key(raw)) {
		case "type":
			typ = v()
		case "text":
			b.Text = v()
		case "thinking":
			b.Thinking = v()
		case "id":
			b.ID = v()
		case "name":
			b.Name = v()
		case "input":
			b.Input = v()
		case "tool_use_id":
			b.ToolUseID = v()
		case "content":
			b.Content = v()
		case "is_error":
			b.IsError = v()
		case "source":
			b.Source = v()
		case "cache_control":
			b.CacheControl = v()
		case "citations":
			b.Citations = v()
		default:
			v()
		}
	})
	if !isNull(typ) {
		var ok bool
		if b.Type, ok = stringOf(typ); !ok {
			p := fmt.Sprintf("%s[%d].type", param(), j)
			r.fail(chat.InvalidRequest(p, "%s must be a string, not %s", p, jsonKind(typ)))
		}
	}
	return b
}

// blocksOf reads a content the walk of the request kept raw (it is
// valid JSON): the system prompt, a tool result's content.
func blocksOf(raw json.RawMessage, param string) ([]block, error) {
	r := reader{w: jsonscan.Walk(raw)}
	bls, _ := r.content(func() string { return param })
	return bls, r.err
}

// objectsOf reads an array of objects the walk kept raw (the tools),
// each as its members, raw; param names the array, for an error.
func objectsOf(raw json.RawMessage, param string) ([]map[string]json.RawMessage, error) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, chat.InvalidRequest(param, "%s must be an array, not %s", param, jsonKind(raw))
	}
	r := reader{w: jsonscan.Walk(raw)}
	var out []map[string]json.RawMessage
	r.w.Array(func() {
		if r.w.Peek() != '{' {
			p := fmt.Sprintf("%s[%d]", param, len(out))
			r.fail(chat.InvalidRequest(p, "%s must be an object, not %s", p, jsonKind(r.w.Value())))
			out = append(out, nil)
			return
		}
		m := make(map[string]json.RawMessage, 4)
		r.w.Object(func(raw []byte) { m[string(key(raw))] = r.w.Value() })
		out = append(out, m)
	})
	return out, r.err
}
