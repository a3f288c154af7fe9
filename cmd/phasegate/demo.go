package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	openai "github.com/sashabaranov/go-openai"
	"github.com/sashabaranov/go-openai/jsonschema"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/settings"
	"github.com/phasegate/phasegate/sim"
)

// demoMaxRequests bounds the scripted agent: without the guard the looping
// model never stops on its own.
const demoMaxRequests = 6

// demoMaxPhaseCycles is the cycle budget the demo raises MAX_PHASE_CYCLES
// to, so that the test-rerun scenario has room for its five runs.
const demoMaxPhaseCycles = 6

var demoCommand = command{name: "phasegate demo", intro: `phasegate demo: a scripted agent talks to simulated models that misbehave like
DeepSeek on a bad day (a tool loop, a tool call leaked into the text, a
test-rerun loop, a broken orchestrator envelope), once through the plain pass-through and once through the
guard, and prints what reaches the client each time. Two more show the agent
profile (GUARD_PROFILE=agent, set by the demo for their models): a coding
agent's legitimate 20-call turn, which the strict default cuts at 3, and a
cosmetic execute_code verification loop.

Usage:
  phasegate demo [flags]

The demo serves only the simulated models, on a free loopback port, and
reads only the settings below (as flags or variables; no config file). It
always shows the guard enforcing, under the strict profile but for its two
agent scenarios: GUARD_MODE, GUARD_PROFILE and every other setting of the
gateway are ignored, and it says so when they are set. MAX_PHASE_CYCLES is
raised to 6 if lower and REPEATABLE_TOOLS defaults to run_tests; it prints
the guard it runs with first.
`, reads: []*settings.Setting{settings.MaxPhaseCycles, settings.MaxDuplicateAttempts, settings.RepeatableTools,
	settings.ShowNotices, settings.AgentMaxPhaseCycles, settings.MaxEnvelopeRetries, settings.GuardRulesNotice, settings.LogLevel}}

// demoIgnored are the settings the demo ignores that would change what it
// shows: it says so when the environment sets them.
var demoIgnored = []*settings.Setting{settings.GuardMode, settings.GuardProfile, settings.TwoStageEnabled, settings.DefaultProtocol}

// demoSettings says which guard settings the demo runs with and where
// each came from.
func demoSettings(o options) string {
	from := func(s *settings.Setting, demoNote string) string {
		src := o.Source(s)
		switch {
		case demoNote != "":
			return demoNote
		case src.From == settings.FromDefault:
			return "default"
		case src.From == settings.FromFlag:
			return "from --" + s.Flag()
		case src.From == settings.FromEnv:
			return "from the environment"
		}
		return "from " + src.File
	}
	cycles := ""
	if raw := o.Source(settings.MaxPhaseCycles).Raw; raw != strconv.Itoa(o.MaxPhaseCycles) {
		cycles = "raised by the demo from " + raw + ", for the five test runs of scenario 3"
	}
	repeatable := ""
	if o.Source(settings.RepeatableTools).Raw == "" {
		repeatable = "set by the demo, for scenario 3"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "The guard in this demo:\n%s", effectiveGuard(o).text("  "))
	fmt.Fprintf(&b, "Settings of the guard in this demo (phasegate demo --help says how to change them):\n")
	fmt.Fprintf(&b, "  MAX_PHASE_CYCLES=%d (%s)\n", o.MaxPhaseCycles, from(settings.MaxPhaseCycles, cycles))
	fmt.Fprintf(&b, "  MAX_DUPLICATE_ATTEMPTS=%d (%s)\n", o.MaxDuplicateAttempts, from(settings.MaxDuplicateAttempts, ""))
	fmt.Fprintf(&b, "  REPEATABLE_TOOLS=%s (%s)\n", strings.Join(o.RepeatableTools, ","), from(settings.RepeatableTools, repeatable))
	fmt.Fprintf(&b, "  SHOW_NOTICES=%v (%s)\n", o.ShowNotices, from(settings.ShowNotices, ""))
	return b.String()
}

