package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
)

// Request is a chat completion request: the raw top-level fields in their
// original order, and typed views of the fields the gateway decides on.
// Its zero value is not usable; build one with ParseRequest.
//
// A Request is not safe for concurrent use.
type Request struct {
	keys   []string
	fields map[string]json.RawMessage

	// Typed views, refreshed by ParseRequest and by the setters.
	Model    string
	Stream   bool
	Messages []Message
	Tools    []Tool
	// N is the number of choices asked for; 0 when absent.
	N int
	// MaxTokens is max_completion_tokens, or else max_tokens; 0 when absent.
	MaxTokens int
	// IncludeUsage reports stream_options.include_usage.
	IncludeUsage bool
}

// ParseRequest decodes and validates a chat completion request body. A body
// that is not a JSON object, lacks a model or has no messages is an
// *Error with status 400.
func ParseRequest(body []byte) (*Request, error) {
	r := &Request{fields: make(map[string]json.RawMessage, 16)}
	if len(bytes.TrimSpace(body)) == 0 {
		// Nothing was sent, so the first required parameter is missing.
		return nil, InvalidRequest("model", "the request body is empty: send a JSON object with \"model\" and \"messages\"")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, notJSON(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, InvalidRequest("", "request body must be a JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, notJSON(err)
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			// A syntax error is the body's, not one parameter's: param
			// stays null, as OpenAI answers for a body it cannot parse.
			return nil, notJSON(err)
		}
		if _, dup := r.fields[key]; !dup {
			r.keys = append(r.keys, key)
		}
		r.fields[key] = raw
	}
	if _, err := dec.Token(); err != nil {
		return nil, notJSON(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, InvalidRequest("", "request body has data after the JSON object")
	}
	if err := r.decodeViews(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Request) decodeViews() error {
	if err := r.decodeScalars(); err != nil {
		return err
	}
	raw, ok := r.fields["messages"]
	if !ok || isNull(raw) {
		return InvalidRequest("messages", "missing required parameter: 'messages'")
	}
	// Decoded in one go; only a request that fails is looked at element by
	// element, to say what is wrong with it.
	r.Messages = nil
	if err := json.Unmarshal(raw, &r.Messages); err != nil {
		return elementsError("messages", "message", raw, err)
	}
	if len(r.Messages) == 0 {
		return InvalidRequest("messages", "messages must contain at least one message")
	}
	for i, m := range r.Messages {
		if m.Role == "" {
			param := fmt.Sprintf("messages[%d]", i)
			return InvalidRequest(param+".role", "%s has no role: every message needs one (system, user, assistant or tool)", param)
		}
	}
	r.Tools = nil
	raw, ok = r.fields["tools"]
	if !ok || isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, &r.Tools); err != nil {
		return elementsError("tools", "tool", raw, err)
	}
	return nil
}

// elementsError says what is wrong with the array of objects at key (the
// messages, the tools), of which each element is a what, given the error
// decoding it: the array itself, or the first element that is not an
// object or holds a value of the wrong kind.
func elementsError(key, what string, raw json.RawMessage, err error) *Error {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return InvalidRequest(key, "%s must be an array of %s objects, not %s", key, what, jsonKind(raw))
	}
	for i, item := range items {
		param := fmt.Sprintf("%s[%d]", key, i)
		if isNull(item) && what == "message" {
			return InvalidRequest(param+".role", "%s has no role: every message needs one (system, user, assistant or tool)", param)
		}
		if item[0] != '{' {
			return InvalidRequest(param, "%s must be a %s object, not %s", param, what, jsonKind(item))
		}
		var v any = &Message{}
		if what == "tool" {
			v = &Tool{}
		}
		if err := json.Unmarshal(item, v); err != nil {
			return typeError(param, err)
		}
	}
	return typeError(key, err)
}

// decodeScalars refreshes the views of the scalar fields.
func (r *Request) decodeScalars() error {
	var model string
	if err := r.decode("model", &model); err != nil {
		return err
	}
	if model == "" {
		return InvalidRequest("model", "you must provide a model parameter")
	}
	r.Model = model
	r.Stream = false
	if err := r.decode("stream", &r.Stream); err != nil {
		return err
	}
	var n *int
	if err := r.decode("n", &n); err != nil {
		return err
	}
	r.N = 0
	if n != nil {
		r.N = *n
	}
	var maxTokens, maxCompletion int
	if err := r.decode("max_tokens", &maxTokens); err != nil {
		return err
	}
	if err := r.decode("max_completion_tokens", &maxCompletion); err != nil {
		return err
	}
	r.MaxTokens = maxTokens
	if maxCompletion > 0 {
		r.MaxTokens = maxCompletion
	}
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	if err := r.decode("stream_options", &so); err != nil {
		return err
	}
	r.IncludeUsage = so.IncludeUsage
	return nil
}

// decode unmarshals field key into v; an absent or null field leaves v alone.
func (r *Request) decode(key string, v any) error {
	raw, ok := r.fields[key]
	if !ok || isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return typeError(key, err)
	}
	return nil
}

// notJSON is the error for a body that does not parse.
func notJSON(err error) *Error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return InvalidRequest("", "the request body is not valid JSON: %v (at byte %d)", se, se.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return InvalidRequest("", "the request body is not valid JSON: it ends before the JSON object does")
	}
	return InvalidRequest("", "the request body is not valid JSON: %v", err)
}

