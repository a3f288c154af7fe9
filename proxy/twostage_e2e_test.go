package proxy_test

// End-to-end tests of the two-stage guard: the real router, the real
// upstream transport, a scripted DeepSeek that loops on tools, and the
// go-openai client running the agent loop a user's agent runs.
//
// Helpers here are prefixed "ts" to stay clear of the package's other test
// files.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
	"github.com/phasegate/phasegate/tools"
)

const (
	tsModel   = "deepseek-v4-flash"
	tsProject = "proj-e2e"
	// tsWait bounds every request of these tests.
	tsWait = 10 * time.Second
	// tsMaxRequests bounds every agent loop: far more than any budget lets
	// a guarded loop run.
	tsMaxRequests = 12
)

// tsParams are the parameter schemas of the agent's tools.
var tsParams = map[string]string{
	"read_file":  `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`,
	"list_dir":   `{"type":"object","properties":{}}`,
	"write_file": `{"type":"object","properties":{"path":{"type":"string"},"text":{"type":"string"}},"required":["path","text"]}`,
}

func tsTools() []openai.Tool {
	var out []openai.Tool
	for _, name := range []string{"read_file", "list_dir", "write_file"} {
		out = append(out, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: name, Description: "The agent's " + name + " tool.", Parameters: json.RawMessage(tsParams[name])}})
	}
	return out
}

// ---------------------------------------------------------------------------
// The looping DeepSeek.

// tsState is what the scripted model reads off a request, as the gateway
// does: the history is all there is.
type tsState struct {
	// executed are the calls of the turn that a tool message answers.
	executed []chat.ToolCall
	// notices is the number of system messages trailing the history: the
	// guard's notices since the last tool result.
	notices int
	tools   bool
}

func tsReadState(req *chat.Request) tsState {
	st := tsState{executed: proxytest.Executed(req), tools: len(req.Tools) > 0}
scan:
	for i := len(req.Messages) - 1; i >= 0; i-- {
		switch req.Messages[i].Role {
		case chat.RoleSystem:
			st.notices++
		case chat.RoleAssistant:
		default:
			break scan
		}
	}
	return st
}

// tsPersona decides what the model streams; the stream ends with its
// finish, the double adds usage and [DONE].
type tsPersona func(st tsState) *sim.Stream

var tsFiles = []string{"a.go", "b.go", "c.go", "d.go", "e.go", "f.go"}

// tsChainer is a DeepSeek that makes progress but loops on the way: it
// bursts parallel calls, repeats the call it just ran (respaced), sends
// malformed arguments or an undeclared tool, and only then moves on to the
// next file. Offered no tools, it answers, still trying one more call.
func tsChainer(st tsState) *sim.Stream {
	s := sim.NewStream(tsModel).Role()
	k := len(st.executed)
	switch {
	case !st.tools:
		return s.Reasoning("The budget is spent; answer.").Content("Final answer from ", strconv.Itoa(k)+" tool results.").
			ToolCall(0, "call_stubborn", "read_file", `{"path":"z.go"}`).Finish("tool_calls")
	case k == 0 && st.notices == 0:
		return s.Reasoning("I need ", "the files.").Content("Let me read the files.").
			ToolCall(0, "call_a", "read_file", `{"path":`, `"a.go"}`).
			ToolCall(1, "call_b", "read_file", `{"path":"b.go"}`).
			ToolCall(2, "call_l", "list_dir").Finish("tool_calls")
	case st.notices == 0:
		last := st.executed[k-1]
		respaced := " " + strings.ReplaceAll(last.Function.Arguments, ":", " : ") + " "
		return s.Reasoning("Read it again to be sure.").ToolCall(0, fmt.Sprintf("call_again%d", k), last.Function.Name, respaced).Finish("tool_calls")
	case st.notices == 1 && k == 1:
		return s.Reasoning("Next file.").ToolCall(0, "call_cut", "read_file", `{"path": "b.go"`).ToolCall(1, "call_cut2", "list_dir").Finish("tool_calls")
	case st.notices == 1:
		return s.Reasoning("Use the shell.").ToolCall(0, "call_sh", "shell_exec", `{"cmd":"cat c.go"}`).Finish("tool_calls")
	default:
		return s.Reasoning("Read the next file.").Content("Reading "+tsFiles[k]+".").
			ToolCall(0, fmt.Sprintf("call_next%d", k), "read_file", `{"path":"`+tsFiles[k]+`"}`).
			ToolCall(1, fmt.Sprintf("call_old%d", k), "read_file", `{"path":"a.go"}`).Finish("tool_calls")
	}
}

// tsLooper is a DeepSeek that never moves on: once a call ran, it repeats
// it, in the same response bursting the repeat with others.
func tsLooper(st tsState) *sim.Stream {
	s := sim.NewStream(tsModel).Role()
	switch {
	case !st.tools:
		return s.Content("Final answer: a.go holds the code.").Finish("stop")
	case len(st.executed) == 0:
		return s.Reasoning("Read a.go.").ToolCall(0, "call_1", "read_file", `{"path":"a.go"}`).
			ToolCall(1, "call_2", "read_file", `{"path":"a.go"}`).Finish("tool_calls")
	default:
		return s.Reasoning("Read a.go again.").ToolCall(0, fmt.Sprintf("call_%d", st.notices+3), "read_file", `{"path":"a.go"}`).
			ToolCall(1, "call_x", "list_dir").Finish("tool_calls")
	}
}

// tsDeepSeek answers chat completions as DeepSeek's thinking mode does,
// the content decided by persona: it refuses an assistant tool-call
// message without its reasoning_content (which the gateway must
// restore), streams only, and
// sends usage with its cache fields when asked.
func tsDeepSeek(t *testing.T, persona tsPersona) proxytest.Responder {
	return func(r proxytest.Received) sim.Reply {
		req, err := chat.ParseRequest(r.Body)
		if err != nil {
			t.Errorf("upstream got a request that does not parse: %v", err)
			return sim.Error(http.StatusBadRequest, err.Error(), "invalid_request_error", "invalid_request_error")
		}
		for i, m := range req.Messages {
			if m.Role == chat.RoleAssistant && len(m.ToolCalls) > 0 && (m.ReasoningContent == nil || *m.ReasoningContent == "") {
				t.Errorf("upstream got assistant message %d with tool calls but no reasoning_content", i)
				return sim.Error(http.StatusBadRequest, "Missing `reasoning_content` field in the assistant message", "invalid_request_error", "invalid_request_error")
			}
		}
		if !req.Stream {
			t.Errorf("the guard asked the upstream without streaming")
			return sim.Error(http.StatusBadRequest, "this double streams only", "invalid_request_error", "invalid_request_error")
		}
		s := persona(tsReadState(req))
		if req.IncludeUsage {
			s.Usage(100, 20, map[string]any{"prompt_cache_hit_tokens": 80, "prompt_cache_miss_tokens": 20})
		}
		return s.Done().Reply()
	}
}

