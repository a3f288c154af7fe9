package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"reflect"
	"slices"

	"github.com/phasegate/phasegate/chat"
)

// HostedTools says what becomes of the tools Anthropic runs on its own
// platform (web search, code execution, the text editor, bash, computer
// use, web fetch: any tool whose type is not custom), which a chat
// upstream cannot run.
type HostedTools string

const (
	// HostedDrop drops them before the upstream sees the request and
	// names them in Translation.Dropped. The zero value drops.
	HostedDrop HostedTools = "drop"
	// HostedRefuse answers a request that declares one with a 400.
	HostedRefuse HostedTools = "refuse"
)

// Config is what the translation needs to know of the upstream and of
// the operator's choices. Its zero value suits an OpenAI upstream that
// takes no images and has no top_k, with hosted tools dropped.
type Config struct {
	// DeepSeek selects DeepSeek's dialect: thinking blocks go back as the
	// assistant message's reasoning_content (thinking mode answers 400
	// without it), the request's thinking turns thinking mode on or off,
	// and max_tokens is max_tokens. Otherwise thinking is dropped (an
	// OpenAI model that does not reason answers 400 to reasoning_effort)
	// and max_tokens is max_completion_tokens.
	DeepSeek bool
	// Images reports that the upstream takes image_url content parts;
	// false answers a request with an image block with a 400.
	Images bool
	// TopK reports that the upstream takes top_k; false drops it.
	TopK bool
	// HostedTools is what becomes of hosted tools; "" is HostedDrop.
	HostedTools HostedTools
	// Limits bound the request's shape; zero fields take their defaults.
	Limits Limits
	// Upstream, when set, says what the upstream serving a model takes:
	// it is asked once the request's model is read, before anything else
	// is translated, and the Config it returns is the one the translation
	// goes on with (but for its Limits and Upstream: the shape was checked
	// before the model was read).
	Upstream func(model string) Config
}

// Translation is a Messages request translated for the chat pipeline.
type Translation struct {
	// Body is the chat completion request body.
	Body []byte
	// Dropped names, sorted by Param, what the request held that a chat
	// upstream cannot use and the translation left out: top-level fields
	// ("context_management"), fields of blocks and tools
	// ("cache_control"), blocks ("redacted_thinking") and hosted tools
	// (by type, "web_search_20250305"), each with its Field, one of
	// DropFields. A Param holds only letters, digits and "._-:" (anything
	// else in a client's key is written "_"), so it may go in a header as
	// it is; at most maxDropped are named, the last being "more" when
	// there were more.
	Dropped []chat.Drop
	// Stream reports that the client asked for a stream.
	Stream bool
	// Reply is what the answer needs to know of the request.
	Reply Reply
}

// Reply is what a message or a stream repeats of, or decides by, the
// request it answers.
type Reply struct {
	// Model is the model the client asked for, which the message names.
	Model string
	// StopSequences are the request's stop_sequences: a finish an
	// upstream says one of them caused is a stop_sequence stop.
	StopSequences []string
	// InputTokens is the gateway's count of the prompt, reported until
	// the upstream reports its own (message_start has no other); 0 when
	// the gateway did not count it.
	InputTokens int
	// ToolUseIDs are the ids of the tool_use blocks of the request's
	// history, as written between their quotes. Anthropic's API wants
	// every tool_use id of a conversation unique (Claude Code drops a
	// call whose id it has seen), where a chat upstream's call ids need
	// only be unique within one answer: a call whose id is one of these
	// gets an id of the gateway's (toolu_…).
	ToolUseIDs map[string]bool
}

// topLevel are the request's top-level fields the translation reads;
// every other one is dropped and named.
var topLevel = map[string]bool{"model": true, "messages": true, "max_tokens": true, "system": true, "metadata": true,
	"stop_sequences": true, "stream": true, "temperature": true, "top_p": true, "top_k": true, "tools": true,
	"tool_choice": true, "thinking": true}

