package responses

import (
	"encoding/json"
	"fmt"

	"github.com/phasegate/phasegate/chat"
)

// Target is what the translation needs to know of the upstream, and of
// the gateway's own policy.
type Target struct {
	// DeepSeek selects DeepSeek's dialect: reasoning goes back as the
	// assistant message's reasoning_content (thinking mode answers 400
	// without it), reasoning.effort turns thinking mode on or off, and
	// max_output_tokens is max_tokens. Otherwise reasoning.effort is
	// reasoning_effort and max_output_tokens max_completion_tokens.
	DeepSeek bool
	// OpenAI is set when the upstream is OpenAI's own chat API, which has
	// the fields prompt_cache_key, safety_identifier, service_tier and
	// verbosity: they are passed on to it, and dropped for any other.
	OpenAI bool
	// RefuseHosted refuses a request with a tool a chat upstream cannot
	// run with a 400 naming it (HOSTED_TOOLS=refuse); by default such a
	// tool is dropped (see Request.Dropped).
	RefuseHosted bool
	// Sealer opens the encrypted_content of the input's reasoning items;
	// one it cannot open is a 400. Nil leaves encrypted_content unread,
	// and include: [reasoning.encrypted_content] unserved.
	Sealer *Sealer
}

// ChatBody translates a request whose input items are resolved (the
// stored history first, item references replaced, see Resolve) into the
// body of a chat completion request. An input the chat API cannot say is
// a 400.
func ChatBody(r *Request, input []Item, t Target) ([]byte, error) {
	msgs, err := chatMessages(r.Instructions, input, t)
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, chat.InvalidRequest("input", "input holds no message to answer")
	}
	if t.RefuseHosted && r.toolset.refused != nil {
		return nil, r.toolset.refused
	}
	m := map[string]any{"model": r.Model, "messages": msgs}
	if r.Stream {
		m["stream"] = true
		m["stream_options"] = map[string]bool{"include_usage": true}
	}
	if err := chatTools(m, r); err != nil {
		return nil, err
	}
	if err := chatFormat(m, r.Text); err != nil {
		return nil, err
	}
	chatSampling(m, r, t)
	chatShared(m, r, t)
	b, err := json.Marshal(m)
	if err != nil {
		return nil, chat.InvalidRequest("", "request holds a value that cannot be sent on: %s", err)
	}
	return b, nil
}

// chatSampling sets the sampling, length and reasoning parameters.
func chatSampling(m map[string]any, r *Request, t Target) {
	if len(r.Temperature) > 0 && !isNull(r.Temperature) {
		m["temperature"] = r.Temperature
	}
	if len(r.TopP) > 0 && !isNull(r.TopP) {
		m["top_p"] = r.TopP
	}
	if r.User != "" {
		m["user"] = r.User
	}
	if n := r.MaxOutputTokens; n != nil {
		if t.DeepSeek {
			m["max_tokens"] = *n
		} else {
			m["max_completion_tokens"] = *n
		}
	}
	if r.Reasoning == nil || r.Reasoning.Effort == nil {
		return
	}
	effort := *r.Reasoning.Effort
	if !t.DeepSeek {
		m["reasoning_effort"] = effort
		return
	}
	// DeepSeek has one switch: thinking mode on or off.
	mode := "enabled"
	if effort == "none" || effort == "minimal" {
		mode = "disabled"
	}
	m["thinking"] = map[string]string{"type": mode}
}

// chatTools sets tools, tool_choice and parallel_tool_calls.
func chatTools(m map[string]any, r *Request) error {
	if fns := r.toolset.fns; len(fns) > 0 {
		tools := make([]map[string]any, len(fns))
		for i, t := range fns {
			fn := map[string]any{"name": t.chat()}
			if len(t.Description) > 0 && !isNull(t.Description) {
				fn["description"] = t.Description
			}
			if len(t.Parameters) > 0 && !isNull(t.Parameters) {
				fn["parameters"] = t.Parameters
			}
			if len(t.Strict) > 0 && !isNull(t.Strict) {
				fn["strict"] = t.Strict
			}
			tools[i] = map[string]any{"type": "function", "function": fn}
		}
		m["tools"] = tools
		if r.ParallelToolCalls != nil {
			m["parallel_tool_calls"] = *r.ParallelToolCalls
		}
	}
	if len(r.ToolChoice) == 0 || isNull(r.ToolChoice) {
		return nil
	}
	var s string
	if json.Unmarshal(r.ToolChoice, &s) == nil {
		switch s {
		case "auto", "none", "required":
			m["tool_choice"] = s
			return nil
		}
		return chat.InvalidRequest("tool_choice", "tool_choice must be auto, none, required or a function, got %q", s)
	}
	var c struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(r.ToolChoice, &c); err != nil || c.Type != "function" || c.Name == "" {
		return unsupported("tool_choice", "tool_choice of type %q is not supported by this gateway: use auto, none, required or {\"type\":\"function\",\"name\":...}", c.Type)
	}
	m["tool_choice"] = map[string]any{"type": "function", "function": map[string]string{"name": c.Name}}
	return nil
}

