package sim_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/sim"
)

// tool builds a declared function tool from a name, a description and the
// properties of its parameters (name: type), the first one required.
func tool(name, desc string, props ...string) json.RawMessage {
	p := map[string]any{}
	var required []string
	for i, prop := range props {
		n, typ, _ := strings.Cut(prop, ":")
		p[n] = map[string]any{"type": typ}
		if i == 0 {
			required = append(required, n)
		}
	}
	b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]any{"name": name, "description": desc,
		"parameters": map[string]any{"type": "object", "properties": p, "required": required}}})
	return b
}

// The tool sets of four agents, in their own names and fields, with the
// decoys that also take a command or a path.
var (
	claudeTools = []json.RawMessage{
		tool("Task", "Launch a sub-agent for a task.", "prompt:string", "description:string"),
		tool("SlashCommand", "Run a slash command of this conversation.", "command:string"),
		tool("Bash", "Runs a bash command in a persistent shell session.", "command:string", "timeout:number", "description:string"),
		tool("Read", "Reads a file from the local filesystem.", "file_path:string", "offset:number"),
	}
	// claude2Tools are the tools Claude Code 2.1.328 declares first, in its
	// order: its subagent tool (no command field) before its shell tool,
	// and a tool to list agents.
	claude2Tools = []json.RawMessage{
		tool("Agent", "Launch a new agent to handle complex, multi-step tasks.", "description:string", "prompt:string", "subagent_type:string"),
		tool("Bash", "Executes a bash command and returns its output.", "command:string", "timeout:number", "description:string"),
		tool("Edit", "Performs exact string replacement in a file.", "file_path:string", "old_string:string", "new_string:string"),
		tool("ListAgents", "Lists agents you can SendMessage to.", "channel:string"),
		tool("Read", "Reads a file from the local filesystem.", "file_path:string", "offset:number"),
	}
	codexTools = []json.RawMessage{
		tool("exec_command", "Runs a command in a PTY and returns its output.", "cmd:string", "workdir:string", "yield_time_ms:number"),
		tool("write_stdin", "Writes characters to a running exec session.", "session_id:number", "chars:string"),
		tool("update_plan", "Updates the task plan.", "plan:array"),
	}
	qwenTools = []json.RawMessage{
		tool("agent", "Launch a new agent for multi-step tasks.", "prompt:string"),
		tool("read_mcp_resource", "Reads a resource of an MCP server.", "uri:string"),
		tool("read_file", "Reads and returns the content of a file.", "file_path:string", "offset:integer"),
		tool("run_shell_command", "Executes a shell command as bash -c.", "command:string", "is_background:boolean", "description:string"),
	}
	opencodeTools = []json.RawMessage{
		tool("task", "Launch a sub-agent; command names the command that started it.", "description:string", "command:string"),
		tool("bash", "Executes a bash command in a shell session.", "command:string", "workdir:string"),
		tool("read", "Read a file or directory from the local filesystem.", "filePath:string", "limit:integer"),
	}
)

func parseTools(t *testing.T, raw []json.RawMessage) []chat.Tool {
	t.Helper()
	tools := make([]chat.Tool, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &tools[i]); err != nil {
			t.Fatal(err)
		}
	}
	return tools
}