// Translate translates a Messages request body into a chat completion
// request body. A body over c.Limits is refused before it is decoded;
// anything else the chat API cannot say is dropped and named, or, where
// leaving it out would answer another question than the one asked (an
// image the upstream cannot see, a hosted tool under HostedRefuse), a
// 400. Every error is a *chat.Error.
func Translate(body []byte, c Config) (*Translation, error) {
	return translate(body, c, false)
}

// CountBody translates the body of a count_tokens request (a Messages
// request without max_tokens) into the chat request whose prompt the
// gateway's counter counts.
func CountBody(body []byte, c Config) (*Translation, error) {
	return translate(body, c, true)
}

func translate(body []byte, c Config, count bool) (*Translation, error) {
	c.Limits = c.Limits.withDefaults()
	if err := checkShape(body, c.Limits); err != nil {
		return nil, err
	}
	req, err := readRequest(body)
	if err != nil {
		return nil, err
	}
	fields := req.fields
	b := &builder{cfg: c, count: count}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if !topLevel[k] {
			b.drop(k) // in order, so that which are named past maxDropped is stable
		}
	}
	if err := thread(fields["thread"]); err != nil {
		return nil, err
	}
	out := &chatRequest{}
	if err := b.scalars(fields, out); err != nil {
		return nil, err
	}
	if err := b.sampling(fields, out); err != nil {
		return nil, err
	}
	if err := b.system(fields["system"]); err != nil {
		return nil, err
	}
	if err := b.messages(req); err != nil {
		return nil, err
	}
	if err := b.tools(fields["tools"], fields["tool_choice"], out); err != nil {
		return nil, err
	}
	out.Messages = b.msgs
	t := &Translation{Body: out.appendJSON(make([]byte, 0, len(body)+len(body)/8+256)), Dropped: b.dropped.list(), Stream: out.Stream,
		Reply: Reply{Model: out.Model, StopSequences: out.Stop, ToolUseIDs: b.ids}}
	return t, nil
}

// builder gathers the chat request as the translation goes.
type builder struct {
	cfg     Config
	count   bool
	dropped names
	msgs    []chatMessage
	// ids are the history's tool_use ids (Reply.ToolUseIDs).
	ids map[string]bool
}

// drop names a dropped field or block whose name says its Field.
func (b *builder) drop(name string) { b.dropped.add(name, fieldOf(name)) }

// dropAs names a dropped part of Field field.
func (b *builder) dropAs(name, field string) { b.dropped.add(name, field) }

// scalars reads model, max_tokens, stream and metadata.
func (b *builder) scalars(f map[string]json.RawMessage, out *chatRequest) error {
	if err := decode(f, "model", &out.Model); err != nil {
		return err
	}
	if out.Model == "" {
		return chat.InvalidRequest("model", "missing required parameter: model")
	}
	if u := b.cfg.Upstream; u != nil {
		c := u(out.Model)
		c.Limits, c.Upstream = b.cfg.Limits, nil
		b.cfg = c
	}
	var maxTokens *int
	if err := decode(f, "max_tokens", &maxTokens); err != nil {
		return err
	}
	switch {
	case maxTokens == nil && !b.count:
		return chat.InvalidRequest("max_tokens", "missing required parameter: max_tokens")
	case maxTokens != nil && *maxTokens < 1:
		return chat.InvalidRequest("max_tokens", "max_tokens must be 1 or more, got %d", *maxTokens)
	case maxTokens != nil && !b.count:
		if b.cfg.DeepSeek {
			out.MaxTokens = maxTokens
		} else {
			out.MaxCompletionTokens = maxTokens
		}
	}
	if !b.count {
		if err := decode(f, "stream", &out.Stream); err != nil {
			return err
		}
	}
	var meta map[string]json.RawMessage
	if err := decode(f, "metadata", &meta); err != nil {
		return err
	}
	for k, v := range meta {
		if k != "user_id" {
			b.drop("metadata." + k)
			continue
		}
		if err := decodeRaw(v, "metadata.user_id", &out.User); err != nil {
			return err
		}
	}
	return nil
}