// ---------------------------------------------------------------------------
// The gateway and the client.

// tsGateway serves a gateway whose default protocol is the guard (nil
// guard: none) in front of a scripted upstream, both on loopback.
func tsGateway(t *testing.T, respond proxytest.Responder, guard *protocol.TwoStage, planMode bool) (*proxytest.Upstream, *httptest.Server) {
	t.Helper()
	up, usrv := proxytest.NewServer(t, respond)
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}}
	opts := proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, PlanMode: planMode}
	if guard != nil { // a nil *TwoStage in the interface would not be nil
		opts.TwoStage = guard
	}
	return up, serveGateway(t, cfg, opts)
}

// tsTap is the client's transport: it adds headers to every request and
// keeps a copy of every response body as the client read it, so the raw
// chunks can be checked after go-openai parsed them.
type tsTap struct {
	base   http.RoundTripper
	header http.Header

	mu     sync.Mutex
	bodies []*bytes.Buffer
}

func (tp *tsTap) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, vs := range tp.header {
		req.Header[k] = vs
	}
	resp, err := tp.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	buf := &bytes.Buffer{}
	tp.mu.Lock()
	tp.bodies = append(tp.bodies, buf)
	tp.mu.Unlock()
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, buf), resp.Body}
	return resp, nil
}

// last returns the body of the latest response, as far as it was read.
func (tp *tsTap) last(t *testing.T) []byte {
	t.Helper()
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if len(tp.bodies) == 0 {
		t.Fatal("no response went through the client")
	}
	return tp.bodies[len(tp.bodies)-1].Bytes()
}

func tsClient(gw *httptest.Server, basePath string, header http.Header) (*openai.Client, *tsTap) {
	tap := &tsTap{base: gw.Client().Transport, header: header}
	c := openai.DefaultConfig("sk-client")
	c.BaseURL = gw.URL + basePath
	c.HTTPClient = &http.Client{Transport: tap}
	c.EmptyMessagesLimit = 1 << 20
	return openai.NewClientWithConfig(c), tap
}

func tsContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), tsWait)
	t.Cleanup(cancel)
	return ctx
}

// tsData returns the data of every event of a raw event stream.
func tsData(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read event stream: %v", err)
	}
	return out
}

// tsMeta is the gateway's phase metadata.
type tsMeta struct {
	Phase      string `json:"phase"`
	RequestID  string `json:"request_id"`
	ProjectID  string `json:"project_id"`
	PhaseIndex int    `json:"phase_index"`
	CycleIndex int    `json:"cycle_index"`
}