// demoOptions turns the guard on, enforcing, with the budgets and
// profiles its scenarios need.
func demoOptions(o *options) {
	o.TwoStage = true
	o.Proxy.GuardMode, o.Proxy.GuardModes, o.Proxy.GuardProjectModes = protocol.ModeEnforce, nil, nil
	o.Proxy.GuardProfile = protocol.ProfileStrict
	// The test-rerun scenario needs its tool to be repeatable, and room for
	// its five runs. Both are said before anything runs.
	if len(o.RepeatableTools) == 0 {
		o.RepeatableTools = []string{"run_tests"}
	}
	if o.MaxPhaseCycles < demoMaxPhaseCycles {
		o.MaxPhaseCycles = demoMaxPhaseCycles
	}
	// The agent scenarios run under the agent profile; their strict run
	// asks for the default's rules with the headers that tighten them.
	o.Proxy.GuardProfiles = []proxy.ProfileRule{
		{Pattern: sim.SessionModel, Profile: protocol.ProfileAgent},
		{Pattern: sim.VerifyModel, Profile: protocol.ProfileAgent},
	}
}

// runDemo starts a gateway on the simulated looping model, on loopback,
// and runs a short agent through it twice: with the standard protocol and
// with the guard, printing what reaches the client each time.
func runDemo(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parseOptions(demoCommand, args, demoEnv(getenv), stdout)
	if err != nil {
		return err
	}
	demoOptions(&o)
	fmt.Fprint(stdout, demoIgnoredNote(getenv), demoSettings(o))
	h, closeShared, err := newHandler(ctx, o, newLogger(stderr, o.LogLevel, o.Redactor), nil)
	if err != nil {
		return err
	}
	defer closeShared()
	ln, err := net.Listen("tcp", o.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: o.ShutdownTimeout}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		_ = srv.Shutdown(context.Background())
		<-served
	}()

	base := "http://" + ln.Addr().String()
	for _, sc := range demoScenarios() {
		fmt.Fprintf(stdout, "\n##### %s\n%s\n", sc.title, sc.story)
		for _, route := range demoRoutes(base, sc) {
			fmt.Fprintf(stdout, "\n== %s ==\n", route.title)
			if err := demoAgent(ctx, route.url, sc, route.header, stdout); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(stdout, "\n%s\n", demoNext(getenv))
	return nil
}

// demoEnv is the environment as the demo reads it: only its own settings,
// the simulated models whatever the providers, a free loopback port, and
// errors only in the log unless LOG_LEVEL says otherwise.
func demoEnv(getenv func(string) string) func(string) string {
	return func(name string) string {
		switch name {
		case "LISTEN_ADDR":
			return "127.0.0.1:0"
		case "LOG_LEVEL":
			if getenv(name) == "" {
				return "error"
			}
		}
		if !slices.ContainsFunc(demoCommand.reads, func(s *settings.Setting) bool { return s.Env() == name }) {
			return ""
		}
		return getenv(name)
	}
}

// demoIgnoredNote says which of the settings that would change what the
// demo shows the environment sets, and that the demo ignores them.
func demoIgnoredNote(getenv func(string) string) string {
	var set []string
	for _, s := range demoIgnored {
		if v := getenv(s.Env()); v != "" {
			set = append(set, s.Env()+"="+v)
		}
	}
	if len(set) == 0 {
		return ""
	}
	return fmt.Sprintf("Ignored by the demo, which always shows the guard enforcing: %s (set in the environment; `phasegate` itself obeys them).\n", strings.Join(set, ", "))
}

// demoRoute is one way the scripted agent reaches the gateway.
type demoRoute struct {
	title, url string
	header     map[string]string
}

// demoRoutes are the runs of scenario sc: without the guard, then with
// it; an agent scenario's guarded runs are under the strict profile with
// its default 3 tool runs a turn (when sc.strictToo) and under the agent
// profile.
func demoRoutes(base string, sc demoScenario) []demoRoute {
	plain := demoRoute{title: "without the guard: " + base + "/standard/v1", url: base + "/standard/v1"}
	guarded := demoRoute{title: "with the guard: " + base + "/two-stage/v1", url: base + "/two-stage/v1"}
	if sc.envelope != "" {
		guarded.header = map[string]string{proxy.EnvelopeHeader: sc.envelope}
	}
	if !sc.agent {
		return []demoRoute{plain, guarded}
	}
	routes := []demoRoute{plain}
	if sc.strictToo {
		strict := guarded
		strict.title = "with the guard, strict profile (the default: 3 tool runs a turn): " + strict.url
		strict.header = map[string]string{proxy.ProfileHeader: string(protocol.ProfileStrict), "X-Phasegate-Max-Phase-Cycles": "3"}
		routes = append(routes, strict)
	}
	guarded.title = "with the guard, GUARD_PROFILE=agent: " + guarded.url
	return append(routes, guarded)
}

// program is the command that started this process, as typed.
var program = os.Args[0]

// demoNext is the demo's last line: how to keep a gateway up, by the
// command this process was started with (`go run ./cmd/phasegate` when it
// was go run's temporary binary), and the URL a client points at, from
// LISTEN_ADDR or PORT as the gateway reads them.
func demoNext(getenv func(string) string) string {
	cmd := program
	if strings.Contains(filepath.ToSlash(cmd), "/go-build") {
		cmd = "go run ./cmd/phasegate"
	}
	base, err := gatewayURL(getenv)
	if err != nil {
		return fmt.Sprintf("To keep a gateway up, run `%s` (and fix %v); then point your own client at it and watch the X-Phasegate-* headers.", cmd, err)
	}
	return fmt.Sprintf("To keep a gateway up, run `%s`; then point your own client at %s/v1 and watch the X-Phasegate-* headers.", cmd, base)
}

// demoScenario is one failure the demo plays.
type demoScenario struct {
	title, story string
	model        string
	prompt       string
	tools        []openai.Tool
	// envelope, when set, is the X-Phasegate-Envelope header the agent
	// sends on the guarded route.
	envelope string
	// agent runs the guarded route under the agent profile; strictToo
	// runs it under the strict default first.
	agent, strictToo bool
	// maxRequests bounds the agent's requests; 0 is demoMaxRequests.
	maxRequests int
	// run executes a tool call; it may keep state across one agent run,
	// which newRun resets.
	newRun func() func(name, args string) string
}

func demoScenarios() []demoScenario {
	weather := func() func(string, string) string { return demoToolResult }
	return []demoScenario{
		{
			title: "1. A looping model",
			story: "The model bursts parallel calls, repeats calls it already made, sends malformed\narguments and calls a tool nobody declared — as DeepSeek does on a bad day.",
			model: sim.LoopingModel, prompt: "What's the weather in Paris, and what time is it there?", tools: demoTools, newRun: weather,
		},
		{
			title: "2. A tool call leaked into the content",
			story: "The model writes its call as DeepSeek's special tokens in the text, split across\nchunks, instead of a tool_calls delta.",
			model: sim.LeakyModel, prompt: "What's the weather in Paris?", tools: demoTools, newRun: weather,
		},
		{
			title: "3. Re-running the tests (run_tests is in REPEATABLE_TOOLS)",
			story: "The model runs the tests, edits, runs them again — a legitimate repeat — and then\nkeeps re-running them without changing anything.",
			model: sim.TestsModel, prompt: "Make the tests pass.", tools: demoTestTools,
			newRun: func() func(string, string) string {
				edits := 0
				return func(name, _ string) string {
					switch name {
					case "edit_file":
						edits++
						return `{"ok":true}`
					case "run_tests":
						return fmt.Sprintf(`{"failed":%d}`, max(2-edits, 1))
					}
					return `{"error":"unknown tool"}`
				}
			},
		},
		{
			title: "4. An orchestrator's envelope, broken (X-Phasegate-Envelope: required)",
			story: "An orchestrator wants its answer in a <<<ORCHESTRATOR_RESPONSE>>> envelope; the model\nleaves out a required field and writes an unknown complexity.",
			model: sim.OrchestratorModel, prompt: "Analyse the codebase (broken).", envelope: "required", newRun: weather,
		},
		{
			title: "5. A coding agent's long turn (20 tool calls)",
			story: "The model explores, reads, edits, re-runs the tests after each edit and commits: legitimate\nwork whose repeats bring new results. The strict default cuts it at 3 tool runs; the agent\nprofile lets it run to its answer.",
			model: sim.SessionModel, prompt: "Fix the rounding bug in calc and commit.", tools: demoSessionTools,
			agent: true, strictToo: true, maxRequests: 24, newRun: demoSession,
		},
		{
			title: "6. A cosmetic verification loop (execute_code)",
			story: "Its work done, the model keeps \"verifying\" with execute_code calls that differ only in\nquotes, spaces and comments and print the same thing (NousResearch/hermes-agent issue 37255).",
			model: sim.VerifyModel, prompt: "What is the total of sales.csv?", tools: demoCodeTools,
			agent: true, maxRequests: 8, newRun: demoCode,
		},
	}
}

var demoTestTools = []openai.Tool{
	{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "run_tests", Description: "Run the test suite",
		Parameters: jsonschema.Definition{Type: jsonschema.Object, Properties: map[string]jsonschema.Definition{"package": {Type: jsonschema.String}}, Required: []string{"package"}}}},
	{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "edit_file", Description: "Edit a file",
		Parameters: jsonschema.Definition{Type: jsonschema.Object, Properties: map[string]jsonschema.Definition{"path": {Type: jsonschema.String}, "change": {Type: jsonschema.String}}, Required: []string{"path", "change"}}}},
}

