package sim

import (
	"encoding/json"
	"path"
	"regexp"
	"strings"

	"github.com/phasegate/phasegate/chat"
)

// ToolUse is a declared tool and the string parameter that takes what the
// tool acts on: the command of a shell tool, the path of a read tool. The
// zero ToolUse is no tool.
type ToolUse struct {
	Name  string
	Field string
	// others are the other required parameters, by name, with their JSON
	// Schema types, filled with neutral values when calling.
	others map[string]string
}

// Toolbox is what an agent model found among the declared tools.
type Toolbox struct {
	// Shell runs shell commands: Bash(command), exec_command(cmd),
	// run_shell_command(command), bash(command).
	Shell ToolUse
	// Read reads a file: Read(file_path), read_file(file_path),
	// read(filePath); zero when the agent reads with its shell.
	Read ToolUse
}

// FindTools scores each declared tool as a shell tool and as a read tool,
// by its name, its description and its parameters, and keeps the best of
// each; ties go to the first declared. A shell tool needs a string
// parameter named like a command (command, cmd, script) and a name or
// description that speaks of a shell, bash, a terminal or a command; a
// read tool a string parameter named like a path. A tool named for an
// agent (a subagent, a teammate) is neither: calling it starts another
// model, not a command.
func FindTools(tools []chat.Tool) Toolbox {
	var tb Toolbox
	bestShell, bestRead := 0, 0
	for _, t := range tools {
		s := readSchema(t.Function.Parameters)
		if field, score := shellScore(t.Function, s); score > bestShell {
			bestShell, tb.Shell = score, s.use(t.Function.Name, field)
		}
		if field, score := readScore(t.Function, s); score > bestRead {
			bestRead, tb.Read = score, s.use(t.Function.Name, field)
		}
	}
	return tb
}

// readSchema reads a tool's parameters (see schema) for the scores.
func readSchema(raw json.RawMessage) *schema {
	s := &schema{}
	_ = json.Unmarshal(raw, s) // a schema that does not parse has no fields
	return s
}

// stringField returns the first of names (exact, case-insensitive) that s
// declares as a string, and whether it is required.
func (s *schema) stringField(names ...string) (field string, required bool) {
	for _, n := range names {
		for p, def := range s.Properties {
			if strings.EqualFold(p, n) && def != nil && isType(def.Type, "string") {
				for _, r := range s.Required {
					required = required || r == p
				}
				return p, required
			}
		}
	}
	return "", false
}

// isType reports whether a JSON Schema type (a name or a list of names)
// admits want.
func isType(raw json.RawMessage, want string) bool {
	var t any
	_ = json.Unmarshal(raw, &t)
	switch t := t.(type) {
	case string:
		return t == want
	case []any:
		for _, e := range t {
			if e == want {
				return true
			}
		}
	}
	return false
}

func (s *schema) use(name, field string) ToolUse {
	u := ToolUse{Name: name, Field: field, others: map[string]string{}}
	for _, r := range s.Required {
		if r != field {
			var typ string
			if def := s.Properties[r]; def != nil {
				_ = json.Unmarshal(def.Type, &typ) // a list of types is no one type
			}
			u.others[r] = typ
		}
	}
	return u
}

func shellScore(f chat.FunctionDef, s *schema) (string, int) {
	field, required := s.stringField("command", "cmd", "script", "commandline", "command_line")
	name, desc := strings.ToLower(f.Name), strings.ToLower(f.Description)
	if field == "" || namesAgent(name) {
		return "", 0
	}
	says := wordScore(name, map[string]int{"bash": 4, "shell": 4, "terminal": 4, "exec": 3, "command": 1}) +
		wordScore(desc, map[string]int{"shell": 2, "bash": 2, "terminal": 1, "command": 1})
	if says == 0 {
		return "", 0
	}
	score := 1 + says + wordScore(name, map[string]int{"run": 1})
	if required {
		score++
	}
	return field, score
}

