package messages

import (
	"encoding/json"
	"fmt"

	"github.com/phasegate/phasegate/chat"
)

// system translates the system prompt, a string or text blocks, into
// one system message.
func (b *builder) system(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	bls, err := blocksOf(raw, "system")
	if err != nil {
		return err
	}
	var text textJoin
	for j := range bls {
		b.fields(&bls[j])
		if bls[j].Type != "text" {
			b.dropAs("system."+bls[j].Type, "content")
			continue
		}
		if !isString(bls[j].Text) {
			return chat.InvalidRequest(fmt.Sprintf("system[%d].text", j), "system[%d].text must be a string", j)
		}
		text.add(bls[j].Text)
	}
	if text.n > 0 && string(text.json()) != `""` {
		b.msgs = append(b.msgs, chatMessage{Role: "system", Content: text.json()})
	}
	return nil
}

// toolFields are the fields of a custom tool the chat API has a place
// for; any other is dropped and named.
var toolFields = map[string]bool{"type": true, "name": true, "description": true, "input_schema": true}

// tools translates the custom tools into function tools, drops or
// refuses the hosted ones, and translates tool_choice.
func (b *builder) tools(raw, choice json.RawMessage, out *chatRequest) error {
	var list []map[string]json.RawMessage
	if !isNull(raw) {
		var err error
		if list, err = objectsOf(raw, "tools"); err != nil {
			return err
		}
	}
	for i, t := range list {
		param := fmt.Sprintf("tools[%d]", i)
		var typ string
		if err := decode(t, "type", &typ); err != nil {
			return chat.InvalidRequest(param+".type", "%s.type must be a string", param)
		}
		if typ != "" && typ != "custom" {
			if err := b.hosted(typ, param); err != nil {
				return err
			}
			continue
		}
		ct, err := b.tool(t, param)
		if err != nil {
			return err
		}
		out.Tools = append(out.Tools, ct)
	}
	return b.toolChoice(choice, out)
}

// hosted drops, or refuses, a tool Anthropic runs on its platform.
func (b *builder) hosted(typ, param string) error {
	if b.cfg.HostedTools == HostedRefuse {
		e := chat.InvalidRequest(param+".type", "tools of type %q run on Anthropic's platform, which this gateway's upstream is not: declare custom tools only (this gateway refuses hosted tools; its operator can set it to drop them)", short(typ))
		e.Code = "unsupported_parameter"
		return e
	}
	b.dropAs(typ, hostedField(typ))
	return nil
}

// tool translates one custom tool.
func (b *builder) tool(t map[string]json.RawMessage, param string) (chatTool, error) {
	for k := range t {
		if !toolFields[k] {
			b.dropAs(k, "tool_field")
		}
	}
	name := t["name"]
	if !isString(name) || len(name) == 2 {
		return chatTool{}, chat.InvalidRequest(param+".name", "%s.name must be a non-empty string", param)
	}
	schema := t["input_schema"]
	if isNull(schema) {
		return chatTool{}, chat.InvalidRequest(param+".input_schema", "missing required parameter: %s.input_schema", param)
	}
	if schema[0] != '{' {
		return chatTool{}, chat.InvalidRequest(param+".input_schema", "%s.input_schema must be an object, not %s", param, jsonKind(schema))
	}
	ct := chatTool{Name: name, Parameters: schema}
	if d := t["description"]; !isNull(d) {
		if !isString(d) {
			return chatTool{}, chat.InvalidRequest(param+".description", "%s.description must be a string", param)
		}
		ct.Description = d
	}
	return ct, nil
}

// toolChoice translates tool_choice: auto, any (required), tool (a named
// function) or none; disable_parallel_tool_use is parallel_tool_calls
// false. Without tools (none declared, or all of them hosted and
// dropped) there is nothing to choose, and the chat API refuses a
// tool_choice alone: it is dropped.
func (b *builder) toolChoice(raw json.RawMessage, out *chatRequest) error {
	if isNull(raw) {
		return nil
	}
	var c struct {
		Type                   string          `json:"type"`
		Name                   json.RawMessage `json:"name"`
		DisableParallelToolUse *bool           `json:"disable_parallel_tool_use"`
	}
	if err := decodeRaw(raw, "tool_choice", &c); err != nil {
		return err
	}
	switch c.Type {
	case "auto":
		out.ToolChoice = json.RawMessage(`"auto"`)
	case "any":
		out.ToolChoice = json.RawMessage(`"required"`)
	case "none":
		out.ToolChoice = json.RawMessage(`"none"`)
	case "tool":
		if !isString(c.Name) {
			return chat.InvalidRequest("tool_choice.name", "a tool_choice of type tool needs a name")
		}
		out.ToolChoice = append(append([]byte(`{"type":"function","function":{"name":`), c.Name...), "}}"...)
	default:
		return chat.InvalidRequest("tool_choice.type", "tool_choice.type must be auto, any, tool or none, got %q", short(c.Type))
	}
	if len(out.Tools) == 0 {
		out.ToolChoice = nil
		b.drop("tool_choice")
		return nil
	}
	if c.DisableParallelToolUse != nil && *c.DisableParallelToolUse {
		no := false
		out.ParallelToolCalls = &no
	}
	return nil
}