// chatFormat sets response_format from text.format.
func chatFormat(m map[string]any, t *TextParam) error {
	if t == nil || len(t.Format) == 0 || isNull(t.Format) {
		return nil
	}
	var f struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Schema      json.RawMessage `json:"schema"`
		Strict      json.RawMessage `json:"strict"`
		Description json.RawMessage `json:"description"`
	}
	if err := json.Unmarshal(t.Format, &f); err != nil {
		return chat.InvalidRequest("text.format", "text.format must be an object: %s", err)
	}
	switch f.Type {
	case "text":
	case "json_object":
		m["response_format"] = map[string]string{"type": "json_object"}
	case "json_schema":
		if f.Name == "" || len(f.Schema) == 0 {
			return chat.InvalidRequest("text.format", "a json_schema format needs name and schema")
		}
		js := map[string]any{"name": f.Name, "schema": f.Schema}
		if len(f.Strict) > 0 && !isNull(f.Strict) {
			js["strict"] = f.Strict
		}
		if len(f.Description) > 0 && !isNull(f.Description) {
			js["description"] = f.Description
		}
		m["response_format"] = map[string]any{"type": "json_schema", "json_schema": js}
	default:
		return unsupported("text.format.type", "text.format of type %q is not supported: use text, json_object or json_schema", f.Type)
	}
	return nil
}

// turn gathers the items that make one assistant message: its
// reasoning, its text and its function calls.
type turn struct {
	open      bool
	reasoning string
	text      string
	hasText   bool
	calls     []map[string]any
}

func (a *turn) message(t Target) map[string]any {
	m := map[string]any{"role": "assistant", "content": nil}
	if a.hasText {
		m["content"] = a.text
	}
	if len(a.calls) > 0 {
		m["tool_calls"] = a.calls
	}
	if t.DeepSeek && a.reasoning != "" {
		m["reasoning_content"] = a.reasoning
	}
	return m
}

// chatMessages translates the instructions and the items into chat
// messages. Consecutive reasoning, assistant message and function call
// items are one assistant message, as the chat API has it.
func chatMessages(instructions *string, items []Item, t Target) ([]map[string]any, error) {
	var msgs []map[string]any
	if instructions != nil && *instructions != "" {
		msgs = append(msgs, map[string]any{"role": "system", "content": *instructions})
	}
	var a turn
	flush := func() {
		if a.open && (a.hasText || len(a.calls) > 0) {
			msgs = append(msgs, a.message(t))
		}
		a = turn{}
	}
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case TypeReasoning:
			if a.hasText || len(a.calls) > 0 {
				flush()
			}
			text, err := reasoningText(it, param, t.Sealer)
			if err != nil {
				return nil, err
			}
			a.open, a.reasoning = true, a.reasoning+text
		case TypeFunctionCall:
			a.open, a.calls = true, append(a.calls, toolCall(it))
		case TypeFunctionCallOutput:
			flush()
			out, _, err := textOf(it.Output, param+".output")
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": it.CallID, "content": out})
		case TypeMessage:
			if it.Role == "assistant" {
				if a.hasText || len(a.calls) > 0 {
					flush()
				}
				text, _, err := textOf(it.Content, param+".content")
				if err != nil {
					return nil, err
				}
				a.open, a.hasText, a.text = true, true, a.text+text
				continue
			}
			flush()
			m, err := inputMessage(it, param)
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, m)
		default:
			return nil, unsupported(param+".type", "input items of type %q are not supported by this gateway", it.Type)
		}
	}
	flush()
	return msgs, nil
}

// toolCall is a function_call item as a tool call of an assistant
// message: a namespace's function by its chat name.
func toolCall(it Item) map[string]any {
	name := it.Name
	if it.Namespace != "" {
		name = chatName(it.Namespace, it.Name)
	}
	return map[string]any{"id": it.CallID, "type": "function", "function": map[string]string{"name": name, "arguments": *it.Arguments}}
}

// reasoningText is the text of a reasoning item: what its
// encrypted_content seals when sealer can read it (one it cannot is a
// 400, as OpenAI answers one it cannot verify), else its reasoning_text
// content, else its summary.
func reasoningText(it Item, param string, sealer *Sealer) (string, error) {
	if sealer != nil && it.EncryptedContent != nil && *it.EncryptedContent != "" {
		text, err := sealer.open(*it.EncryptedContent)
		if err != nil {
			return "", invalidEncrypted(param+".encrypted_content", it.ID)
		}
		return text, nil
	}
	if len(it.Content) > 0 && !isNull(it.Content) {
		if s, _, err := textOf(it.Content, param+".content"); err != nil || s != "" {
			return s, err
		}
	}
	if len(it.Summary) > 0 && !isNull(it.Summary) {
		s, _, err := textOf(it.Summary, param+".summary")
		return s, err
	}
	return "", nil
}

// inputMessage translates a system, developer or user message. A user
// message with images keeps its parts, as the chat API's image_url parts.
func inputMessage(it Item, param string) (map[string]any, error) {
	role := it.Role
	if role == "developer" {
		role = "system" // DeepSeek knows no developer role; OpenAI takes either
	}
	text, parts, err := textOf(it.Content, param+".content")
	if err != nil {
		return nil, err
	}
	var chatParts []map[string]any
	for j, p := range parts {
		switch p.Type {
		case "input_file":
			return nil, unsupported(fmt.Sprintf("%s.content[%d]", param, j), "file inputs are not supported by this gateway: send the file's text")
		case "input_image":
			if p.ImageURL == nil || role != "user" {
				return nil, unsupported(fmt.Sprintf("%s.content[%d]", param, j), "images are supported in user messages, by image_url only (this gateway holds no files)")
			}
			img := map[string]string{"url": *p.ImageURL}
			if p.Detail != "" {
				img["detail"] = p.Detail
			}
			chatParts = append(chatParts, map[string]any{"type": "image_url", "image_url": img})
		default:
			if p.Text != nil {
				chatParts = append(chatParts, map[string]any{"type": "text", "text": *p.Text})
			}
		}
	}
	for _, p := range parts {
		if p.Type == "input_image" {
			return map[string]any{"role": role, "content": chatParts}, nil
		}
	}
	return map[string]any{"role": role, "content": text}, nil
}