// tsCheckMeta checks that a chunk or completion carries the metadata of
// request requestID.
func tsCheckMeta(t *testing.T, data []byte, requestID string) tsMeta {
	t.Helper()
	var v struct {
		Meta *tsMeta `json:"phasegate"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("client data is not JSON: %v\n%s", err, data)
	}
	if v.Meta == nil {
		t.Fatalf("client data carries no phasegate metadata: %s", data)
	}
	if v.Meta.RequestID != requestID || v.Meta.ProjectID != tsProject || v.Meta.PhaseIndex < 1 {
		t.Errorf("metadata = %+v, want request %q, project %q, a phase index", *v.Meta, requestID, tsProject)
	}
	return *v.Meta
}

// tsTurn is what one request gave the agent.
type tsTurn struct {
	content, reasoning string
	calls              []openai.ToolCall
	finishes           []string
	usage              *openai.Usage
	header             http.Header
	chunks             int
}

// tsAgent runs an agent loop with go-openai, as a user's agent does: send
// the history, read the answer, run the tools it calls, append the
// assistant message and the tool results, send again.
type tsAgent struct {
	client *openai.Client
	tap    *tsTap
	stream bool
	// ran counts the tool executions, by signature.
	ran map[tools.Signature]int
}

// send makes one request and reads its answer whole. For a stream, the
// tool-call deltas are accumulated by index, as agents do.
func (a *tsAgent) send(t *testing.T, ctx context.Context, msgs []openai.ChatCompletionMessage) tsTurn {
	t.Helper()
	req := openai.ChatCompletionRequest{Model: tsModel, Messages: msgs, Tools: tsTools()}
	var turn tsTurn
	if !a.stream {
		resp, err := a.client.CreateChatCompletion(ctx, req)
		if err != nil {
			t.Fatalf("CreateChatCompletion: %v", err)
		}
		if len(resp.Choices) != 1 {
			t.Fatalf("completion has %d choices, want 1", len(resp.Choices))
		}
		m := resp.Choices[0].Message
		turn = tsTurn{content: m.Content, reasoning: m.ReasoningContent, calls: m.ToolCalls,
			finishes: []string{string(resp.Choices[0].FinishReason)}, usage: &resp.Usage, header: resp.Header(), chunks: 1}
		tsCheckMeta(t, a.tap.last(t), turn.header.Get("X-Request-Id"))
		return turn
	}
	req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	st, err := a.client.CreateChatCompletionStream(ctx, req)
	if err != nil {
		t.Fatalf("CreateChatCompletionStream: %v", err)
	}
	defer st.Close()
	r, err := collect(st)
	if err != nil {
		t.Fatalf("go-openai failed after chunk %d: %v", r.Chunks, err)
	}
	if r.MaxChoices > 1 {
		t.Errorf("a chunk has %d choices, want 1", r.MaxChoices)
	}
	turn = tsTurn{content: r.Content, reasoning: r.Reasoning, calls: r.ToolCalls, usage: r.Usage, chunks: r.Chunks, header: st.Header()}
	for _, f := range r.Finishes {
		turn.finishes = append(turn.finishes, string(f))
	}
	requestID := turn.header.Get("X-Request-Id")
	data := tsData(t, a.tap.last(t))
	if len(data) == 0 || data[len(data)-1] != "[DONE]" {
		t.Errorf("the stream does not end with [DONE]: %q", data)
	}
	for _, d := range data[:max(len(data)-1, 0)] {
		tsCheckMeta(t, []byte(d), requestID)
	}
	return turn
}

// execute runs a fake tool.
func (a *tsAgent) execute(t *testing.T, c openai.ToolCall) string {
	t.Helper()
	sig, err := tools.NewSignature(tsProject, c.Function.Name, c.Function.Arguments)
	if err != nil {
		t.Errorf("the client got a call with malformed arguments: %s(%s)", c.Function.Name, c.Function.Arguments)
		return "error: malformed arguments"
	}
	a.ran[sig]++
	var args struct {
		Path string `json:"path"`
	}
	_ = json.Unmarshal([]byte(c.Function.Arguments), &args)
	return fmt.Sprintf("%s(%s): package main // contents of %s", c.Function.Name, c.Function.Arguments, args.Path)
}

// loop runs the agent until the model answers without a tool call,
// checking every answer as it comes: one finish, at most one call, never a
// call the turn already executed, the headers of the budgets in force.
func (a *tsAgent) loop(t *testing.T, ctx context.Context, maxCycles int) []tsTurn {
	t.Helper()
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "You are a coding agent."},
		{Role: openai.ChatMessageRoleUser, Content: "Summarise the Go files."},
	}
	var turns []tsTurn
	executed := 0
	for range tsMaxRequests {
		turn := a.send(t, ctx, msgs)
		turns = append(turns, turn)
		n := len(turns)
		for k, want := range map[string]string{
			"X-Phasegate-Protocol":         proxy.ProtocolTwoStage,
			"X-Phasegate-Phase":            string(protocol.PhaseAction),
			"X-Phasegate-Phase-Index":      "1",
			"X-Phasegate-Cycle-Index":      strconv.Itoa(executed),
			"X-Phasegate-Max-Phase-Cycles": strconv.Itoa(maxCycles),
			"X-Phasegate-Project-Id":       tsProject,
		} {
			if got := turn.header.Get(k); got != want {
				t.Errorf("request %d: header %s = %q, want %q", n, k, got, want)
			}
		}
		if len(turn.finishes) != 1 {
			t.Fatalf("request %d: finish reasons %q, want exactly one", n, turn.finishes)
		}
		if len(turn.calls) > 1 {
			t.Fatalf("request %d: the client got %d tool calls, want at most one", n, len(turn.calls))
		}
		if turn.usage == nil || turn.usage.PromptTokens == 0 {
			t.Errorf("request %d: usage = %+v, want the upstream calls' usage", n, turn.usage)
		}
		assistant := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: turn.content, ReasoningContent: turn.reasoning}
		if len(turn.calls) == 0 {
			if turn.finishes[0] != string(openai.FinishReasonStop) {
				t.Errorf("request %d: finish = %q without a tool call, want stop", n, turn.finishes[0])
			}
			return turns
		}
		if turn.finishes[0] != string(openai.FinishReasonToolCalls) {
			t.Errorf("request %d: finish = %q with a tool call, want tool_calls", n, turn.finishes[0])
		}
		c := turn.calls[0]
		if c.ID == "" || c.Function.Name == "" {
			t.Errorf("request %d: call %+v lacks an id or a name", n, c)
		}
		if sig, err := tools.NewSignature(tsProject, c.Function.Name, c.Function.Arguments); err == nil && a.ran[sig] > 0 {
			t.Errorf("request %d: the client got a duplicate of an executed call: %s(%s)", n, c.Function.Name, c.Function.Arguments)
		}
		c.Index = nil // an index belongs to stream deltas, not to history
		assistant.ToolCalls = []openai.ToolCall{c}
		msgs = append(msgs, assistant, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: c.ID, Content: a.execute(t, c)})
		executed++
		if executed > maxCycles {
			t.Fatalf("the client executed %d calls, more than MAX_PHASE_CYCLES (%d)", executed, maxCycles)
		}
	}
	t.Fatalf("the agent loop did not end within %d requests", tsMaxRequests)
	return nil
}

// ---------------------------------------------------------------------------
// Tests.

// TestTwoStageE2EAgentLoop runs a real agent loop against a looping
// DeepSeek through the gateway: the loop ends within MAX_PHASE_CYCLES
// executed calls with a final text answer, never seeing more than one call
// per response nor a repeated call.
func TestTwoStageE2EAgentLoop(t *testing.T) {
	tests := []struct {
		name    string
		persona tsPersona
		stream  bool
		header  http.Header
		// want* are the client requests, executed calls and upstream
		// calls the loop takes.
		wantRequests, wantExecuted, wantUpstream int
		wantCycles                               int
		wantFinal                                string
	}{
		{
			// 1: burst → a.go. 2: repeat, cut arguments, then b.go.
			// 3: repeat, undeclared tool, then c.go. 4: budget spent.
			name: "chainer runs into the cycle budget", persona: tsChainer, stream: true,
			wantRequests: 4, wantExecuted: 3, wantUpstream: 8, wantCycles: 3, wantFinal: "Final answer from 3 tool results.",
		},
		{
			name: "chainer, non-streaming client", persona: tsChainer, stream: false,
			wantRequests: 4, wantExecuted: 3, wantUpstream: 8, wantCycles: 3, wantFinal: "Final answer from 3 tool results.",
		},
		{
			// 1: burst → a.go. 2: three repeats, then the final call.
			name: "looper runs into the refusal budget", persona: tsLooper, stream: true,
			wantRequests: 2, wantExecuted: 1, wantUpstream: 5, wantCycles: 3, wantFinal: "Final answer: a.go holds the code.",
		},
		{
			name: "looper, non-streaming client", persona: tsLooper, stream: false,
			wantRequests: 2, wantExecuted: 1, wantUpstream: 5, wantCycles: 3, wantFinal: "Final answer: a.go holds the code.",
		},
		{
			name: "a request header lowers the cycle budget", persona: tsChainer, stream: true,
			header:       http.Header{"X-Phasegate-Max-Phase-Cycles": {"2"}},
			wantRequests: 3, wantExecuted: 2, wantUpstream: 5, wantCycles: 2, wantFinal: "Final answer from 2 tool results.",
		},
		{
			name: "a request header lowers the refusal budget", persona: tsChainer, stream: true,
			header:       http.Header{"X-Phasegate-Max-Duplicate-Attempts": {"1"}},
			wantRequests: 2, wantExecuted: 1, wantUpstream: 3, wantCycles: 3, wantFinal: "Final answer from 1 tool results.",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up, gw := tsGateway(t, tsDeepSeek(t, tt.persona), protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), false)
			header := http.Header{"X-Project-Id": {tsProject}}
			for k, v := range tt.header {
				header[k] = v
			}
			client, tap := tsClient(gw, "/v1", header)
			agent := &tsAgent{client: client, tap: tap, stream: tt.stream, ran: map[tools.Signature]int{}}
			turns := agent.loop(t, tsContext(t), tt.wantCycles)

			if len(turns) != tt.wantRequests {
				t.Errorf("client requests = %d, want %d", len(turns), tt.wantRequests)
			}
			executed := 0
			for sig, n := range agent.ran {
				executed += n
				if n > 1 {
					t.Errorf("call %v executed %d times", sig, n)
				}
			}
			if executed != tt.wantExecuted {
				t.Errorf("executed calls = %d, want %d", executed, tt.wantExecuted)
			}
			final := turns[len(turns)-1]
			if !strings.HasSuffix(final.content, tt.wantFinal) {
				t.Errorf("final answer = %q, want it to end with %q", final.content, tt.wantFinal)
			}
			if !strings.Contains(final.content, "**System Notice**") {
				t.Errorf("final answer = %q, want the notice that forced it", final.content)
			}

			received := up.Received()
			if len(received) != tt.wantUpstream {
				t.Errorf("upstream calls = %d, want %d", len(received), tt.wantUpstream)
			}
			withoutTools := 0
			for i, r := range received {
				var body struct {
					Stream        bool `json:"stream"`
					StreamOptions struct {
						IncludeUsage bool `json:"include_usage"`
					} `json:"stream_options"`
					Tools      json.RawMessage `json:"tools"`
					ToolChoice json.RawMessage `json:"tool_choice"`
				}
				if err := r.Decode(&body); err != nil {
					t.Fatalf("upstream request %d: %v", i+1, err)
				}
				if !body.Stream || !body.StreamOptions.IncludeUsage {
					t.Errorf("upstream request %d: stream %v, include_usage %v; want both", i+1, body.Stream, body.StreamOptions.IncludeUsage)
				}
				if len(body.Tools) == 0 {
					withoutTools++
				}
			}
			if withoutTools != 1 {
				t.Errorf("upstream calls without tools = %d, want exactly the one final call", withoutTools)
			}
			if last := received[len(received)-1]; !bytes.Contains(last.Body, []byte(`"role":"system"`)) {
				t.Errorf("the final upstream call carries no notice")
			}
		})
	}
}

// TestTwoStageE2EOneCallPerResponse pins what reaches go-openai when the
// model bursts parallel calls: the first call whole, alone, at index 0, the
// text before it, one finish, the usage of the upstream, and the
// extension field go-openai ignores.
func TestTwoStageE2EOneCallPerResponse(t *testing.T) {
	burst := sim.NewStream(tsModel).Role().Reasoning("Three files.").Content("Reading ", "them.").
		ToolCall(0, "call_a", "read_file", `{"pa`, `th":"a.go"}`).
		ToolCall(1, "call_b", "read_file", `{"path":"b.go"}`).
		ToolCall(2, "call_c", "write_file", `{"path":"c.go","text":"x"}`).Finish("tool_calls").
		Usage(100, 20, map[string]any{"prompt_cache_hit_tokens": 80}).Done()
	for _, streaming := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", streaming), func(t *testing.T) {
			t.Parallel()
			up, gw := tsGateway(t, proxytest.Script(burst.Reply()), protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), false)
			client, tap := tsClient(gw, "/v1", http.Header{"X-Project-Id": {tsProject}, "X-Request-Id": {"req-burst"}})
			agent := &tsAgent{client: client, tap: tap, stream: streaming, ran: map[tools.Signature]int{}}
			turn := agent.send(t, tsContext(t), []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "Read them."}})
			want := []openai.ToolCall{{ID: "call_a", Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "read_file", Arguments: `{"path":"a.go"}`}}}
			got := turn.calls
			for i := range got {
				got[i].Index = nil
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("tool calls the client got (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"tool_calls"}, turn.finishes); diff != "" {
				t.Errorf("finish reasons (-want +got):\n%s", diff)
			}
			if turn.content != "Reading them." || turn.reasoning != "Three files." {
				t.Errorf("content %q, reasoning %q; want the text before the call", turn.content, turn.reasoning)
			}
			if turn.usage == nil || turn.usage.PromptTokens == 0 {
				t.Errorf("usage = %+v, want the (estimated) usage of the cut-off call", turn.usage)
			}
			if got := turn.header.Get("X-Request-Id"); got != "req-burst" {
				t.Errorf("X-Request-Id = %q, want the client's req-burst", got)
			}
			if got := turn.header.Get("X-Phasegate-Provider"); got != "deepseek" {
				t.Errorf("X-Phasegate-Provider = %q, want deepseek", got)
			}
			raw := tap.last(t)
			if bytes.Contains(raw, []byte("call_b")) || bytes.Contains(raw, []byte("call_c")) {
				t.Errorf("a later call of the burst reached the client:\n%s", raw)
			}
			if streaming {
				phases := []string{}
				for _, d := range tsData(t, raw) {
					if d == "[DONE]" {
						continue
					}
					m := tsCheckMeta(t, []byte(d), "req-burst")
					if len(phases) == 0 || phases[len(phases)-1] != m.Phase {
						phases = append(phases, m.Phase)
					}
				}
				if diff := cmp.Diff([]string{"action_phase", "tool_phase", "complete"}, phases); diff != "" {
					t.Errorf("phases of the chunks (-want +got):\n%s", diff)
				}
			} else if m := tsCheckMeta(t, raw, "req-burst"); m.Phase != string(protocol.PhaseComplete) || m.CycleIndex != 1 {
				t.Errorf("completion metadata = %+v, want phase complete in cycle 1", m)
			}
			if n := len(up.Received()); n != 1 {
				t.Errorf("upstream calls = %d, want 1", n)
			}
		})
	}
}

// TestTwoStageE2ERoutes: the guard's route answers 501 when the guard is
// off, and the default route then passes requests through. With the guard
// on, the default route guards a request that declares tools or carries an
// orchestrator envelope, and passes any other through: the guard has
// nothing to judge in it.
func TestTwoStageE2ERoutes(t *testing.T) {
	t.Parallel()
	answer := sim.NewStream(tsModel).Role().Content("hi").Finish("stop").Done()
	envelope := http.Header{proxy.EnvelopeHeader: {"optional"}}
	tests := []struct {
		name         string
		guard        bool
		path         string
		tools        bool
		header       http.Header
		wantStatus   int
		wantProtocol string
	}{
		{name: "guard route without a guard", path: "/two-stage/v1", wantStatus: http.StatusNotImplemented},
		{name: "default route without a guard", path: "/v1", tools: true, wantStatus: http.StatusOK, wantProtocol: proxy.ProtocolStandard},
		{name: "guard route", guard: true, path: "/two-stage/v1", wantStatus: http.StatusOK, wantProtocol: proxy.ProtocolTwoStage},
		{name: "default route with tools", guard: true, path: "/v1", tools: true, wantStatus: http.StatusOK, wantProtocol: proxy.ProtocolTwoStage},
		{name: "default route without tools", guard: true, path: "/v1", wantStatus: http.StatusOK, wantProtocol: proxy.ProtocolStandard},
		{name: "default route with an envelope", guard: true, path: "/v1", header: envelope, wantStatus: http.StatusOK, wantProtocol: proxy.ProtocolTwoStage},
		{name: "default route with envelopes off", guard: true, path: "/v1", header: http.Header{proxy.EnvelopeHeader: {"off"}}, wantStatus: http.StatusOK, wantProtocol: proxy.ProtocolStandard},
		{name: "standard route", guard: true, path: "/standard/v1", tools: true, wantStatus: http.StatusOK, wantProtocol: proxy.ProtocolStandard},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var guard *protocol.TwoStage
			if tt.guard {
				guard = protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)
			}
			up, gw := tsGateway(t, proxytest.Script(answer.Reply()), guard, false)
			client, _ := tsClient(gw, tt.path, tt.header)
			req := openai.ChatCompletionRequest{Model: tsModel,
				Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "hi"}}}
			if tt.tools {
				req.Tools = tsTools()
			}
			st, err := client.CreateChatCompletionStream(tsContext(t), req)
			if tt.wantStatus != http.StatusOK {
				var apiErr *openai.APIError
				if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != tt.wantStatus || apiErr.Code != "two_stage_disabled" {
					t.Fatalf("error = %v, want an *openai.APIError %d two_stage_disabled", err, tt.wantStatus)
				}
				if n := len(up.Received()); n != 0 {
					t.Errorf("upstream calls = %d, want none", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("CreateChatCompletionStream: %v", err)
			}
			defer st.Close()
			if got := st.Header().Get("X-Phasegate-Protocol"); got != tt.wantProtocol {
				t.Errorf("X-Phasegate-Protocol = %q, want %q", got, tt.wantProtocol)
			}
			content := ""
			for range 100 {
				resp, err := st.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("Recv: %v", err)
				}
				for _, ch := range resp.Choices {
					content += ch.Delta.Content
				}
			}
			if content != "hi" {
				t.Errorf("content = %q, want hi", content)
			}
		})
	}
}

// tsPost sends a raw request to the gateway.
func tsPost(t *testing.T, gw *httptest.Server, path, body string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(tsContext(t), http.MethodPost, gw.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := gw.Client().Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, b
}

func tsBody(stream bool, extra string) string {
	s := `{"model":"` + tsModel + `","messages":[{"role":"user","content":"hi"}],"stream":` + strconv.FormatBool(stream) +
		`,"tools":[{"type":"function","function":{"name":"read_file","parameters":` + tsParams["read_file"] + `}}]`
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

// TestTwoStageE2ESeveralChoices: n > 1 is served by the standard protocol,
// with a warning header; the request and the stream pass through as they
// are.
func TestTwoStageE2ESeveralChoices(t *testing.T) {
	t.Parallel()
	chunk := func(index int, delta, finish string) string {
		return `{"id":"chatcmpl-n","object":"chat.completion.chunk","created":1,"model":"` + tsModel + `","choices":[{"index":` +
			strconv.Itoa(index) + `,"delta":` + delta + `,"finish_reason":` + finish + `}]}`
	}
	events := sim.NewStream(tsModel).Raw(chunk(0, `{"role":"assistant","content":"one"}`, "null")).
		Raw(chunk(1, `{"role":"assistant","content":"two"}`, "null")).
		Raw(chunk(0, `{}`, `"stop"`)).Raw(chunk(1, `{}`, `"stop"`)).Done()
	up, gw := tsGateway(t, proxytest.Script(events.Reply()), protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), false)
	body := tsBody(true, `"n":2`)
	resp, got := tsPost(t, gw, "/v1/chat/completions", body, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d, want 200: %s", resp.StatusCode, got)
	}
	if p := resp.Header.Get("X-Phasegate-Protocol"); p != proxy.ProtocolStandard {
		t.Errorf("X-Phasegate-Protocol = %q, want standard", p)
	}
	if w := resp.Header.Get("X-Phasegate-Warning"); w == "" {
		t.Errorf("no X-Phasegate-Warning header")
	}
	want := []string{}
	for _, ev := range events.Events() {
		want = append(want, ev.Data)
	}
	if diff := cmp.Diff(want, tsData(t, got)); diff != "" {
		t.Errorf("events the client got (-upstream +client):\n%s", diff)
	}
	received := up.Received()
	if len(received) != 1 || string(received[0].Body) != body {
		t.Errorf("upstream got %d requests, want 1 with the client's body byte for byte", len(received))
	}
}

// panicTracer breaks the guard on purpose: it panics on the first event
// of one kind, as a broken invariant inside the guard would.
type panicTracer struct{ on metrics.TraceKind }

func (p panicTracer) Trace(_ context.Context, ev metrics.Trace) {
	if ev.Kind == p.on {
		panic("broken invariant")
	}
}

// TestTwoStageE2EFallback: the guard itself fails (a panic while judging
// the model's call) before anything but the opening chunk reached the
// client, and the standard protocol serves the request instead, asking the
// upstream again with the client's own body; a streaming client has one
// opening chunk, the guard's, and one id.
func TestTwoStageE2EFallback(t *testing.T) {
	t.Parallel()
	// The opening and the call come in one write: the guard fails before
	// it flushes the opening, so the headers still tell of the fallback.
	call := sim.NewStream(tsModel).Role().ToolCall(0, "call_1", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Burst().Done()
	good := sim.NewStream(tsModel).Role().Content("fallback ", "answer").Finish("stop").Done()
	completion := sim.Completion(tsModel, map[string]any{"content": "fallback answer"}, "stop",
		map[string]any{"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})
	tests := []struct {
		name   string
		stream bool
		second sim.Reply
	}{
		{name: "streaming client", stream: true, second: good.Reply()},
		{name: "non-streaming client", stream: false, second: completion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			guard := protocol.NewTwoStage(protocol.TwoStageConfig{}, panicTracer{on: metrics.TraceToolCall})
			up, gw := tsGateway(t, proxytest.Script(call.Reply(), tt.second), guard, false)
			body := tsBody(tt.stream, "")
			resp, got := tsPost(t, gw, "/v1/chat/completions", body, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, want 200: %s", resp.StatusCode, got)
			}
			for k, want := range map[string]string{"X-Phasegate-Fallback": proxy.ProtocolTwoStage, "X-Phasegate-Protocol": proxy.ProtocolStandard} {
				if v := resp.Header.Get(k); v != want {
					t.Errorf("%s = %q, want %q", k, v, want)
				}
			}
			if tt.stream {
				events := tsData(t, got)
				if len(events) == 0 || !strings.Contains(events[0], `"role":"assistant"`) {
					t.Fatalf("events %q, want the opening chunk first", events)
				}
				var want []string
				for _, ev := range tt.second.Events {
					want = append(want, asFirst(t, ev.Data, events[0]))
				}
				if diff := cmp.Diff(want[1:], events[1:]); diff != "" {
					t.Errorf("events the client got after the opening (-upstream, the first id and created time +client):\n%s", diff)
				}
			} else if string(got) != string(tt.second.Body) {
				t.Errorf("body = %s, want the upstream's completion byte for byte: %s", got, tt.second.Body)
			}
			received := up.Received()
			if len(received) != 2 {
				t.Fatalf("upstream calls = %d, want 2 (the guard's, then the standard's)", len(received))
			}
			if !bytes.Contains(received[0].Body, []byte(`"include_usage":true`)) {
				t.Errorf("first upstream request is not the guard's: %s", received[0].Body)
			}
			if string(received[1].Body) != body {
				t.Errorf("second upstream request = %s, want the client's body byte for byte", received[1].Body)
			}
		})
	}
}

// TestTwoStageE2EFallbackAfterFlushedOpening: when the guard fails after
// its opening chunk was flushed to the client (the upstream's next bytes
// were waited for), the headers went out with it: the standard protocol
// still serves the request, after that opening and with its id, and the
// fallback is counted, but the headers say the guard served it, as the
// client got them. The upstream sends the call only once the client has
// read the opening, so the order is the test's, not the scheduler's.
func TestTwoStageE2EFallbackAfterFlushedOpening(t *testing.T) {
	t.Parallel()
	opening := sim.NewStream(tsModel).Role()
	call := sim.NewStream(tsModel).ToolCall(0, "call_1", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Done()
	good := sim.NewStream(tsModel).Role().Content("fallback ", "answer").Finish("stop").Done()
	read := make(chan struct{}) // closed when the client has read the opening
	var mu sync.Mutex
	calls := 0
	usrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n > 1 {
			good.Reply().Serve(r.Context(), w)
			return
		}
		rc := http.NewResponseController(w)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: "+opening.Events()[0].Data+"\n\n")
		_ = rc.Flush()
		select {
		case <-read:
		case <-r.Context().Done():
			return
		}
		for _, ev := range call.Events() {
			_, _ = io.WriteString(w, "data: "+ev.Data+"\n\n")
		}
		_ = rc.Flush()
	}))
	t.Cleanup(usrv.Close)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, []string{"deepseek"})
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}}
	gw := serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, Metrics: m, Gatherer: reg,
		TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{Metrics: m}, panicTracer{on: metrics.TraceToolCall})})
	resp := proxytest.Do(t, tsContext(t), gw.Client(), http.MethodPost, gw.URL+"/v1/chat/completions", tsBody(true, ""))
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil || !strings.Contains(first, `"role":"assistant"`) {
		t.Fatalf("first line %q (%v), want the opening chunk", first, err)
	}
	close(read)
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Phasegate-Protocol") != proxy.ProtocolTwoStage || resp.Header.Get("X-Phasegate-Fallback") != "" {
		t.Errorf("status %d, protocol %q, fallback %q: want 200 and the headers that went out with the opening",
			resp.StatusCode, resp.Header.Get("X-Phasegate-Protocol"), resp.Header.Get("X-Phasegate-Fallback"))
	}
	events := tsData(t, append([]byte(first), rest...))
	var want []string
	for _, ev := range good.Events()[1:] {
		want = append(want, asFirst(t, ev.Data, events[0]))
	}
	if diff := cmp.Diff(want, events[1:]); diff != "" {
		t.Errorf("events after the opening (-the fallback's answer with the first id and created time +client):\n%s", diff)
	}
	mu.Lock()
	n := calls
	mu.Unlock()
	if n != 2 {
		t.Errorf("upstream calls = %d, want 2 (the guard's, then the standard's)", n)
	}
	if v := gathered(t, reg, "phasegate_fallbacks_total", "", ""); v != 1 {
		t.Errorf("fallbacks = %v, want 1", v)
	}
}

// TestE2EInvalidUpstreamAnswer: an upstream that answers 200 with
// something that is not a chat completion is the upstream's fault on
// every route: a 502 upstream_invalid_response before the first byte, an
// in-band error after it, one upstream call (no fallback sends the request
// again, and nothing is billed twice), counted as an upstream error.
func TestE2EInvalidUpstreamAnswer(t *testing.T) {
	t.Parallel()
	garbage := sim.Reply{Events: []sim.Event{{Data: "this is not json"}, {Data: "[DONE]"}}}
	errEvent := sim.Reply{Events: []sim.Event{{Data: `{"error":{"message":"model overloaded","type":"server_error"}}`}}}
	late := sim.Reply{Events: append(sim.NewStream(tsModel).Role().Content("partial").Reply().Events, sim.Event{Data: "{oops"})}
	notCompletion := sim.Reply{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"object":"list","data":[]}`)}
	notJSON := sim.Reply{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`<html>bad gateway</html>`)}
	tests := []struct {
		name    string
		path    string
		stream  bool
		reply   sim.Reply
		inBand  bool // the error comes after the first byte
		message string
	}{
		{name: "guard, data line not JSON", path: "/v1/chat/completions", stream: true, reply: garbage},
		{name: "guard, non-streaming client, data line not JSON", path: "/v1/chat/completions", reply: garbage},
		{name: "guard, error object in the stream", path: "/v1/chat/completions", stream: true, reply: errEvent, message: "model overloaded"},
		{name: "guard, garbage after text", path: "/v1/chat/completions", stream: true, reply: late, inBand: true},
		{name: "standard, data line not JSON", path: "/standard/v1/chat/completions", stream: true, reply: garbage},
		{name: "standard, error object in the stream", path: "/standard/v1/chat/completions", stream: true, reply: errEvent, message: "model overloaded"},
		{name: "standard, garbage after text", path: "/standard/v1/chat/completions", stream: true, reply: late, inBand: true},
		{name: "standard, body without choices", path: "/standard/v1/chat/completions", reply: notCompletion},
		{name: "standard, body not JSON", path: "/standard/v1/chat/completions", reply: notJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			m := metrics.New(reg, []string{"deepseek"})
			up, usrv := proxytest.NewServer(t, proxytest.Script(tt.reply, tt.reply))
			cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}}
			gw := serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, Metrics: m, Gatherer: reg,
				TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{Metrics: m}, nil)})
			resp, got := tsPost(t, gw, tt.path, tsBody(tt.stream, ""), nil)
			var e struct {
				Error struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if tt.inBand {
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status = %d, want 200 (bytes were sent)", resp.StatusCode)
				}
				data := tsData(t, got)
				if len(data) < 2 || data[len(data)-1] != "[DONE]" || json.Unmarshal([]byte(data[len(data)-2]), &e) != nil {
					t.Fatalf("the stream does not end with an error, then [DONE]: %q", data)
				}
			} else {
				if resp.StatusCode != http.StatusBadGateway {
					t.Fatalf("status = %d, want 502: %s", resp.StatusCode, got)
				}
				if err := json.Unmarshal(got, &e); err != nil {
					t.Fatalf("body is not an OpenAI-style error: %s", got)
				}
			}
			if e.Error.Code != "upstream_invalid_response" || !strings.Contains(e.Error.Message, tt.message) {
				t.Errorf("error = %+v, want code upstream_invalid_response with %q in its message", e.Error, tt.message)
			}
			if n := len(up.Received()); n != 1 {
				t.Errorf("upstream calls = %d, want 1", n)
			}
			if v := gathered(t, reg, "phasegate_upstream_errors_total", "kind", "invalid_response"); v != 1 {
				t.Errorf("upstream errors of kind invalid_response = %v, want 1", v)
			}
			if v := gathered(t, reg, "phasegate_fallbacks_total", "", ""); v != 0 {
				t.Errorf("fallbacks = %v, want 0", v)
			}
		})
	}
}