func TestFindTools(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                 string
		tools                []json.RawMessage
		shell, field         string
		read, readField      string
		shellArgsOtherFields []string
	}{
		{name: "Claude Code", tools: claudeTools, shell: "Bash", field: "command", read: "Read", readField: "file_path"},
		{name: "Codex", tools: codexTools, shell: "exec_command", field: "cmd"},
		{name: "Qwen Code", tools: qwenTools, shell: "run_shell_command", field: "command", read: "read_file", readField: "file_path"},
		{name: "OpenCode", tools: opencodeTools, shell: "bash", field: "command", read: "read", readField: "filePath"},
		{name: "Claude Code 2.1.328", tools: claude2Tools, shell: "Bash", field: "command", read: "Read", readField: "file_path"},
		{name: "no shell", tools: []json.RawMessage{tool("get_weather", "Weather of a city.", "city:string")}},
		{name: "a command that runs no shell", tools: []json.RawMessage{tool("remember", "Stores a note for later.", "command:string")}},
		{name: "a subagent that takes a command", tools: []json.RawMessage{
			tool("spawn_agent", "Runs a shell command in a new agent.", "command:string"),
			tool("read_agent_log", "Reads an agent's log file.", "file_path:string"),
		}},
		{name: "a command that is not a string", tools: []json.RawMessage{tool("shell", "Runs a shell command.", "command:array")}},
		{name: "a required switch", tools: []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"sh","description":"shell",` +
			`"parameters":{"type":"object","properties":{"script":{"type":"string"},"background":{"type":"boolean"},"why":{"type":["string","null"]}},"required":["script","background"]}}}`)},
			shell: "sh", field: "script"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := sim.FindTools(parseTools(t, tt.tools))
			got := []string{tb.Shell.Name, tb.Shell.Field, tb.Read.Name, tb.Read.Field}
			want := []string{tt.shell, tt.field, tt.read, tt.readField}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("shell, field, read, field (-want +got):\n%s", diff)
			}
		})
	}
}

// agent plays a coding agent against a simulated model: it sends the
// history, runs each tool call by appending a result, and stops at the
// first answer or after max requests.
type agent struct {
	model string
	tools []json.RawMessage
	// reasoning maps the reasoning_content an answer carried to what the
	// agent sends back on that assistant message; nil sends it back as is.
	reasoning func(string) *string
	// noTools, from that request on (1-based), offers no tools, as a
	// guard's last call does.
	noTools int

	messages []map[string]any
	calls    []chat.ToolCall
	answer   string
}

const agentPrompt = "Survey the project at /home/dev/proj and report."

func (a *agent) run(t *testing.T, max int) {
	t.Helper()
	a.messages = []map[string]any{{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": agentPrompt}}
	for n := 1; n <= max; n++ {
		req := map[string]any{"model": a.model, "messages": a.messages, "stream": n%2 == 0}
		if a.noTools == 0 || n < a.noTools {
			req["tools"] = a.tools
		}
		body, _ := json.Marshal(req)
		msg, finish, _ := assemble(t, simulate(t, http.MethodPost, "/v1/chat/completions", string(body)))
		if finish == "stop" {
			a.answer, _ = msg["content"].(string)
			return
		}
		var call chat.ToolCall
		b, _ := json.Marshal(msg["tool_calls"].([]any)[0])
		if err := json.Unmarshal(b, &call); err != nil {
			t.Fatal(err)
		}
		a.calls = append(a.calls, call)
		back := map[string]any{"role": "assistant", "content": msg["content"], "tool_calls": []any{msg["tool_calls"].([]any)[0]}}
		if r, _ := msg["reasoning_content"].(string); a.reasoning == nil {
			back["reasoning_content"] = r
		} else if kept := a.reasoning(r); kept != nil {
			back["reasoning_content"] = *kept
		}
		a.messages = append(a.messages, back,
			map[string]any{"role": "tool", "tool_call_id": call.ID, "content": "Command: " + call.Function.Arguments + "\nOutput: ok"},
			// A reminder between a result and the next request, as some
			// agents send: the model reads the whole history, not the turn.
			map[string]any{"role": "user", "content": "<reminder>keep going</reminder>"})
	}
	t.Fatalf("%s: no answer after %d requests; calls %v", a.model, max, a.calls)
}

// field is what call gave its parameter name.
func field(t *testing.T, call chat.ToolCall, name string) any {
	t.Helper()
	var args map[string]any
	if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil {
		t.Fatalf("arguments %s: %v", call.Function.Arguments, err)
	}
	return args[name]
}

func TestAgentSession(t *testing.T) {
	t.Parallel()
	steps := sim.AgentSessionSteps()
	for _, tt := range []struct {
		name             string
		tools            []json.RawMessage
		shell, cmd, read string
		readField        string
	}{
		{name: "Claude Code", tools: claudeTools, shell: "Bash", cmd: "command", read: "Read", readField: "file_path"},
		{name: "Codex reads with its shell", tools: codexTools, shell: "exec_command", cmd: "cmd"},
		{name: "Qwen Code", tools: qwenTools, shell: "run_shell_command", cmd: "command", read: "read_file", readField: "file_path"},
		{name: "OpenCode", tools: opencodeTools, shell: "bash", cmd: "command", read: "read", readField: "filePath"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := &agent{model: sim.AgentSessionModel, tools: tt.tools}
			a.run(t, 20)
			if len(a.calls) != len(steps) {
				t.Fatalf("%d calls, want %d: %v", len(a.calls), len(steps), a.calls)
			}
			seen := map[string]bool{}
			for i, c := range a.calls {
				var got, want string
				if steps[i].Read != "" && tt.read != "" {
					got, want = c.Function.Name+" "+fmt.Sprint(field(t, c, tt.readField)), tt.read+" /home/dev/proj/"+steps[i].Read
				} else {
					got, want = c.Function.Name+" "+fmt.Sprint(field(t, c, tt.cmd)), tt.shell+" "+steps[i].Command
				}
				if got != want {
					t.Errorf("call %d = %s, want %s", i+1, got, want)
				}
				if seen[c.ID] || seen[got] {
					t.Errorf("call %d (%s, %s) repeats an earlier id or call", i+1, c.ID, got)
				}
				seen[c.ID], seen[got] = true, true
			}
			if !strings.HasPrefix(a.answer, sim.AgentAnswerLead) || !strings.Contains(a.answer, "8 of 8") {
				t.Errorf("answer = %q, want the survey of 8 of 8 steps", a.answer)
			}
		})
	}
}

// A required switch of the shell tool is sent false: Qwen Code's
// is_background=true would send the command away.
func TestAgentShellArguments(t *testing.T) {
	t.Parallel()
	tools := []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"run_shell_command","description":"shell",` +
		`"parameters":{"type":"object","properties":{"command":{"type":"string"},"is_background":{"type":"boolean"},"description":{"type":"string"}},` +
		`"required":["command","is_background","description"]}}}`)}
	a := &agent{model: sim.AgentLoopModel, tools: tools, noTools: 2}
	a.run(t, 2)
	want := `{"command":"wc -l README.md","description":"Runs wc -l README.md","is_background":false}`
	if got := a.calls[0].Function.Arguments; got != want {
		t.Errorf("arguments = %s, want %s", got, want)
	}
}