// sampling reads stop_sequences, temperature, top_p, top_k and thinking.
func (b *builder) sampling(f map[string]json.RawMessage, out *chatRequest) error {
	if err := decode(f, "stop_sequences", &out.Stop); err != nil {
		return err
	}
	for _, k := range []string{"temperature", "top_p", "top_k"} {
		raw := f[k]
		if isNull(raw) {
			continue
		}
		if !isNumber(raw) {
			return chat.InvalidRequest(k, "%s must be a number, not %s", k, jsonKind(raw))
		}
		switch {
		case k == "temperature":
			out.Temperature = raw
		case k == "top_p":
			out.TopP = raw
		case b.cfg.TopK:
			out.TopK = raw
		default:
			b.drop(k)
		}
	}
	return b.thinking(f["thinking"], out)
}

// thinking maps the request's thinking onto DeepSeek's one switch, as
// the Responses door maps reasoning.effort: enabled (whatever its
// budget) and adaptive turn thinking mode on, disabled turns it off, and
// a request that says nothing leaves the upstream's default.
func (b *builder) thinking(raw json.RawMessage, out *chatRequest) error {
	if isNull(raw) {
		return nil
	}
	var t struct {
		Type         string `json:"type"`
		BudgetTokens *int   `json:"budget_tokens"`
	}
	if err := decodeRaw(raw, "thinking", &t); err != nil {
		return err
	}
	mode := ""
	switch t.Type {
	case "enabled", "adaptive":
		mode = "enabled"
	case "disabled":
		mode = "disabled"
	default:
		return chat.InvalidRequest("thinking.type", "thinking.type must be enabled, adaptive or disabled, got %q", short(t.Type))
	}
	if !b.cfg.DeepSeek || b.count {
		if !b.count {
			b.drop("thinking")
		}
		return nil
	}
	out.Thinking = mode
	return nil
}

// CodeThreadNotFound is the error code of a request that continues a
// message thread (thread.type continue): the gateway holds no threads, so
// none is found. Anthropic's SDKs answer it by sending the whole
// conversation again under a new thread (which the gateway reads as any
// request, dropping thread), so their tool runners work through the
// gateway, at one refused request a turn.
const CodeThreadNotFound = "thread_not_found"

// thread refuses a request that continues a message thread; one that
// creates a thread is a request like any other (thread is dropped).
func thread(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var t struct {
		Type              string `json:"type"`
		PreviousMessageID string `json:"previous_message_id"`
	}
	if err := decodeRaw(raw, "thread", &t); err != nil {
		return err
	}
	if t.Type != "continue" {
		return nil
	}
	e := chat.InvalidRequest("thread.previous_message_id", "message thread %q not found: this gateway holds no message threads; send the whole conversation", short(t.PreviousMessageID))
	e.Status, e.Code = http.StatusNotFound, CodeThreadNotFound
	return e
}

// decode unmarshals field key of f into v; an absent or null field
// leaves v alone.
func decode(f map[string]json.RawMessage, key string, v any) error {
	raw, ok := f[key]
	if !ok || isNull(raw) {
		return nil
	}
	return decodeRaw(raw, key, v)
}

// decodeRaw unmarshals raw, the value at param, into v: a value of the
// wrong kind is a 400 that names param.
func decodeRaw(raw json.RawMessage, param string, v any) error {
	err := json.Unmarshal(raw, v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return chat.InvalidRequest(param, "%s is not valid: %v", param, err)
	}
	if te.Field != "" {
		param += "." + te.Field
	}
	return chat.InvalidRequest(param, "%s must be %s, not %s", param, jsonType(te.Type), te.Value)
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// isNumber reports whether raw starts as a JSON number does (it is
// valid JSON: the decoder read it).
func isNumber(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9')
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

// brief is raw for an error message: a short string as it is, anything
// else by its kind.
func brief(raw json.RawMessage) string {
	if isString(raw) && len(raw) <= 42 {
		return string(raw)
	}
	return jsonKind(raw)
}

// short is s cut to 40 bytes, for an error message.
func short(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
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