var demoTools = []openai.Tool{
	{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "get_weather", Description: "Current weather of a city",
		Parameters: jsonschema.Definition{Type: jsonschema.Object, Properties: map[string]jsonschema.Definition{"city": {Type: jsonschema.String}}, Required: []string{"city"}}}},
	{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "get_time", Description: "Current time in a timezone",
		Parameters: jsonschema.Definition{Type: jsonschema.Object, Properties: map[string]jsonschema.Definition{"timezone": {Type: jsonschema.String}}, Required: []string{"timezone"}}}},
}

// demoAgent is an ordinary agent loop: stream a response, execute every
// tool call it holds, append the results, ask again — until the model
// answers or demoMaxRequests is reached.
func demoAgent(ctx context.Context, baseURL string, sc demoScenario, header map[string]string, out io.Writer) error {
	cfg := openai.DefaultConfig("demo-key")
	cfg.BaseURL = baseURL
	if len(header) > 0 {
		cfg.HTTPClient = &http.Client{Transport: headerTransport(header)}
	}
	maxRequests := demoMaxRequests
	if sc.maxRequests > 0 {
		maxRequests = sc.maxRequests
	}
	client := openai.NewClientWithConfig(cfg)
	msgs := []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: sc.prompt}}
	runTool := sc.newRun()
	executed := 0
	for n := 1; n <= maxRequests; n++ {
		content, calls, finish, err := demoTurn(ctx, client, openai.ChatCompletionRequest{Model: sc.model, Messages: msgs, Tools: sc.tools, Stream: true})
		if err != nil {
			return fmt.Errorf("request %d: %w", n, err)
		}

		fmt.Fprintf(out, "request %d → finish %q, %d tool call(s)\n", n, finish, len(calls))
		if text := strings.TrimSpace(content); text != "" {
			for _, line := range strings.Split(text, "\n") {
				if line = strings.TrimSpace(line); line != "" {
					fmt.Fprintf(out, "    says: %s\n", line)
				}
			}
		}
		if len(calls) == 0 {
			fmt.Fprintf(out, "  done: an answer after %d request(s) and %d tool execution(s).\n", n, executed)
			return nil
		}
		msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: content, ToolCalls: calls})
		for _, c := range calls {
			executed++
			fmt.Fprintf(out, "    agent runs %s %s\n", c.Function.Name, c.Function.Arguments)
			result := runTool(c.Function.Name, c.Function.Arguments)
			fmt.Fprintf(out, "      → %s\n", result)
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: c.ID, Content: result})
		}
	}
	fmt.Fprintf(out, "  stopped by the demo after %d requests and %d tool executions: the model never answered.\n", maxRequests, executed)
	return nil
}