func TestAgentLoops(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		model string
		same  bool
	}{
		{name: "exact", model: sim.AgentLoopModel, same: true},
		{name: "cosmetic", model: sim.AgentCosmeticModel},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const loops = 25
			a := &agent{model: tt.model, tools: opencodeTools, noTools: loops + 1}
			a.run(t, loops+1)
			if len(a.calls) != loops {
				t.Fatalf("%d calls before the answer, want %d (it answers only once offered no tools)", len(a.calls), loops)
			}
			seen := map[string]bool{}
			for i, c := range a.calls {
				cmd := field(t, c, "command").(string)
				switch {
				case tt.same && cmd != sim.AgentLoopCommand:
					t.Errorf("call %d runs %q, want %q", i+1, cmd, sim.AgentLoopCommand)
				case !tt.same && (!sim.IsCosmeticVariant(cmd) || seen[cmd]):
					t.Errorf("call %d runs %q: want a cosmetic variant of echo done unlike every earlier one", i+1, cmd)
				}
				seen[cmd] = true
			}
			if !strings.HasPrefix(a.answer, sim.AgentAnswerLead) {
				t.Errorf("answer = %q, want one opening %q", a.answer, sim.AgentAnswerLead)
			}
		})
	}
}

func TestCosmeticVariants(t *testing.T) {
	t.Parallel()
	want := []string{"echo done", "echo  done", `echo "done"`, `echo  "done"`, "echo done;", "echo  done;", "echo 'done'"}
	var got []string
	for k := range want {
		got = append(got, sim.CosmeticVariant(k))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("variants (-want +got):\n%s", diff)
	}
	seen := map[string]int{}
	for k := range 200 {
		v := sim.CosmeticVariant(k)
		if j, ok := seen[v]; ok {
			t.Fatalf("variant %d = variant %d = %q", k, j, v)
		}
		seen[v] = k
		if !sim.IsCosmeticVariant(v) {
			t.Errorf("IsCosmeticVariant(%q) = false", v)
		}
	}
	for _, s := range []string{"echo done && rm -rf x", "echo undone", "printf done", "echo done; ls"} {
		if sim.IsCosmeticVariant(s) {
			t.Errorf("IsCosmeticVariant(%q) = true, want false", s)
		}
	}
}