// TestTwoStageE2EBadLimitHeaders: budget headers that are not whole numbers
// of 1 or more, and an unknown mode, are the client's error, whose param
// names the header at fault.
func TestTwoStageE2EBadLimitHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header http.Header
	}{
		{name: "zero cycles", header: http.Header{"X-Phasegate-Max-Phase-Cycles": {"0"}}},
		{name: "not a number", header: http.Header{"X-Phasegate-Max-Duplicate-Attempts": {"many"}}},
		{name: "plan mode not configured", header: http.Header{"X-Phasegate-Mode": {"plan"}}},
		{name: "unknown mode", header: http.Header{"X-Phasegate-Mode": {"yolo"}}},
		{name: "loosening profile", header: http.Header{"X-Phasegate-Guard-Profile": {"agent"}}},
		{name: "rules notice not a boolean", header: http.Header{"X-Phasegate-Rules-Notice": {"maybe"}}},
	}
	// Wherever the guard would or would not judge the request: a header
	// that is wrong is wrong on every route, so a client learns it at its
	// first request, not at the first one that declares a tool.
	routes := []struct{ name, path, body string }{
		{"judged", "/v1/chat/completions", tsBody(true, "")},
		{"nothing to judge", "/v1/chat/completions", `{"model":"` + tsModel + `","messages":[{"role":"user","content":"hi"}],"stream":true}`},
		{"standard", "/standard/v1/chat/completions", tsBody(false, "")},
	}
	for _, tt := range tests {
		for _, rt := range routes {
			t.Run(tt.name+"/"+rt.name, func(t *testing.T) {
				t.Parallel()
				up, gw := tsGateway(t, proxytest.Script(), protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), false)
				resp, got := tsPost(t, gw, rt.path, rt.body, tt.header)
				if resp.StatusCode != http.StatusBadRequest {
					t.Errorf("status = %d, want 400: %s", resp.StatusCode, got)
				}
				var e struct{ Error struct{ Param string } }
				for name := range tt.header {
					if err := json.Unmarshal([]byte(got), &e); err != nil || e.Error.Param != name {
						t.Errorf("param of %s, want %s", got, name)
					}
				}
				if n := len(up.Received()); n != 0 {
					t.Errorf("upstream calls = %d, want none", n)
				}
			})
		}
	}
}

