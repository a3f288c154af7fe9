package sim

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/phasegate/phasegate/chat"
)

// schema is the part of a JSON Schema the simulated models read to write
// arguments that satisfy it.
type schema struct {
	Type       json.RawMessage    `json:"type"`
	Properties map[string]*schema `json:"properties"`
	Required   []string           `json:"required"`
	Items      *schema            `json:"items"`
	Enum       []any              `json:"enum"`
	Const      any                `json:"const"`
	Default    any                `json:"default"`
	Examples   []any              `json:"examples"`
	Format     string             `json:"format"`
	Minimum    *float64           `json:"minimum"`
	Maximum    *float64           `json:"maximum"`
	MinLength  int                `json:"minLength"`
	MinItems   int                `json:"minItems"`
	AnyOf      []*schema          `json:"anyOf"`
	OneOf      []*schema          `json:"oneOf"`
	AllOf      []*schema          `json:"allOf"`
	Ref        string             `json:"$ref"`
	Defs       map[string]*schema `json:"$defs"`
	Defns      map[string]*schema `json:"definitions"`
}

// maxDepth bounds the nesting the example follows: a schema that refers
// to itself ends there.
const maxDepth = 8

// exampleArguments writes arguments that satisfy a tool's parameters
// schema, as argumentsFor does with no hints.
func exampleArguments(raw json.RawMessage) string { return argumentsFor(raw, nil) }