// demoTurn streams one response and returns its text, its tool calls
// (their deltas accumulated by index) and its finish reason.
func demoTurn(ctx context.Context, client *openai.Client, req openai.ChatCompletionRequest) (string, []openai.ToolCall, string, error) {
	stream, err := client.CreateChatCompletionStream(ctx, req)
	if err != nil {
		return "", nil, "", err
	}
	defer stream.Close()
	var content strings.Builder
	var calls []openai.ToolCall
	finish := ""
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return content.String(), calls, finish, nil
		}
		if err != nil {
			return "", nil, "", err
		}
		if len(resp.Choices) == 0 {
			continue
		}
		ch := resp.Choices[0]
		content.WriteString(ch.Delta.Content)
		for _, d := range ch.Delta.ToolCalls {
			i := 0
			if d.Index != nil {
				i = *d.Index
			}
			for len(calls) <= i {
				calls = append(calls, openai.ToolCall{Type: openai.ToolTypeFunction})
			}
			if d.ID != "" {
				calls[i].ID = d.ID
			}
			calls[i].Function.Name += d.Function.Name
			calls[i].Function.Arguments += d.Function.Arguments
		}
		if ch.FinishReason != "" {
			finish = string(ch.FinishReason)
		}
	}
}

// headerTransport adds its headers to every request.
type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func demoToolResult(name, _ string) string {
	switch name {
	case "get_weather":
		return `{"city":"Paris","sky":"sunny","celsius":21}`
	case "get_time":
		return `{"timezone":"Europe/Paris","time":"14:05"}`
	}
	return `{"error":"unknown tool"}`
}