// TestGuardHeadersOnUnjudgedRequests: the guard's headers, well formed,
// on a request the guard does not judge (no tool declared, or the
// pass-through route) change nothing: it is served as it would be
// without them.
func TestGuardHeadersOnUnjudgedRequests(t *testing.T) {
	t.Parallel()
	header := http.Header{"X-Phasegate-Max-Phase-Cycles": {"3"}, "X-Phasegate-Max-Duplicate-Attempts": {"2"},
		"X-Phasegate-Guard-Profile": {"strict"}, "X-Phasegate-Rules-Notice": {"true"}, "X-Phasegate-Mode": {"act"}}
	for _, rt := range []struct{ name, path, body string }{
		{"nothing to judge", "/v1/chat/completions", `{"model":"` + tsModel + `","messages":[{"role":"user","content":"hi"}]}`},
		{"standard", "/standard/v1/chat/completions", tsBody(false, "")},
	} {
		t.Run(rt.name, func(t *testing.T) {
			t.Parallel()
			answer := sim.Completion(tsModel, map[string]any{"content": "hello"}, "stop", map[string]any{"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4})
			up, gw := tsGateway(t, proxytest.Script(answer), protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), false)
			resp, got := tsPost(t, gw, rt.path, rt.body, header)
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(got), `"hello"`) {
				t.Fatalf("status = %d, want 200 with the answer: %s", resp.StatusCode, got)
			}
			if p := resp.Header.Get("X-Phasegate-Protocol"); p != proxy.ProtocolStandard {
				t.Errorf("X-Phasegate-Protocol = %q, want %q", p, proxy.ProtocolStandard)
			}
			if n := len(up.Received()); n != 1 {
				t.Errorf("upstream calls = %d, want 1", n)
			}
		})
	}
}