func TestAgentThinking(t *testing.T) {
	t.Parallel()
	changed := func(r string) *string { s := strings.ToUpper(r); return &s }
	dropped := func(string) *string { return nil }
	for _, tt := range []struct {
		name      string
		reasoning func(string) *string
		want      string
	}{
		{name: "sent back intact", want: sim.ThinkingIntact},
		{name: "dropped", reasoning: dropped, want: "_1 came back without it; call_think_"},
		{name: "changed", reasoning: changed, want: "_1 came back changed; call_think_"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := &agent{model: sim.AgentThinkingModel, tools: qwenTools, reasoning: tt.reasoning}
			a.run(t, 5)
			if len(a.calls) != 2 {
				t.Errorf("%d calls, want 2", len(a.calls))
			}
			if !strings.Contains(a.answer, tt.want) {
				t.Errorf("answer = %q, want it to say %q", a.answer, tt.want)
			}
		})
	}
}

// The thinking model's reasoning spans lines and holds non-ASCII text, and
// differs per call: a client that keeps one for all would be caught.
func TestAgentThinkingReasoning(t *testing.T) {
	t.Parallel()
	var got []string
	a := &agent{model: sim.AgentThinkingModel, tools: claudeTools, reasoning: func(r string) *string { got = append(got, r); return &r }}
	a.run(t, 5)
	if len(got) != 2 || got[0] == got[1] || !strings.Contains(got[0], "\n") || !strings.ContainsRune(got[0], '✓') {
		t.Errorf("reasoning = %q, want two different multi-line texts with non-ASCII", got)
	}
}

// Every step is decided from the request alone: the same history gives the
// same call, and the history decides, not the order requests came in.
func TestAgentStateless(t *testing.T) {
	t.Parallel()
	for _, model := range []string{sim.AgentSessionModel, sim.AgentLoopModel, sim.AgentCosmeticModel, sim.AgentThinkingModel} {
		a := &agent{model: model, tools: qwenTools, noTools: 4}
		a.run(t, 4)
		body, _ := json.Marshal(map[string]any{"model": model, "messages": a.messages[:5], "tools": qwenTools})
		first, _, _ := assemble(t, simulate(t, http.MethodPost, "/v1/chat/completions", string(body)))
		again, _, _ := assemble(t, simulate(t, http.MethodPost, "/v1/chat/completions", string(body)))
		if diff := cmp.Diff(first["tool_calls"], again["tool_calls"]); diff != "" || first["tool_calls"] == nil {
			t.Errorf("%s: the same history gave different calls (-first +again):\n%s", model, diff)
		}
		var call chat.ToolCall
		b, _ := json.Marshal(first["tool_calls"].([]any)[0])
		_ = json.Unmarshal(b, &call)
		if call.Function.Arguments != a.calls[1].Function.Arguments {
			t.Errorf("%s: replayed second step calls %s, the run called %s", model, call.Function.Arguments, a.calls[1].Function.Arguments)
		}
	}
}

// Call ids are unique across sessions, as a provider's are: the gateway
// remembers reasoning by call id, and two agents' first calls must not
// share one.
func TestAgentCallIDs(t *testing.T) {
	t.Parallel()
	first := func(prompt string) string {
		body, _ := json.Marshal(map[string]any{"model": sim.AgentThinkingModel, "tools": qwenTools,
			"messages": []map[string]any{{"role": "user", "content": prompt}}})
		msg, _, _ := assemble(t, simulate(t, http.MethodPost, "/v1/chat/completions", string(body)))
		return msg["tool_calls"].([]any)[0].(map[string]any)["id"].(string)
	}
	a, b := first("Survey the project at /home/a/project."), first("Survey the project at /home/b/project.")
	if a == b || a != first("Survey the project at /home/a/project.") {
		t.Errorf("first call ids %q and %q: want them different across projects, the same for one", a, b)
	}
}