// typeError turns a decoding error of the value at param into what is
// wrong in the request's own terms: the parameter and the JSON it must be,
// never a Go type.
func typeError(param string, err error) *Error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return InvalidRequest(param, "%s is not valid: %v", param, err)
	}
	if te.Field != "" {
		param += "." + te.Field
	}
	return InvalidRequest(param, "%s must be %s, not %s", param, jsonType(te.Type), article(te.Value))
}

// jsonType names the JSON a Go type decodes from.
func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonType(t.Elem())
	}
	return "an object"
}

// jsonKind names the kind of a raw JSON value, with its article.
func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// article puts an article before a JSON kind as encoding/json names it
// ("string", "number 1.5", "object").
func article(v string) string {
	switch {
	case v == "" || v == "null":
		return "null"
	case strings.HasPrefix(v, "number "):
		return "a number (" + strings.TrimPrefix(v, "number ") + ")"
	case v[0] == 'a' || v[0] == 'o':
		return "an " + v
	}
	return "a " + v
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// Field returns the raw value of a top-level field and whether it is present.
func (r *Request) Field(key string) (json.RawMessage, bool) {
	raw, ok := r.fields[key]
	return raw, ok
}

// Set replaces or adds a top-level field. v is marshalled unless it is
// already a json.RawMessage. Setting "messages" or "tools" through Set is
// refused: use SetMessages and SetTools, which keep the views in step.
func (r *Request) Set(key string, v any) error {
	switch key {
	case "messages", "tools":
		return fmt.Errorf("set %q: use the typed setter", key)
	}
	raw, ok := v.(json.RawMessage)
	if !ok {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("set %q: %w", key, err)
		}
		raw = b
	}
	old, had := r.fields[key]
	r.set(key, raw)
	if err := r.decodeScalars(); err != nil {
		// Refused: the request stays as it was, raw form and views.
		if had {
			r.fields[key] = old
		} else {
			r.Delete(key)
		}
		_ = r.decodeScalars()
		return err
	}
	return nil
}

func (r *Request) set(key string, raw json.RawMessage) {
	if _, ok := r.fields[key]; !ok {
		r.keys = append(r.keys, key)
	}
	r.fields[key] = raw
}

// Delete removes a top-level field; deleting an absent field does nothing.
func (r *Request) Delete(key string) {
	if _, ok := r.fields[key]; !ok {
		return
	}
	delete(r.fields, key)
	for i, k := range r.keys {
		if k == key {
			r.keys = append(r.keys[:i], r.keys[i+1:]...)
			break
		}
	}
	switch key {
	case "tools":
		r.Tools = nil
	case "stream":
		r.Stream = false
	case "n":
		r.N = 0
	case "stream_options":
		r.IncludeUsage = false
	}
}

// SetMessages replaces the messages. Each message is written from its raw
// form, so fields the gateway does not know survive.
func (r *Request) SetMessages(msgs []Message) {
	r.set("messages", encodeList(msgs, func(m Message) json.RawMessage { return m.Raw }))
	r.Messages = msgs
}

// SetTools replaces the tool list; an empty list removes the field, since
// the upstreams reject "tools": [].
func (r *Request) SetTools(tools []Tool) {
	if len(tools) == 0 {
		r.Delete("tools")
		return
	}
	r.set("tools", encodeList(tools, func(t Tool) json.RawMessage { return t.Raw }))
	r.Tools = tools
}

func encodeList[T any](items []T, raw func(T) json.RawMessage) json.RawMessage {
	n := 2
	for _, it := range items {
		n += len(raw(it)) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, raw(it)...)
	}
	return append(b, ']')
}

// EncodedLen returns the length of Encode's output without encoding.
func (r *Request) EncodedLen() int {
	n := 2
	for _, k := range r.keys {
		n += len(k) + len(r.fields[k]) + 4
	}
	return n
}

// Encode writes the request as JSON, fields in their original order.
func (r *Request) Encode() []byte {
	n := 2
	for _, k := range r.keys {
		n += len(k) + len(r.fields[k]) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, k := range r.keys {
		if i > 0 {
			b = append(b, ',')
		}
		kb, _ := json.Marshal(k) // a string always marshals
		b = append(b, kb...)
		b = append(b, ':')
		b = append(b, r.fields[k]...)
	}
	return append(b, '}')
}

// Clone returns a deep copy whose edits do not reach r.
func (r *Request) Clone() *Request {
	c := *r
	c.keys = append([]string(nil), r.keys...)
	c.fields = make(map[string]json.RawMessage, len(r.fields))
	for k, v := range r.fields {
		c.fields[k] = v // raw values are never mutated in place
	}
	c.Messages = append([]Message(nil), r.Messages...)
	c.Tools = append([]Tool(nil), r.Tools...)
	return &c
}

// Error is an error in OpenAI's shape, with the HTTP status it answers with.
type Error struct {
	Status  int    `json:"-"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"`
	Code    any    `json:"code"`
}

func (e *Error) Error() string { return e.Message }

// Body returns the error as {"error":{...}}.
func (e *Error) Body() []byte {
	b, _ := json.Marshal(struct {
		Error *Error `json:"error"`
	}{e})
	return b
}

// Error types, as OpenAI spells them.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeServer         = "server_error"
	TypeUpstream       = "upstream_error"
	TypeTimeout        = "timeout_error"
)

// InvalidRequest returns a 400 invalid_request_error about param.
func InvalidRequest(param, format string, args ...any) *Error {
	e := &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...), Type: TypeInvalidRequest}
	if param != "" {
		e.Param = param
	}
	return e
}

// AsError returns err as an *Error, or a generic 500 server_error that
// reveals nothing of err (the caller logs err itself).
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Status: http.StatusInternalServerError, Message: "the gateway failed to handle the request", Type: TypeServer}
}