// TestTwoStageE2EPlanMode: with X-Phasegate-Mode: plan the model only sees
// the allowlist, and a call off it is refused, never forwarded.
func TestTwoStageE2EPlanMode(t *testing.T) {
	t.Parallel()
	offList := sim.NewStream(tsModel).Role().Reasoning("Write it.").ToolCall(0, "call_w", "write_file", `{"path":"x","text":"y"}`).Finish("tool_calls").Done()
	onList := sim.NewStream(tsModel).Role().Reasoning("Read it.").ToolCall(0, "call_r", "read_file", `{"path":"x"}`).Finish("tool_calls").Done()
	up, gw := tsGateway(t, proxytest.Script(offList.Reply(), onList.Reply()),
		protocol.NewTwoStage(protocol.TwoStageConfig{PlanTools: []string{"read_file", "list_dir"}}, nil), true)
	client, tap := tsClient(gw, "/v1", http.Header{"X-Project-Id": {tsProject}, "X-Phasegate-Mode": {"plan"}})
	agent := &tsAgent{client: client, tap: tap, stream: true, ran: map[tools.Signature]int{}}
	turn := agent.send(t, tsContext(t), []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "Plan it."}})
	if len(turn.calls) != 1 || turn.calls[0].Function.Name != "read_file" {
		t.Fatalf("tool calls = %+v, want only the allowed read_file", turn.calls)
	}
	if !strings.Contains(turn.content, `refused "write_file": plan mode does not allow it`) {
		t.Errorf("content = %q, want the not-allowed notice", turn.content)
	}
	for i, r := range up.Received() {
		var body struct {
			Tools []openai.Tool `json:"tools"`
		}
		if err := r.Decode(&body); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range body.Tools {
			names = append(names, tool.Function.Name)
		}
		if diff := cmp.Diff([]string{"read_file", "list_dir"}, names); diff != "" {
			t.Errorf("upstream request %d: tools (-want +got):\n%s", i+1, diff)
		}
	}
}