// argumentsFor writes arguments that satisfy a tool's parameters
// schema: every required property, with a value of its type (its const,
// first enum value, default or example when it has one; numbers within
// their bounds, strings of their format and least length, arrays of their
// least length), nested objects alike. hints, when a property of that
// name is required, give its value.
func argumentsFor(raw json.RawMessage, hints map[string]any) string {
	var root schema
	_ = json.Unmarshal(raw, &root) // a schema that does not decode asks for nothing
	v := root.example(&root, hints, 0)
	if _, ok := v.(map[string]any); !ok {
		v = map[string]any{}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// example is a value s accepts; root holds the definitions $ref names.
func (s *schema) example(root *schema, hints map[string]any, depth int) any {
	if s = s.resolve(root); s == nil || depth > maxDepth {
		return nil
	}
	switch {
	case s.Const != nil:
		return s.Const
	case len(s.Enum) > 0:
		return s.Enum[0]
	case s.Default != nil:
		return s.Default
	case len(s.Examples) > 0:
		return s.Examples[0]
	case len(s.AnyOf) > 0:
		return s.AnyOf[0].example(root, hints, depth+1)
	case len(s.OneOf) > 0:
		return s.OneOf[0].example(root, hints, depth+1)
	}
	return s.typed(root, hints, depth)
}

// typed is a value of s's type.
func (s *schema) typed(root *schema, hints map[string]any, depth int) any {
	switch s.typeName() {
	case "integer":
		return s.number(1)
	case "number":
		return s.number(1.5)
	case "boolean":
		return true
	case "null":
		return nil
	case "string":
		return s.text()
	case "array":
		items := []any{}
		for range s.MinItems {
			items = append(items, s.Items.example(root, nil, depth+1))
		}
		return items
	}
	obj := map[string]any{}
	for _, all := range s.AllOf {
		if m, ok := all.example(root, hints, depth+1).(map[string]any); ok {
			for k, v := range m {
				obj[k] = v
			}
		}
	}
	for _, name := range s.Required {
		if v, ok := hints[name]; ok {
			obj[name] = v
			continue
		}
		p := s.Properties[name]
		if p == nil {
			p = &schema{Type: json.RawMessage(`"string"`)}
		}
		obj[name] = p.example(root, nil, depth+1)
	}
	return obj
}

// resolve follows a local $ref (#/$defs/NAME, #/definitions/NAME).
func (s *schema) resolve(root *schema) *schema {
	for range maxDepth {
		if s == nil || s.Ref == "" {
			return s
		}
		name, ok := strings.CutPrefix(s.Ref, "#/$defs/")
		defs := root.Defs
		if !ok {
			name, ok = strings.CutPrefix(s.Ref, "#/definitions/")
			defs = root.Defns
		}
		if !ok {
			return &schema{}
		}
		s = defs[name]
	}
	return nil
}

// typeName is s's type; of a list of types, the first but null; with none
// given, object when it has properties, else string.
func (s *schema) typeName() string {
	var one string
	if json.Unmarshal(s.Type, &one) == nil {
		return one
	}
	var many []string
	_ = json.Unmarshal(s.Type, &many)
	for _, t := range many {
		if t != "null" {
			return t
		}
	}
	if len(s.Properties) > 0 || len(s.Required) > 0 {
		return "object"
	}
	if s.Items != nil {
		return "array"
	}
	return "string"
}

// number is n moved within s's bounds.
func (s *schema) number(n float64) any {
	if s.Minimum != nil && n < *s.Minimum {
		n = *s.Minimum
	}
	if s.Maximum != nil && n > *s.Maximum {
		n = *s.Maximum
	}
	if s.typeName() == "integer" {
		return int64(n)
	}
	return n
}

// text is a string of s's format and at least its least length.
func (s *schema) text() string {
	t := map[string]string{
		"date-time": "2026-01-01T00:00:00Z", "date": "2026-01-01", "time": "00:00:00Z",
		"email": "user@example.com", "uri": "https://example.com/", "url": "https://example.com/",
		"uuid": "00000000-0000-4000-8000-000000000000", "ipv4": "192.0.2.1", "hostname": "example.com",
	}[s.Format]
	if t == "" {
		t = "example"
	}
	for len(t) < s.MinLength {
		t += "x"
	}
	return t
}

// kinds group tool names by what a tool does, so a scripted call finds
// the declared tool that does the same: a scripted read_file becomes a
// call of a declared view or cat tool.
var kinds = [][]string{
	{"read", "view", "cat", "open", "get_file", "fetch"},
	{"search", "grep", "find", "glob", "query", "lookup"},
	{"edit", "write", "patch", "replace", "apply", "update", "create"},
	{"test", "run", "exec", "bash", "shell", "terminal", "command", "code", "python"},
	{"list", "ls", "dir", "tree"},
	{"git", "commit", "diff", "status"},
}

// onDeclared is call made a call of a tool req declares: itself when req
// declares its tool (or none), else a call of the declared tool that does
// the same kind of thing (the first declared one when none does), whose
// arguments follow that tool's schema, carrying the scripted call's values
// into the properties that take them.
func onDeclared(req *chat.Request, call chat.ToolCall) chat.ToolCall {
	if len(req.Tools) == 0 || slices.ContainsFunc(req.Tools, func(t chat.Tool) bool { return t.Function.Name == call.Function.Name }) {
		return call
	}
	tool := req.Tools[0].Function
	if i := slices.IndexFunc(req.Tools, func(t chat.Tool) bool { return sameKind(call.Function.Name, t.Function.Name) }); i >= 0 {
		tool = req.Tools[i].Function
	}
	var scripted map[string]any
	_ = json.Unmarshal([]byte(call.Function.Arguments), &scripted)
	call.Function = chat.FunctionCall{Name: tool.Name, Arguments: argumentsFor(tool.Parameters, carried(tool.Parameters, scripted))}
	return call
}

// sameKind reports whether tools named a and b do the same kind of thing.
func sameKind(a, b string) bool {
	a, b = strings.ToLower(a), strings.ToLower(b)
	for _, words := range kinds {
		has := func(name string) bool {
			return slices.ContainsFunc(words, func(w string) bool { return strings.Contains(name, w) })
		}
		if has(a) && has(b) {
			return true
		}
	}
	return false
}

// carried are the values of scripted that the string properties of the
// schema raw take: a property of the same name takes its value, and the
// others the scripted call's main value (its code, command, pattern or
// path), so a loop the script plays stays a loop on any tool.
func carried(raw json.RawMessage, scripted map[string]any) map[string]any {
	var s schema
	_ = json.Unmarshal(raw, &s)
	var main any
	for _, k := range []string{"code", "args", "pattern", "path", "package", "change"} {
		if v, ok := scripted[k]; ok {
			main = v
			break
		}
	}
	hints := map[string]any{}
	for _, name := range s.Required {
		p := s.Properties[name].resolve(&s)
		switch v, ok := scripted[name]; {
		case ok:
			hints[name] = v
		case main != nil && p != nil && p.typeName() == "string" && len(p.Enum) == 0 && p.Const == nil && p.Format == "":
			hints[name] = fmt.Sprint(main)
			main = nil // one property carries it
		}
	}
	return hints
}

// bestTool is the declared tool whose name and description share the most
// words with the last user message, the first declared one on a tie. A
// tool that starts an agent is not called while there is another: a
// coding agent's first tool is often its subagent tool, whose long
// description shares words with any message (and with the context the
// agent puts in its user messages); each subagent it started would start
// another, where a model would have used the tool at hand.
func bestTool(req *chat.Request) chat.FunctionDef {
	said := map[string]bool{}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == chat.RoleUser {
			for _, w := range strings.FieldsFunc(strings.ToLower(req.Messages[i].Text()), notWordRune) {
				said[w] = true
			}
			break
		}
	}
	tools := slices.DeleteFunc(slices.Clone(req.Tools), func(t chat.Tool) bool { return startsAgent(t.Function.Name) })
	if len(tools) == 0 {
		tools = req.Tools
	}
	best, score := tools[0].Function, 0
	for _, t := range tools {
		n := 0
		for _, w := range strings.FieldsFunc(strings.ToLower(t.Function.Name+" "+t.Function.Description), notWordRune) {
			if len(w) > 2 && said[w] {
				n++
			}
		}
		if n > score {
			best, score = t.Function, n
		}
	}
	return best
}

// startsAgent reports whether a tool's name says it starts an agent:
// Claude Code's Agent, Codex's spawn_agent, the task tool of Qwen Code and
// OpenCode.
func startsAgent(name string) bool {
	name = strings.ToLower(name)
	return namesAgent(name) || name == "task"
}

func notWordRune(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
}
