package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/phasegate/phasegate/chat"
)

// Request is a create-response request: the fields the gateway reads or
// echoes. Numbers and free-form objects stay raw, so temperature 0 or a
// schema reach the upstream as the client wrote them.
type Request struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	PreviousResponseID string            `json:"previous_response_id"`
	Store              *bool             `json:"store"`
	Stream             bool              `json:"stream"`
	Background         bool              `json:"background"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        json.RawMessage   `json:"temperature"`
	TopP               json.RawMessage   `json:"top_p"`
	Text               *TextParam        `json:"text"`
	Reasoning          *ReasoningParam   `json:"reasoning"`
	Metadata           json.RawMessage   `json:"metadata"`
	User               string            `json:"user"`
	Conversation       json.RawMessage   `json:"conversation"`
	Prompt             json.RawMessage   `json:"prompt"`
	Include            []string          `json:"include"`
	// These are passed on to an upstream whose chat API has them, else
	// dropped (see Dropped).
	PromptCacheKey   json.RawMessage `json:"prompt_cache_key"`
	SafetyIdentifier json.RawMessage `json:"safety_identifier"`
	ServiceTier      json.RawMessage `json:"service_tier"`
	ClientMetadata   json.RawMessage `json:"client_metadata"`
	Truncation       json.RawMessage `json:"truncation"`

	// items is Input as items: a string input is one user message.
	items []Item
	// toolset is what Tools became (see parseTools).
	toolset toolSet
}

// TextParam is the request's text configuration.
type TextParam struct {
	Format    json.RawMessage `json:"format,omitempty"`
	Verbosity json.RawMessage `json:"verbosity,omitempty"`
}

// ReasoningParam is the request's reasoning configuration.
type ReasoningParam struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

// Stored reports whether the response is to be kept (store defaults to
// true, as OpenAI's).
func (r *Request) Stored() bool { return r.Store == nil || *r.Store }

// Includes reports whether the request's include names v.
func (r *Request) Includes(v string) bool { return slices.Contains(r.Include, v) }

// Items returns the request's input items, as parsed.
func (r *Request) Items() []Item { return r.items }

// References returns the ids of the input's item_reference items.
func (r *Request) References() []string {
	var ids []string
	for _, it := range r.items {
		if it.Type == TypeItemReference {
			ids = append(ids, it.ID)
		}
	}
	return ids
}

// unsupported is the 400 for a feature the gateway does not serve.
func unsupported(param, format string, args ...any) *chat.Error {
	e := chat.InvalidRequest(param, format, args...)
	e.Code = "unsupported_parameter"
	return e
}

// ParseRequest decodes and checks a create-response request. Anything the
// gateway cannot serve is a 400 that names it: background mode,
// conversations, prompt templates, input items of other types. Hosted
// tools are kept aside: ChatBody drops or refuses them.
func ParseRequest(body []byte) (*Request, error) {
	var r Request
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, decodeError(err)
	}
	if r.Model == "" {
		return nil, chat.InvalidRequest("model", "missing required parameter: model")
	}
	if r.Background {
		return nil, unsupported("background", "background mode is not supported by this gateway: send the request without background")
	}
	if len(r.Conversation) > 0 && !isNull(r.Conversation) {
		return nil, unsupported("conversation", "conversations are not supported by this gateway: use previous_response_id or send the history as input")
	}
	if len(r.Prompt) > 0 && !isNull(r.Prompt) {
		return nil, unsupported("prompt", "prompt templates are not supported by this gateway: send instructions and input")
	}
	if r.MaxOutputTokens != nil && *r.MaxOutputTokens < 1 {
		return nil, chat.InvalidRequest("max_output_tokens", "max_output_tokens must be 1 or more, got %d", *r.MaxOutputTokens)
	}
	var err error
	if r.items, err = parseInput(r.Input); err != nil {
		return nil, err
	}
	if r.toolset, err = parseTools(r.Tools); err != nil {
		return nil, err
	}
	return &r, nil
}

// decodeError is the 400 for a body json could not decode, naming the
// field of a type error.
func decodeError(err error) *chat.Error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return chat.InvalidRequest(te.Field, "invalid type for %s: expected %s, got %s", te.Field, te.Type.String(), te.Value)
	}
	return chat.InvalidRequest("", "request body is not valid JSON: %s", err)
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// parseInput reads input as a string (one user message) or a list of
// items.
func parseInput(raw json.RawMessage) ([]Item, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || isNull(raw) {
		return nil, chat.InvalidRequest("input", "missing required parameter: input")
	}
	if raw[0] == '"' {
		return []Item{{Type: TypeMessage, Role: "user", Content: append(json.RawMessage(nil), raw...)}}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, chat.InvalidRequest("input", "input must be a string or a list of items")
	}
	out := make([]Item, 0, len(items))
	for i, b := range items {
		it, err := parseItem(b, fmt.Sprintf("input[%d]", i))
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, nil
}

// parseItem reads one input item; an item with a role and no type is a
// message.
func parseItem(raw json.RawMessage, param string) (Item, error) {
	var it Item
	if err := json.Unmarshal(raw, &it); err != nil {
		return it, chat.InvalidRequest(param, "%s must be an item object: %s", param, err)
	}
	if it.Type == "" && it.Role != "" {
		it.Type = TypeMessage
	}
	switch it.Type {
	case TypeMessage:
		switch it.Role {
		case "user", "system", "developer", "assistant":
		default:
			return it, chat.InvalidRequest(param+".role", "%s.role must be user, system, developer or assistant, got %q", param, it.Role)
		}
		if len(it.Content) == 0 || isNull(it.Content) {
			return it, chat.InvalidRequest(param+".content", "missing required parameter: %s.content", param)
		}
	case TypeFunctionCall:
		// Namespace, when set, names the namespace of the function (as
		// Codex sends a call of one back).
		if it.CallID == "" || it.Name == "" || it.Arguments == nil {
			return it, chat.InvalidRequest(param, "%s: a function_call item needs call_id, name and arguments", param)
		}
	case TypeFunctionCallOutput:
		if it.CallID == "" || len(it.Output) == 0 || isNull(it.Output) {
			return it, chat.InvalidRequest(param, "%s: a function_call_output item needs call_id and output", param)
		}
	case TypeItemReference:
		if it.ID == "" {
			return it, chat.InvalidRequest(param+".id", "missing required parameter: %s.id", param)
		}
	case TypeReasoning:
	case "":
		return it, chat.InvalidRequest(param+".type", "missing required parameter: %s.type", param)
	default:
		return it, unsupported(param+".type", "input items of type %q are not supported by this gateway: it serves messages, function calls and their outputs, reasoning and item references", it.Type)
	}
	return it, nil
}

// NotFound is the 400 for a previous response or an item the store does
// not hold: never stored (store:false), deleted, expired, or another
// client's.
func NotFound(param, what, id string) *chat.Error {
	e := chat.InvalidRequest(param, "%s with id '%s' not found: it was never stored (store: false), was deleted or has expired, or belongs to another key", what, id)
	e.Code = "not_found"
	if what == "Previous response" {
		e.Code = "previous_response_not_found"
	}
	return e
}

// Resolve replaces the item references of input with the items of refs
// (by id). A reference refs lacks is a 400.
func Resolve(input []Item, refs map[string]Item) ([]Item, error) {
	out := make([]Item, 0, len(input))
	for i, it := range input {
		if it.Type != TypeItemReference {
			out = append(out, it)
			continue
		}
		ref, ok := refs[it.ID]
		if !ok || ref.Type == TypeItemReference {
			return nil, NotFound(fmt.Sprintf("input[%d].id", i), "Item", it.ID)
		}
		out = append(out, ref)
	}
	return out, nil
}

// textOf joins the text of a message's content: a string, or parts of
// type input_text, output_text or refusal. Images and files are an
// error: the caller decides where they may go.
func textOf(raw json.RawMessage, param string) (string, []Part, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", nil, chat.InvalidRequest(param, "%s: %s", param, err)
		}
		return s, nil, nil
	}
	var parts []Part
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", nil, chat.InvalidRequest(param, "%s must be a string or a list of content parts", param)
	}
	var b strings.Builder
	for _, p := range parts {
		switch {
		case p.Text != nil && (p.Type == "input_text" || p.Type == "output_text" || p.Type == "text" || p.Type == "reasoning_text" || p.Type == "summary_text"):
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(*p.Text)
		case p.Refusal != nil && p.Type == "refusal":
			b.WriteString(*p.Refusal)
		case p.Type == "input_image" || p.Type == "input_file":
		default:
			return "", nil, chat.InvalidRequest(param, "%s: content parts of type %q are not supported here", param, p.Type)
		}
	}
	return b.String(), parts, nil
}