// tsWaitCancelled waits, bounded, until the upstream saw a reply abandoned.
func tsWaitCancelled(t *testing.T, up *proxytest.Upstream) {
	t.Helper()
	timer := time.NewTimer(tsWait)
	defer timer.Stop()
	select {
	case <-up.Cancelled():
	case <-timer.C:
		t.Fatal("the upstream never saw its reply abandoned")
	}
}

// TestTwoStageE2EStopsReadingAfterTheCall: once the first call is
// forwarded, the client's response ends at once and the upstream, still
// generating (here: holding the stream open), is abandoned.
func TestTwoStageE2EStopsReadingAfterTheCall(t *testing.T) {
	t.Parallel()
	events := sim.NewStream(tsModel).Role().Content("Reading.").
		ToolCall(0, "call_a", "read_file", `{"path":"a.go"}`).ToolCall(1, "call_b", "read_file", `{"path":"b.go"}`).Events()
	up, gw := tsGateway(t, proxytest.Script(sim.Reply{Events: events, Hang: true}), protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), false)
	resp, body := tsPost(t, gw, "/v1/chat/completions", tsBody(true, ""), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d: %s", resp.StatusCode, body)
	}
	data := tsData(t, body)
	if len(data) < 2 || data[len(data)-1] != "[DONE]" || !strings.Contains(data[len(data)-2], `"finish_reason":"tool_calls"`) {
		t.Errorf("response does not end with the tool_calls finish and [DONE]: %q", data)
	}
	if bytes.Contains(body, []byte("call_b")) {
		t.Errorf("the second call reached the client")
	}
	tsWaitCancelled(t, up)
}