func readScore(f chat.FunctionDef, s *schema) (string, int) {
	field, required := s.stringField("file_path", "filePath", "absolute_path", "path", "file", "filename")
	name := strings.ToLower(f.Name)
	if field == "" || !strings.Contains(name, "read") || namesAgent(name) {
		return "", 0
	}
	score := 1 + wordScore(name, map[string]int{"file": 1}) + wordScore(strings.ToLower(f.Description), map[string]int{"file": 1})
	if required {
		score++
	}
	return field, score
}

// namesAgent reports whether a tool's lower-case name says it starts or
// drives an agent (Agent, spawn_agent, ListAgents, task_agent).
func namesAgent(name string) bool { return strings.Contains(name, "agent") }

func wordScore(s string, words map[string]int) int {
	n := 0
	for w, v := range words {
		if strings.Contains(s, w) {
			n += v
		}
	}
	return n
}

// arguments are the JSON arguments of a call that gives value to u's
// field and a neutral value to each other required parameter: false for a
// switch (is_background must not send a command away), a short text for a
// string.
func (u ToolUse) arguments(value string) string {
	args := map[string]any{u.Field: value}
	for name, typ := range u.others {
		switch typ {
		case "boolean":
			args[name] = false
		case "integer", "number":
			args[name] = 60000
		case "array":
			args[name] = []any{}
		case "object":
			args[name] = map[string]any{}
		default:
			args[name] = "Runs " + value
		}
	}
	b, _ := json.Marshal(args)
	return string(b)
}

// value is what a call of u was given in its field, or "" when the call
// is not u's or its arguments do not parse.
func (u ToolUse) value(call chat.ToolCall) string {
	if u.Name == "" || call.Function.Name != u.Name {
		return ""
	}
	var args map[string]any
	if json.Unmarshal([]byte(call.Function.Arguments), &args) != nil {
		return ""
	}
	v, _ := args[u.Field].(string)
	return v
}

// agentHistory is what an agent model reads off the whole request: its
// earlier calls, the gateway's notices, the project's directory, and, for
// the thinking model, what became of its reasoning.
type agentHistory struct {
	calls    int
	notices  int
	commands map[string]bool
	reads    map[string]bool
	dir      string
	lost     []string
}

// projectRE finds the project's directory in a user message.
var projectRE = regexp.MustCompile(`project at (/[^\s"'` + "`" + `]*[^\s"'.,;:` + "`" + `])`)

// readAgentHistory reads every message, not only the turn: some agents
// send reminders as user messages between a call and the next.
func readAgentHistory(req *chat.Request, tb Toolbox) agentHistory {
	h := agentHistory{commands: map[string]bool{}, reads: map[string]bool{}}
	for _, m := range req.Messages {
		switch m.Role {
		case chat.RoleUser:
			if p := projectRE.FindStringSubmatch(m.Text()); p != nil {
				h.dir = p[1]
			}
		case chat.RoleSystem:
			if h.calls > 0 {
				h.notices++
			}
		case chat.RoleAssistant:
			h.assistant(m, tb)
		}
	}
	return h
}

func (h *agentHistory) assistant(m chat.Message, tb Toolbox) {
	for i, c := range m.ToolCalls {
		h.calls++
		if v := tb.Shell.value(c); v != "" {
			h.commands[v] = true
		}
		if v := tb.Read.value(c); v != "" {
			h.reads[path.Base(v)] = true
		}
		if i == 0 && strings.HasPrefix(c.ID, "call_think_") {
			want := thinkingText(c.ID)
			switch got := m.ReasoningContent; {
			case got == nil || *got == "":
				h.lost = append(h.lost, c.ID+" came back without it")
			case *got != want:
				h.lost = append(h.lost, c.ID+" came back changed")
			}
		}
	}
}

// done reports whether step s ran already, in the shell or the read tool.
func (h agentHistory) done(s AgentStep, tb Toolbox) bool {
	if s.Read != "" && tb.Read.Name != "" {
		return h.reads[s.Read]
	}
	return h.commands[s.Command]
}

// path is file in the project's directory, or file alone when the prompt
// named none.
func (h agentHistory) path(file string) string {
	if h.dir == "" {
		return file
	}
	return path.Join(h.dir, file)
}