// TestTwoStageE2EClientLeaves: a client that hangs up mid-answer cancels
// the upstream call.
func TestTwoStageE2EClientLeaves(t *testing.T) {
	t.Parallel()
	events := sim.NewStream(tsModel).Role().Content("first ").Events()
	up, gw := tsGateway(t, proxytest.Script(sim.Reply{Events: events, Hang: true}), protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), false)
	req, err := http.NewRequestWithContext(tsContext(t), http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(tsBody(true, "")))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := gw.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	got := false
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"first "`) {
			got = true
			break
		}
	}
	resp.Body.Close()
	if !got {
		t.Fatalf("the first content never arrived: %v", sc.Err())
	}
	tsWaitCancelled(t, up)
}

// gathered returns the sum of the series of the metric name whose label
// (when not "") has value.
func gathered(tb testing.TB, g prometheus.Gatherer, name, label, value string) float64 {
	tb.Helper()
	mfs, err := g.Gather()
	if err != nil {
		tb.Fatalf("gather: %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				match = match || lp.GetName() == label && lp.GetValue() == value
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestTwoStageE2EFallbackClosesUpstream: a guard that fails before it
// decided the answer it is reading closes that answer (the model stops
// generating) before the standard protocol asks again, and the fallback is
// counted.
func TestTwoStageE2EFallbackClosesUpstream(t *testing.T) {
	t.Parallel()
	// The answer ends transiently, then holds its connection open: only
	// the gateway closing it ends it. The opening and the end come in one
	// write, so the guard fails before it waits again and flushes the
	// opening: the headers can still tell of the fallback (see
	// TestTwoStageE2EFallbackAfterFlushedOpening for the other order).
	held := sim.NewStream(tsModel).Role().Burst().Finish("insufficient_system_resource").Delay(wait).Done().Reply()
	good := sim.NewStream(tsModel).Role().Content("fallback answer").Finish("stop").Done().Reply()
	// The standard protocol's call is answered only once the guard's was
	// closed: left open, it would go on generating beside it.
	var up *proxytest.Upstream
	calls := 0
	var mu sync.Mutex
	up, usrv := proxytest.NewServer(t, func(proxytest.Received) sim.Reply {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 1 {
			return held
		}
		select {
		case <-up.Cancelled():
			return good
		case <-time.After(wait / 2):
			return sim.Error(http.StatusConflict, "the guard's answer is still open", "test", "still_open")
		}
	})
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, []string{"deepseek"})
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}}
	gw := serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, Metrics: m, Gatherer: reg,
		TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{Metrics: m}, panicTracer{on: metrics.TraceTransientFinish})})
	resp, got := tsPost(t, gw, "/v1/chat/completions", tsBody(true, ""), nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Phasegate-Fallback") != proxy.ProtocolTwoStage {
		t.Fatalf("status %d, fallback %q: %s", resp.StatusCode, resp.Header.Get("X-Phasegate-Fallback"), got)
	}
	if n := len(up.Received()); n != 2 {
		t.Errorf("upstream calls = %d, want 2", n)
	}
	if v := gathered(t, reg, "phasegate_fallbacks_total", "", ""); v != 1 {
		t.Errorf("fallbacks = %v, want 1", v)
	}
}

// TestTwoStageE2EHeldTextTransient: an answer whose only text is what the
// leak scan held back (a '<' that might begin a leaked call) and that
// finishes insufficient_system_resource is asked again unseen: the client
// gets the second answer alone.
func TestTwoStageE2EHeldTextTransient(t *testing.T) {
	t.Parallel()
	held := sim.NewStream(tsModel).Role().Content("<").Finish("insufficient_system_resource").Done().Reply()
	good := sim.NewStream(tsModel).Role().Content("answer").Finish("stop").Done().Reply()
	up, gw := tsGateway(t, proxytest.Script(held, good), protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), false)
	resp, body := tsPost(t, gw, "/v1/chat/completions", tsBody(true, ""), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d: %s", resp.StatusCode, body)
	}
	var content strings.Builder
	var finishes []string
	for _, d := range tsData(t, body) {
		if d == "[DONE]" {
			continue
		}
		var c chat.Chunk
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("chunk %s: %v", d, err)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				content.WriteString(*ch.Delta.Content)
			}
			if ch.FinishReason != nil {
				finishes = append(finishes, *ch.FinishReason)
			}
		}
	}
	if content.String() != "answer" || len(finishes) != 1 || finishes[0] != "stop" {
		t.Errorf("client got content %q, finishes %q; want the second answer alone", content.String(), finishes)
	}
	if n := len(up.Received()); n != 2 {
		t.Errorf("upstream calls = %d, want 2", n)
	}
}
