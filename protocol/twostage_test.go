package protocol_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/sim"
	"github.com/phasegate/phasegate/tools"
)

// ---------------------------------------------------------------------------
// The scripted upstream.

// reply is one scripted upstream answer: a stream of SSE data, or an error
// from Send, or a non-streaming body.
type reply struct {
	data []string
	// readErr ends the stream after data with a read error.
	readErr error
	sendErr error
	// body, with data nil, makes a non-streaming answer.
	body []byte
}

// streamReply turns a proxytest stream into a reply: the data of its
// events, comments and delays left out.
func streamReply(s *sim.Stream) reply {
	var r reply
	for _, ev := range s.Events() {
		if ev.Data != "" {
			r.data = append(r.data, ev.Data)
		}
	}
	return r
}

// fakeResponse records what the guard did with one streamed answer.
type fakeResponse struct {
	total          int // data events scripted
	read           int // data events handed to the guard
	closed         int // Close calls
	readAfterClose bool
}

// fakeUpstream is a scripted protocol.Upstream, no HTTP. It answers Send
// with its replies in order and records every request (re-parsed from its
// encoding, so the wire form is what is checked) and every response. A call
// beyond the script fails the test.
type fakeUpstream struct {
	t       testing.TB
	replies []reply
	header  http.Header

	mu        sync.Mutex
	requests  []*chat.Request
	responses []*fakeResponse
}

var errScriptExhausted = errors.New("fake upstream: script exhausted")

func newUpstream(t testing.TB, replies ...reply) *fakeUpstream {
	return &fakeUpstream{t: t, replies: replies, header: http.Header{"X-Upstream": {"fake"}, "Content-Type": {"text/event-stream"}}}
}

func (u *fakeUpstream) Send(ctx context.Context, req *chat.Request) (*protocol.Response, error) {
	got, err := chat.ParseRequest(req.Encode())
	if err != nil {
		u.t.Errorf("the guard sent a request that does not parse: %v\n%s", err, req.Encode())
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.requests = append(u.requests, got)
	n := len(u.requests)
	if n > len(u.replies) {
		u.t.Errorf("upstream call %d, but the script holds %d replies", n, len(u.replies))
		return nil, errScriptExhausted
	}
	rp := u.replies[n-1]
	if rp.sendErr != nil {
		return nil, rp.sendErr
	}
	if rp.data == nil {
		return &protocol.Response{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: rp.body}, nil
	}
	fr := &fakeResponse{total: len(rp.data)}
	u.responses = append(u.responses, fr)
	return &protocol.Response{
		Status: http.StatusOK,
		Header: u.header.Clone(),
		Events: func(yield func([]byte, error) bool) {
			for _, d := range rp.data {
				u.mu.Lock()
				closed := fr.closed > 0
				if closed {
					fr.readAfterClose = true
				} else {
					fr.read++
				}
				u.mu.Unlock()
				if closed || !yield([]byte(d), nil) {
					return
				}
			}
			if rp.readErr != nil {
				yield(nil, rp.readErr)
			}
		},
		Close: func() {
			u.mu.Lock()
			fr.closed++
			u.mu.Unlock()
		},
	}, nil
}

func (u *fakeUpstream) sent() []*chat.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.requests)
}

// checkClosed checks that every streamed answer was closed exactly once and
// never read after.
func (u *fakeUpstream) checkClosed(t *testing.T) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, fr := range u.responses {
		if fr.closed != 1 {
			t.Errorf("upstream response %d closed %d times, want 1", i+1, fr.closed)
		}
		if fr.readAfterClose {
			t.Errorf("upstream response %d was read after Close", i+1)
		}
	}
}

// response returns what happened to the i-th streamed answer (0-based).
func (u *fakeUpstream) response(t *testing.T, i int) fakeResponse {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if i >= len(u.responses) {
		t.Fatalf("upstream response %d does not exist (%d made)", i+1, len(u.responses))
	}
	return *u.responses[i]
}

// recorder is a protocol.Tracer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []metrics.Trace
}

func (r *recorder) Trace(_ context.Context, ev metrics.Trace) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

func (r *recorder) kinds(kind metrics.TraceKind) []metrics.Trace {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []metrics.Trace
	for _, ev := range r.events {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Requests and histories.

const model = "deepseek-v4-flash"

// declaredTools are the tools every test request declares.
const declaredTools = `[
	{"type":"function","function":{"name":"read_file","description":"Read a file.","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}}},
	{"type":"function","function":{"name":"write_file","parameters":{"type":"object","properties":{"path":{"type":"string"},"text":{"type":"string"}},"required":["path","text"]}}},
	{"type":"function","function":{"name":"list_dir","parameters":{"type":"object","properties":{}}}}
]`

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func msg(role, content string) string {
	return jsonText(map[string]any{"role": role, "content": content})
}

// ran returns an executed tool call: the assistant message that made it,
// with the reasoning DeepSeek wants back, and the tool message answering it.
func ran(id, name, args string) []string {
	return []string{
		jsonText(map[string]any{"role": "assistant", "content": "", "reasoning_content": "I need " + name + ".",
			"tool_calls": []any{map[string]any{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args}}}}),
		jsonText(map[string]any{"role": "tool", "tool_call_id": id, "content": "result of " + id}),
	}
}

// history returns a system prompt and a user message followed by the given
// messages (strings or []string).
func history(items ...any) []string {
	out := []string{msg("system", "You are a coding agent."), msg("user", "Summarise a.go.")}
	for _, it := range items {
		switch v := it.(type) {
		case string:
			out = append(out, v)
		case []string:
			out = append(out, v...)
		default:
			panic(fmt.Sprintf("history item %T", it))
		}
	}
	return out
}

// newRequest builds a client request with the declared tools; extra holds
// more top-level fields (`"k":v,...`), which replace earlier ones.
func newRequest(t testing.TB, stream bool, msgs []string, extra string) *chat.Request {
	t.Helper()
	body := `{"model":"` + model + `","messages":[` + strings.Join(msgs, ",") + `],"stream":` + strconv.FormatBool(stream) +
		`,"tools":` + declaredTools
	if extra != "" {
		body += "," + extra
	}
	body += "}"
	req, err := chat.ParseRequest([]byte(body))
	if err != nil {
		t.Fatalf("ParseRequest: %v\n%s", err, body)
	}
	return req
}

func exchange(req *chat.Request, up protocol.Upstream, limits protocol.Limits) *protocol.Exchange {
	return &protocol.Exchange{Request: req, RequestID: "req-1", ProjectID: "proj-1", Upstream: up, Limits: limits}
}

func stream() *sim.Stream { return sim.NewStream(model) }

// rawChunk is a chunk with one choice, written by hand for shapes the
// proxytest builder does not make.
func rawChunk(delta, finish, extra string) string {
	if finish == "" {
		finish = "null"
	} else {
		finish = strconv.Quote(finish)
	}
	s := `{"id":"chatcmpl-proxytest","object":"chat.completion.chunk","created":1767225600,"model":"` + model +
		`","choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + finish + `}]`
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

// ---------------------------------------------------------------------------
// Running the guard and reading what it yields.

type result struct {
	events []protocol.Event
	err    error
}

// run ranges over the strategy's events until it ends; an error ends the
// sequence, and a strategy that kept yielding after it would make the range
// panic.
func run(t testing.TB, s protocol.Strategy, x *protocol.Exchange) result {
	t.Helper()
	var res result
	for ev, err := range s.Run(context.Background(), x) {
		if err != nil {
			res.err = err
			break
		}
		if ev.Kind == protocol.KindChunk && ev.Ext != nil {
			// As the proxy writes it: the metadata joins the chunk.
			ev.Data, ev.Ext = chat.WithExtension(ev.Data, protocol.ExtensionKey, ev.Ext), nil
		}
		res.events = append(res.events, ev)
		if len(res.events) > 100000 {
			t.Fatal("the strategy yields without end")
		}
	}
	return res
}

// ext is the phase metadata of a chunk.
type ext struct {
	Phase          string `json:"phase"`
	RequestID      string `json:"request_id"`
	ProjectID      string `json:"project_id"`
	PhaseIndex     int    `json:"phase_index"`
	CycleIndex     int    `json:"cycle_index"`
	UsageEstimated bool   `json:"usage_estimated"`
}

// wireChunk is a chunk the guard yielded, as a client decodes it.
type wireChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role             string               `json:"role"`
			Content          *string              `json:"content"`
			ReasoningContent *string              `json:"reasoning_content"`
			ToolCalls        []chat.ToolCallDelta `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
	Ext   *ext            `json:"phasegate"`

	raw []byte
}

// answer is what a client makes of a successful response.
type answer struct {
	header    http.Header
	chunks    []wireChunk
	content   string
	reasoning string
	calls     []chat.ToolCallDelta
	finishes  []string
	usage     []json.RawMessage
}

// read decodes the events of a response that ended without error and
// checks what every such response must hold: one start first, one [DONE]
// last, exactly one finish, every chunk a chat.completion.chunk carrying
// the phase metadata, at most one tool call, at most one usage chunk.
func read(t *testing.T, res result) answer {
	t.Helper()
	if res.err != nil {
		t.Fatalf("run error = %v, want none", res.err)
	}
	var a answer
	evs := res.events
	if len(evs) == 0 || evs[0].Kind != protocol.KindStart {
		t.Fatalf("first event is not %q: %v", protocol.KindStart, kinds(evs))
	}
	if evs[len(evs)-1].Kind != protocol.KindDone {
		t.Fatalf("last event is not %q: %v", protocol.KindDone, kinds(evs))
	}
	a.header = evs[0].Header
	for i, ev := range evs[1 : len(evs)-1] {
		if ev.Kind != protocol.KindChunk {
			t.Fatalf("event %d is %q, want only chunks between start and done: %v", i+1, ev.Kind, kinds(evs))
		}
		var c wireChunk
		if err := json.Unmarshal(ev.Data, &c); err != nil {
			t.Fatalf("chunk %d does not decode: %v\n%s", i, err, ev.Data)
		}
		c.raw = ev.Data
		if c.Object != "chat.completion.chunk" {
			t.Errorf("chunk %d object = %q, want chat.completion.chunk", i, c.Object)
		}
		if c.ID == "" || c.Model == "" {
			t.Errorf("chunk %d lacks an id or a model: %s", i, ev.Data)
		}
		if c.Ext == nil {
			t.Errorf("chunk %d carries no %q object: %s", i, protocol.ExtensionKey, ev.Data)
		} else if c.Ext.RequestID != "req-1" || c.Ext.ProjectID != "proj-1" {
			t.Errorf("chunk %d metadata = %+v, want request_id req-1 and project_id proj-1", i, *c.Ext)
		}
		if len(a.finishes) > 0 && len(c.Choices) > 0 {
			t.Errorf("chunk %d has choices after the finish: %s", i, ev.Data)
		}
		for _, ch := range c.Choices {
			if ch.Index != 0 {
				t.Errorf("chunk %d has choice index %d", i, ch.Index)
			}
			if ch.Delta.Content != nil {
				a.content += *ch.Delta.Content
			}
			if ch.Delta.ReasoningContent != nil {
				a.reasoning += *ch.Delta.ReasoningContent
			}
			a.calls = append(a.calls, ch.Delta.ToolCalls...)
			if ch.FinishReason != nil {
				a.finishes = append(a.finishes, *ch.FinishReason)
			}
		}
		if len(c.Usage) > 0 && string(c.Usage) != "null" {
			if len(c.Choices) != 0 {
				t.Errorf("usage chunk %d has choices: %s", i, ev.Data)
			}
			a.usage = append(a.usage, c.Usage)
		}
		a.chunks = append(a.chunks, c)
	}
	if len(a.finishes) != 1 {
		t.Errorf("finish reasons = %q, want exactly one", a.finishes)
	}
	if len(a.calls) > 1 {
		t.Errorf("the client got %d tool-call deltas, want at most one: %+v", len(a.calls), a.calls)
	}
	if len(a.usage) > 1 {
		t.Errorf("the client got %d usage chunks, want at most one", len(a.usage))
	}
	return a
}

func kinds(evs []protocol.Event) []protocol.Kind {
	out := make([]protocol.Kind, len(evs))
	for i, ev := range evs {
		out[i] = ev.Kind
	}
	return out
}

func (a answer) finish() string {
	if len(a.finishes) == 0 {
		return ""
	}
	return a.finishes[0]
}

// shown is the content chunk a notice shows the client.
func shown(notice string) string { return "\n\n**System Notice**: " + notice + "\n\n" }

// The notice texts the guard shows the model, kept verbatim (tools/notice.go),
// with the budget suffix.
func duplicateNotice(used, maxUsed, left, maxRefused int) string {
	return "Duplicate tool call detected (already executed in this turn). Do NOT call this tool again. Use previous results." +
		fmt.Sprintf(" (rule: duplicate; tool executions used: %d of %d; refused attempts left: %d of %d)", used, maxUsed, left, maxRefused)
}

func cycleNotice(used, maxUsed, left, maxRefused int) string {
	return fmt.Sprintf("Maximum tool execution cycles (%d) reached. Provide final answer without further tool calls.", maxUsed) +
		fmt.Sprintf(" (rule: MAX_PHASE_CYCLES; tool executions used: %d of %d; refused attempts left: %d of %d)", used, maxUsed, left, maxRefused)
}

func duplicateExceededNotice(used, maxUsed, maxRefused int) string {
	return "Maximum duplicate tool call attempts exceeded. Provide a final answer now using existing results ONLY. Do NOT call tools." +
		fmt.Sprintf(" (rule: MAX_DUPLICATE_ATTEMPTS; tool executions used: %d of %d; refused attempts left: 0 of %d)", used, maxUsed, maxRefused)
}

// raws returns the raw form of messages, for comparing what was sent.
func raws(msgs []chat.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Raw)
	}
	return out
}

// sentMessage is a message the guard appended to a request, decoded to
// role, content, reasoning and tool-call count.
type sentMessage struct {
	Role      string
	Content   string
	Reasoning *string
	ToolCalls int
}

// messagesAfter returns the messages of req beyond the first n.
func messagesAfter(req *chat.Request, n int) []sentMessage {
	var out []sentMessage
	for _, m := range req.Messages[n:] {
		out = append(out, sentMessage{Role: m.Role, Content: m.Text(), Reasoning: m.ReasoningContent, ToolCalls: len(m.ToolCalls)})
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func usageMap(t testing.TB, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("usage %s: %v", raw, err)
	}
	return m
}

// ---------------------------------------------------------------------------
// Tests.

func TestTwoStageName(t *testing.T) {
	if got := protocol.NewTwoStage(protocol.TwoStageConfig{}, nil).Name(); got != "two-stage" {
		t.Errorf("Name() = %q, want two-stage", got)
	}
}

// vendorChunk has fields no OpenAI type declares, odd spacing inside values
// and characters encoding/json would escape: it must reach the client byte
// for byte, with only the phase metadata added.
const vendorChunk = `{"id":"chatcmpl-proxytest","object":"chat.completion.chunk","created":1767225600,"model":"` + model + `",` +
	`"choices":[{"index":0,"delta":{"content":" <b>&amp;</b> \u00e9","x_delta":[1, 2.50, null]},"logprobs":{"content":[]},"finish_reason":null}],` +
	`"x_vendor":{"nested": {"deep":true}},"service_tier":"default"}`

// withoutExtension undoes the guard's splice of its metadata into an
// upstream chunk: data must be up with `,"phasegate":{…}` before its final
// brace.
func withoutExtension(t *testing.T, data []byte) []byte {
	t.Helper()
	i := bytes.LastIndex(data, []byte(`,"`+protocol.ExtensionKey+`":{`))
	if i < 0 || data[len(data)-1] != '}' {
		t.Fatalf("chunk carries no spliced metadata: %s", data)
	}
	var e ext
	if err := json.Unmarshal(data[i+len(protocol.ExtensionKey)+4:len(data)-1], &e); err != nil {
		t.Fatalf("spliced metadata does not decode: %v: %s", err, data)
	}
	return append(append([]byte(nil), data[:i]...), '}')
}

func TestTwoStageTextAnswer(t *testing.T) {
	up := stream().Role().Reasoning("Think. ").Content("Hel", "lo").Raw(vendorChunk).Finish("stop").
		Usage(10, 5, map[string]any{"prompt_cache_hit_tokens": 8, "prompt_cache_miss_tokens": 2}).Done()
	upData := streamReply(up).data
	tests := []struct {
		name      string
		stream    bool
		extra     string
		wantUsage bool
	}{
		{name: "streaming client", stream: true},
		{name: "streaming client asking for usage", stream: true, extra: `"stream_options":{"include_usage":true}`, wantUsage: true},
		{name: "non-streaming client", stream: false, wantUsage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, streamReply(up))
			res := run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), exchange(newRequest(t, tt.stream, history(), tt.extra), u, protocol.Limits{}))
			a := read(t, res)
			if got, want := a.content, "Hello <b>&amp;</b> é"; got != want {
				t.Errorf("content = %q, want %q", got, want)
			}
			if got, want := a.reasoning, "Think. "; got != want {
				t.Errorf("reasoning = %q, want %q", got, want)
			}
			if got := a.finish(); got != chat.FinishStop {
				t.Errorf("finish = %q, want stop", got)
			}
			if len(a.calls) != 0 {
				t.Errorf("tool calls = %+v, want none", a.calls)
			}
			// The role, reasoning, content and vendor chunks are the
			// upstream's own bytes; the finish and usage are the guard's.
			var forwarded []string
			for _, c := range a.chunks[:5] {
				forwarded = append(forwarded, string(withoutExtension(t, c.raw)))
			}
			if diff := cmp.Diff(upData[:5], forwarded); diff != "" {
				t.Errorf("text chunks are not forwarded byte for byte (-upstream +client):\n%s", diff)
			}
			if tt.wantUsage {
				if len(a.usage) != 1 {
					t.Fatalf("usage chunks = %d, want 1", len(a.usage))
				}
				want := map[string]any{"prompt_tokens": 10.0, "completion_tokens": 5.0, "total_tokens": 15.0, "prompt_cache_hit_tokens": 8.0, "prompt_cache_miss_tokens": 2.0}
				if diff := cmp.Diff(want, usageMap(t, a.usage[0])); diff != "" {
					t.Errorf("usage (-want +got):\n%s", diff)
				}
			} else if len(a.usage) != 0 {
				t.Errorf("usage chunks = %s, want none: the client did not ask", a.usage)
			}
			if n := len(u.sent()); n != 1 {
				t.Errorf("upstream calls = %d, want 1", n)
			}
			if got := u.response(t, 0); got.read != got.total {
				t.Errorf("upstream events read = %d of %d, want all", got.read, got.total)
			}
			u.checkClosed(t)
		})
	}
}

func TestTwoStageForwardsTheFirstCompleteCall(t *testing.T) {
	type call struct{ id, name, args string }
	tests := []struct {
		name string
		up   *sim.Stream
		// wantRead is the number of upstream events read: up to the one
		// that completes the first call, and not one more.
		wantRead int
		want     call
		// wantText is the text the client gets before the call.
		wantText, wantReasoning string
	}{
		{
			name: "its arguments close",
			up: stream().Role().Reasoning("Read a.go.").Content("Let me look.").
				ToolCall(0, "call_a", "read_file", `{"pa`, `th": "a.go"}`).
				ToolCall(1, "call_b", "read_file", `{"path":"b.go"}`).Finish("tool_calls").Usage(9, 9, nil).Done(),
			wantRead: 5, want: call{"call_a", "read_file", `{"path": "a.go"}`},
			wantText: "Let me look.", wantReasoning: "Read a.go.",
		},
		{
			name: "a later index starts",
			up: stream().Role().ToolCall(0, "call_a", "list_dir").
				ToolCall(1, "call_b", "read_file", `{"path":"b.go"}`).Finish("tool_calls").Done(),
			wantRead: 3, want: call{"call_a", "list_dir", ""},
		},
		{
			name:     "the upstream finishes",
			up:       stream().Role().ToolCall(0, "call_a", "list_dir").Finish("tool_calls").Usage(9, 9, nil).Done(),
			wantRead: 3, want: call{"call_a", "list_dir", ""},
		},
		{
			name: "the id is repeated on every delta",
			up: stream().Role().
				Raw(rawChunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read_file","arguments":""}}]}`, "", "")).
				Raw(rawChunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"arguments":"{\"path\":"}}]}`, "", "")).
				Raw(rawChunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"arguments":"\"a.go\"}"}}]}`, "", "")).
				ToolCall(1, "call_b", "list_dir").Finish("tool_calls").Done(),
			wantRead: 4, want: call{"call_a", "read_file", `{"path":"a.go"}`},
		},
		{
			name: "a parallel burst in one chunk",
			up: stream().Role().
				Raw(rawChunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.go\"}"}},`+
					`{"index":1,"id":"call_b","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"b.go\"}"}},`+
					`{"index":2,"id":"call_c","type":"function","function":{"name":"list_dir","arguments":"{}"}}]}`, "", "")).
				Finish("tool_calls").Done(),
			wantRead: 2, want: call{"call_a", "read_file", `{"path":"a.go"}`},
		},
		{
			name: "the role comes with the first fragment, OpenAI style",
			up: stream().
				Raw(rawChunk(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read_file","arguments":""}}]}`, "", "")).
				Raw(rawChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":\"a.go\"}"}}]}`, "", "")).
				Finish("tool_calls").Done(),
			wantRead: 2, want: call{"call_a", "read_file", `{"path":"a.go"}`},
		},
		{
			name: "an argument string holds braces and escaped quotes",
			up: stream().Role().ToolCall(0, "call_a", "write_file", `{"path":"x.go","text":"func f() {`, ` return \"}\" }"}`).
				ToolCall(1, "call_b", "list_dir").Finish("tool_calls").Done(),
			wantRead: 3, want: call{"call_a", "write_file", `{"path":"x.go","text":"func f() { return \"}\" }"}`},
		},
	}
	for _, tt := range tests {
		for _, streaming := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%v", tt.name, streaming), func(t *testing.T) {
				tr := &recorder{}
				u := newUpstream(t, streamReply(tt.up))
				res := run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, tr), exchange(newRequest(t, streaming, history(), ""), u, protocol.Limits{}))
				a := read(t, res)
				if len(a.calls) != 1 {
					t.Fatalf("tool-call deltas = %+v, want exactly one", a.calls)
				}
				got := a.calls[0]
				if got.Index != 0 || got.Type != "function" || got.ID != tt.want.id || got.Function.Name != tt.want.name || got.Function.Arguments != tt.want.args {
					t.Errorf("forwarded call = %+v, want index 0, type function, id %q, name %q, arguments %q", got, tt.want.id, tt.want.name, tt.want.args)
				}
				if got := a.finish(); got != chat.FinishToolCalls {
					t.Errorf("finish = %q, want tool_calls", got)
				}
				if a.content != tt.wantText || a.reasoning != tt.wantReasoning {
					t.Errorf("text = %q, reasoning = %q, want %q and %q", a.content, a.reasoning, tt.wantText, tt.wantReasoning)
				}
				for i, c := range a.chunks {
					if bytes.Contains(c.raw, []byte("call_b")) || bytes.Contains(c.raw, []byte("call_c")) {
						t.Errorf("chunk %d carries a later call of the response: %s", i, c.raw)
					}
				}
				// Text streams before the call: every content chunk comes
				// before the tool-call chunk.
				seenCall := false
				for _, c := range a.chunks {
					for _, ch := range c.Choices {
						if len(ch.Delta.ToolCalls) > 0 {
							seenCall = true
						}
						if seenCall && ch.Delta.Content != nil && *ch.Delta.Content != "" {
							t.Errorf("content %q after the tool call", *ch.Delta.Content)
						}
					}
				}
				if n := len(u.sent()); n != 1 {
					t.Errorf("upstream calls = %d, want 1", n)
				}
				if got := u.response(t, 0); got.read != tt.wantRead {
					t.Errorf("upstream events read = %d of %d, want %d: reading stops at the completing event", got.read, got.total, tt.wantRead)
				}
				u.checkClosed(t)
				if calls := tr.kinds(metrics.TraceToolCall); len(calls) != 1 || calls[0].Verdict != string(tools.VerdictForward) || calls[0].ToolCallID != tt.want.id {
					t.Errorf("tool_call traces = %+v, want one with verdict forward for %s", calls, tt.want.id)
				}
			})
		}
	}
}

// TestTwoStageRefusesAndReasks covers each kind of refusal: the call is not
// forwarded, the model gets a notice appended at the end of its next
// request, the client sees it (unless hidden), and the upstream is asked
// again within the same client response.
func TestTwoStageRefusesAndReasks(t *testing.T) {
	planTools := []string{"read_file", "list_dir"}
	tests := []struct {
		name    string
		history []string
		limits  protocol.Limits
		cfg     protocol.TwoStageConfig
		bad     *sim.Stream
		// call is the refused call, to compute the notice of verdicts
		// whose text comes from the policy.
		call       chat.ToolCall
		verdict    tools.Verdict
		wantNotice string // "" means tools.Notice of the policy's judgement
		// wantShown is the client's line; "" means tools.Shown of the
		// policy's judgement.
		wantShown     string
		wantTrace     metrics.TraceKind
		wantAssistant *sentMessage
	}{
		{
			name:       "duplicate with respaced arguments",
			history:    history(ran("call_1", "read_file", `{"path":"a.go"}`)),
			bad:        stream().Role().ToolCall(0, "call_2", "read_file", `{ "path" :`, ` "a.go" }`).Finish("tool_calls").Done(),
			verdict:    tools.VerdictDuplicate,
			wantNotice: duplicateNotice(1, 3, 2, 3),
			wantShown:  `refused "read_file": it already ran with the same arguments in this turn (2 of 3 refusals left).`,
			wantTrace:  metrics.TraceDuplicateToolCall,
		},
		{
			name:          "duplicate with keys reordered",
			history:       history(ran("call_1", "list_dir", `{}`), ran("call_2", "write_file", `{"path":"x","text":"t"}`)),
			bad:           stream().Role().Content("Writing again.").ToolCall(0, "call_3", "write_file", `{"text":"t","path":"x"}`).Finish("tool_calls").Done(),
			verdict:       tools.VerdictDuplicate,
			wantNotice:    duplicateNotice(2, 3, 2, 3),
			wantShown:     `refused "write_file": it already ran with the same arguments in this turn (2 of 3 refusals left).`,
			wantTrace:     metrics.TraceDuplicateToolCall,
			wantAssistant: &sentMessage{Role: "assistant", Content: "Writing again."},
		},
		{
			name:       "duplicate given as empty arguments",
			history:    history(ran("call_1", "list_dir", `{}`)),
			bad:        stream().Role().ToolCall(0, "call_2", "list_dir").Finish("tool_calls").Done(),
			verdict:    tools.VerdictDuplicate,
			wantNotice: duplicateNotice(1, 3, 2, 3),
			wantShown:  `refused "list_dir": it already ran with the same arguments in this turn (2 of 3 refusals left).`,
			wantTrace:  metrics.TraceDuplicateToolCall,
		},
		{
			name:      "malformed arguments cut by a later call",
			history:   history(),
			bad:       stream().Role().ToolCall(0, "call_1", "read_file", `{"path": "a.go"`).ToolCall(1, "call_2", "list_dir").Finish("tool_calls").Done(),
			call:      chat.ToolCall{ID: "call_1", Type: "function", Function: chat.FunctionCall{Name: "read_file", Arguments: `{"path": "a.go"`}},
			verdict:   tools.VerdictMalformed,
			wantShown: `refused "read_file": its arguments are not one complete JSON object (2 of 3 refusals left).`,
			wantTrace: metrics.TraceToolCallRefused,
		},
		{
			name:          "undeclared tool",
			history:       history(),
			bad:           stream().Role().Reasoning("Use the shell.").ToolCall(0, "call_1", "shell_exec", `{"cmd":"ls"}`).Finish("tool_calls").Done(),
			call:          chat.ToolCall{ID: "call_1", Type: "function", Function: chat.FunctionCall{Name: "shell_exec", Arguments: `{"cmd":"ls"}`}},
			verdict:       tools.VerdictUndeclared,
			wantTrace:     metrics.TraceToolCallRefused,
			wantAssistant: &sentMessage{Role: "assistant", Content: "", Reasoning: ptr("Use the shell.")},
		},
		{
			name:      "arguments off the schema",
			history:   history(),
			bad:       stream().Role().ToolCall(0, "call_1", "read_file", `{"file":"a.go"}`).Finish("tool_calls").Done(),
			call:      chat.ToolCall{ID: "call_1", Type: "function", Function: chat.FunctionCall{Name: "read_file", Arguments: `{"file":"a.go"}`}},
			verdict:   tools.VerdictSchemaInvalid,
			wantTrace: metrics.TraceToolCallRefused,
		},
		{
			name:      "not allowed in plan mode",
			history:   history(),
			limits:    protocol.Limits{Plan: true},
			cfg:       protocol.TwoStageConfig{PlanTools: planTools},
			bad:       stream().Role().ToolCall(0, "call_1", "write_file", `{"path":"x","text":"t"}`).Finish("tool_calls").Done(),
			call:      chat.ToolCall{ID: "call_1", Type: "function", Function: chat.FunctionCall{Name: "write_file", Arguments: `{"path":"x","text":"t"}`}},
			verdict:   tools.VerdictNotAllowed,
			wantTrace: metrics.TraceToolCallRefused,
		},
		{
			name:       "duplicate with notices hidden from the client",
			history:    history(ran("call_1", "read_file", `{"path":"a.go"}`)),
			cfg:        protocol.TwoStageConfig{HideNotices: true},
			bad:        stream().Role().ToolCall(0, "call_2", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Done(),
			verdict:    tools.VerdictDuplicate,
			wantNotice: duplicateNotice(1, 3, 2, 3),
			wantTrace:  metrics.TraceDuplicateToolCall,
		},
	}
	good := stream().Role().Content("Done.").Finish("stop").Done()
	for _, tt := range tests {
		for _, streaming := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%v", tt.name, streaming), func(t *testing.T) {
				tr := &recorder{}
				u := newUpstream(t, streamReply(tt.bad), streamReply(good))
				req := newRequest(t, streaming, tt.history, `"tool_choice":"auto"`)
				res := run(t, protocol.NewTwoStage(tt.cfg, tr), exchange(req, u, tt.limits))
				a := read(t, res)

				notice := tt.wantNotice
				line := tt.wantShown
				if notice == "" {
					var allow []string
					if tt.limits.Plan {
						allow = tt.cfg.PlanTools
					}
					j := tools.NewPolicy(req.Tools, allow, tools.NewLedger("proj-1", req.Messages)).Judge(tt.call)
					if j.Verdict != tt.verdict {
						t.Fatalf("test setup: the policy judges %+v as %q, want %q", tt.call, j.Verdict, tt.verdict)
					}
					b := tools.Budget{Executions: tools.NewLedger("proj-1", req.Messages).CycleIndex(), MaxExecutions: 3, Refused: 1, MaxRefused: 3}
					notice = tools.Notice(j, b)
					if line == "" {
						line = tools.Shown(j, b)
					}
				}

				sent := u.sent()
				if len(sent) != 2 {
					t.Fatalf("upstream calls = %d, want 2 (the refused answer and the re-ask)", len(sent))
				}
				if diff := cmp.Diff(raws(req.Messages), raws(sent[0].Messages)); diff != "" {
					t.Errorf("first upstream request's messages differ from the client's (-client +sent):\n%s", diff)
				}
				if diff := cmp.Diff(raws(sent[0].Messages), raws(sent[1].Messages[:len(sent[0].Messages)])); diff != "" {
					t.Errorf("the re-ask does not start with the history (-want +got):\n%s", diff)
				}
				var want []sentMessage
				if tt.wantAssistant != nil {
					want = append(want, *tt.wantAssistant)
				}
				want = append(want, sentMessage{Role: "system", Content: notice})
				if diff := cmp.Diff(want, messagesAfter(sent[1], len(sent[0].Messages))); diff != "" {
					t.Errorf("messages appended to the re-ask (-want +got):\n%s", diff)
				}

				wantContent := shown(line) + "Done."
				if tt.cfg.HideNotices {
					wantContent = "Done."
				}
				if tt.wantAssistant != nil {
					wantContent = tt.wantAssistant.Content + wantContent
				}
				if a.content != wantContent {
					t.Errorf("client content = %q, want %q", a.content, wantContent)
				}
				if len(a.calls) != 0 {
					t.Errorf("the refused call reached the client: %+v", a.calls)
				}
				if got := a.finish(); got != chat.FinishStop {
					t.Errorf("finish = %q, want stop", got)
				}
				if got := u.response(t, 0); got.read == got.total {
					t.Errorf("the refused answer was read to its end (%d events); reading stops at the complete call", got.total)
				}
				u.checkClosed(t)
				if evs := tr.kinds(tt.wantTrace); len(evs) != 1 || evs[0].Verdict != string(tt.verdict) {
					t.Errorf("%s traces = %+v, want one with verdict %s", tt.wantTrace, evs, tt.verdict)
				}
			})
		}
	}
}

// TestTwoStageRefusalKeepsReasoning checks that what the model said before a
// refused call — its reasoning_content, which DeepSeek's thinking mode needs
// back — goes into the assistant message the guard appends before the
// notice.
func TestTwoStageRefusalKeepsReasoning(t *testing.T) {
	bad := stream().Role().Reasoning("I should ", "read a.go again.").Content("Reading ", "again.").
		ToolCall(0, "call_2", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Done()
	good := stream().Role().Reasoning("Use the result.").Content("Done.").Finish("stop").Done()
	u := newUpstream(t, streamReply(bad), streamReply(good))
	req := newRequest(t, true, history(ran("call_1", "read_file", `{"path":"a.go"}`)), "")
	a := read(t, run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), exchange(req, u, protocol.Limits{})))

	sent := u.sent()
	if len(sent) != 2 {
		t.Fatalf("upstream calls = %d, want 2", len(sent))
	}
	want := []sentMessage{
		{Role: "assistant", Content: "Reading again.", Reasoning: ptr("I should read a.go again.")},
		{Role: "system", Content: duplicateNotice(1, 3, 2, 3)},
	}
	if diff := cmp.Diff(want, messagesAfter(sent[1], len(req.Messages))); diff != "" {
		t.Errorf("messages appended to the re-ask (-want +got):\n%s", diff)
	}
	if got, want := a.reasoning, "I should read a.go again.Use the result."; got != want {
		t.Errorf("client reasoning = %q, want %q", got, want)
	}
	if got, want := a.content, "Reading again."+shown(`refused "read_file": it already ran with the same arguments in this turn (2 of 3 refusals left).`)+"Done."; got != want {
		t.Errorf("client content = %q, want %q", got, want)
	}
}

// TestTwoStageRefusalBudget covers the DuplicateExceeded contract: once
// MAX_DUPLICATE_ATTEMPTS calls were refused — of any kind, one shared
// budget — the final instruction is injected and exactly one final
// upstream call is made, without tools, whose tool calls are dropped.
func TestTwoStageRefusalBudget(t *testing.T) {
	dup := func(id string) reply {
		return streamReply(stream().Role().ToolCall(0, id, "read_file", `{"path":"a.go"}`).Finish("tool_calls").Done())
	}
	malformed := streamReply(stream().Role().ToolCall(0, "call_m", "read_file", `{"path":`).Finish("tool_calls").Done())
	undeclared := streamReply(stream().Role().ToolCall(0, "call_u", "shell_exec", `{}`).Finish("tool_calls").Done())
	offSchema := streamReply(stream().Role().ToolCall(0, "call_s", "read_file", `{"path":1}`).Finish("tool_calls").Done())
	notAllowed := streamReply(stream().Role().ToolCall(0, "call_n", "write_file", `{"path":"x","text":"t"}`).Finish("tool_calls").Done())
	final := streamReply(stream().Role().Content("Final ", "answer.").ToolCall(0, "call_z", "read_file", `{"path":"z.go"}`).
		Finish("tool_calls").Usage(5, 5, nil).Done())

	tests := []struct {
		name     string
		cfg      protocol.TwoStageConfig
		limits   protocol.Limits
		refusals []reply
		// wantMax is the refusal budget in force.
		wantMax int
	}{
		{name: "three duplicates", refusals: []reply{dup("c2"), dup("c3"), dup("c4")}, wantMax: 3},
		{name: "duplicate, malformed and undeclared share the budget", refusals: []reply{dup("c2"), malformed, undeclared}, wantMax: 3},
		{name: "plan mode ping-pong", cfg: protocol.TwoStageConfig{PlanTools: []string{"read_file"}}, limits: protocol.Limits{Plan: true},
			refusals: []reply{notAllowed, offSchema, dup("c2")}, wantMax: 3},
		{name: "a request header lowers the budget", limits: protocol.Limits{MaxDuplicateAttempts: 1}, refusals: []reply{dup("c2")}, wantMax: 1},
		{name: "a request header cannot raise it", cfg: protocol.TwoStageConfig{MaxDuplicateAttempts: 2}, limits: protocol.Limits{MaxDuplicateAttempts: 5},
			refusals: []reply{dup("c2"), malformed}, wantMax: 2},
		{name: "configured budget of five", cfg: protocol.TwoStageConfig{MaxDuplicateAttempts: 5},
			refusals: []reply{dup("c2"), malformed, undeclared, offSchema, dup("c3")}, wantMax: 5},
	}
	for _, tt := range tests {
		for _, streaming := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%v", tt.name, streaming), func(t *testing.T) {
				tr := &recorder{}
				u := newUpstream(t, append(slices.Clone(tt.refusals), final)...)
				req := newRequest(t, streaming, history(ran("call_1", "read_file", `{"path":"a.go"}`)),
					`"tool_choice":"auto","parallel_tool_calls":true`)
				a := read(t, run(t, protocol.NewTwoStage(tt.cfg, tr), exchange(req, u, tt.limits)))

				sent := u.sent()
				if len(sent) != len(tt.refusals)+1 {
					t.Fatalf("upstream calls = %d, want %d refused answers and exactly one final call", len(sent), len(tt.refusals)+1)
				}
				for i, r := range sent[:len(sent)-1] {
					if _, ok := r.Field("tools"); !ok {
						t.Errorf("upstream call %d has no tools; only the final call goes without", i+1)
					}
				}
				last := sent[len(sent)-1]
				for _, field := range []string{"tools", "tool_choice", "parallel_tool_calls"} {
					if raw, ok := last.Field(field); ok {
						t.Errorf("final upstream call has %s = %s, want the field absent", field, raw)
					}
				}
				wantFinal := duplicateExceededNotice(1, 3, tt.wantMax)
				msgs := last.Messages
				if got := msgs[len(msgs)-1]; got.Role != chat.RoleSystem || got.Text() != wantFinal {
					t.Errorf("final call's last message = %s %q, want system %q", got.Role, got.Text(), wantFinal)
				}
				// Every refusal got its own notice, the last one saying no
				// attempt is left, and then the final instruction.
				var notices []string
				for _, m := range msgs[len(req.Messages):] {
					if m.Role == chat.RoleSystem {
						notices = append(notices, m.Text())
					}
				}
				if len(notices) != tt.wantMax+1 {
					t.Errorf("system notices in the final call = %d, want %d (one per refusal, and the final instruction)", len(notices), tt.wantMax+1)
				} else if lastRefusal := notices[tt.wantMax-1]; !strings.HasSuffix(lastRefusal, fmt.Sprintf("refused attempts left: 0 of %d)", tt.wantMax)) {
					t.Errorf("notice of the last refusal = %q, want it to say no attempt is left", lastRefusal)
				}
				if len(a.calls) != 0 {
					t.Errorf("tool calls reached the client: %+v", a.calls)
				}
				if got := a.finish(); got != chat.FinishStop {
					t.Errorf("finish = %q, want stop", got)
				}
				// The client sees one line per refusal, the last saying the
				// budget is spent, and not the final instruction again.
				wantEnd := fmt.Sprintf(". No refusals left (%d of %d used): the model answers now, without tools.\n\nFinal answer.", tt.wantMax, tt.wantMax)
				if !strings.HasSuffix(a.content, wantEnd) {
					t.Errorf("client content = %q, want it to end with %q", a.content, wantEnd)
				}
				if got := strings.Count(a.content, "**System Notice**: refused "); got != tt.wantMax {
					t.Errorf("refusals shown = %d in %q, want %d", got, a.content, tt.wantMax)
				}
				if got := strings.Count(a.content, "**System Notice**"); got != tt.wantMax {
					t.Errorf("notices shown = %d, want %d (one per refusal)", got, tt.wantMax)
				}
				if strings.Contains(a.content, "\n\n\n") || strings.Contains(a.content, "Do NOT") {
					t.Errorf("client content = %q, want one line per decision, no stacked blank lines, no instruction to the model", a.content)
				}
				u.checkClosed(t)
				if evs := tr.kinds(metrics.TraceBudgetExhausted); len(evs) != 1 || evs[0].Reason != "MAX_DUPLICATE_ATTEMPTS" {
					t.Errorf("budget_exhausted traces = %+v, want one for MAX_DUPLICATE_ATTEMPTS", evs)
				}
			})
		}
	}
}

// TestTwoStageCycleBudget: a turn that already holds MAX_PHASE_CYCLES
// executed calls gets one final call without tools.
func TestTwoStageCycleBudget(t *testing.T) {
	three := []any{ran("c1", "read_file", `{"path":"a.go"}`), ran("c2", "read_file", `{"path":"b.go"}`), ran("c3", "list_dir", `{}`)}
	answer := stream().Role().Content("From the results: ", "done.").Finish("stop").Usage(3, 3, nil).Done()
	stubborn := stream().Role().Content("From the results: ", "done.").ToolCall(0, "c9", "read_file", `{"path":"c.go"}`).Finish("tool_calls").Done()
	tests := []struct {
		name      string
		history   []string
		cfg       protocol.TwoStageConfig
		limits    protocol.Limits
		up        *sim.Stream
		wantFinal string // "" means a normal call, with tools
		wantShown string // the client's line
	}{
		{name: "three executed calls", history: history(three...), up: answer, wantFinal: cycleNotice(3, 3, 3, 3),
			wantShown: "tool runs of this turn used up (3 of 3): the model answers now, without tools."},
		{name: "the final answer still calls a tool", history: history(three...), up: stubborn, wantFinal: cycleNotice(3, 3, 3, 3),
			wantShown: "tool runs of this turn used up (3 of 3): the model answers now, without tools."},
		{name: "a request header lowers the budget", history: history(ran("c1", "read_file", `{"path":"a.go"}`)),
			limits: protocol.Limits{MaxPhaseCycles: 1}, up: answer, wantFinal: cycleNotice(1, 1, 3, 3),
			wantShown: "tool runs of this turn used up (1 of 1): the model answers now, without tools."},
		{name: "a request header cannot raise it", history: history(ran("c1", "read_file", `{"path":"a.go"}`), ran("c2", "list_dir", "")),
			cfg: protocol.TwoStageConfig{MaxPhaseCycles: 2}, limits: protocol.Limits{MaxPhaseCycles: 9}, up: answer, wantFinal: cycleNotice(2, 2, 3, 3),
			wantShown: "tool runs of this turn used up (2 of 2): the model answers now, without tools."},
		{name: "calls of an earlier turn do not count", history: history(append(three, msg("assistant", "Done."), msg("user", "And b.go?"))...), up: answer},
		{name: "a call without a tool result was not executed", history: history(three[0], three[1], ran("c3", "list_dir", `{}`)[0]), up: answer},
	}
	for _, tt := range tests {
		for _, streaming := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%v", tt.name, streaming), func(t *testing.T) {
				tr := &recorder{}
				u := newUpstream(t, streamReply(tt.up))
				req := newRequest(t, streaming, tt.history, `"tool_choice":"required"`)
				a := read(t, run(t, protocol.NewTwoStage(tt.cfg, tr), exchange(req, u, tt.limits)))
				sent := u.sent()
				if len(sent) != 1 {
					t.Fatalf("upstream calls = %d, want 1", len(sent))
				}
				_, hasTools := sent[0].Field("tools")
				_, hasChoice := sent[0].Field("tool_choice")
				if tt.wantFinal == "" {
					if !hasTools || !hasChoice {
						t.Errorf("upstream call has tools %v, tool_choice %v; want both: the budget is not spent", hasTools, hasChoice)
					}
					if len(sent[0].Messages) != len(req.Messages) {
						t.Errorf("upstream call has %d messages, want the client's %d", len(sent[0].Messages), len(req.Messages))
					}
					if strings.Contains(a.content, "System Notice") {
						t.Errorf("client content = %q, want no notice", a.content)
					}
					return
				}
				if hasTools || hasChoice {
					t.Errorf("final upstream call has tools %v, tool_choice %v; want neither", hasTools, hasChoice)
				}
				want := append(raws(req.Messages), string(chat.NewMessage(chat.RoleSystem, tt.wantFinal).Raw))
				if diff := cmp.Diff(want, raws(sent[0].Messages)); diff != "" {
					t.Errorf("final call's messages (-want +got):\n%s", diff)
				}
				if got, want := a.content, shown(tt.wantShown)+"From the results: done."; got != want {
					t.Errorf("client content = %q, want %q", got, want)
				}
				if len(a.calls) != 0 {
					t.Errorf("tool calls reached the client: %+v", a.calls)
				}
				if got := a.finish(); got != chat.FinishStop {
					t.Errorf("finish = %q, want stop", got)
				}
				u.checkClosed(t)
				if evs := tr.kinds(metrics.TraceBudgetExhausted); len(evs) != 1 || evs[0].Reason != "MAX_PHASE_CYCLES" {
					t.Errorf("budget_exhausted traces = %+v, want one for MAX_PHASE_CYCLES", evs)
				}
			})
		}
	}
}

// TestTwoStageLimitsHeaders checks the budgets in force, as the start
// headers report them: configured values, lowered by Limits, never raised.
func TestTwoStageLimitsHeaders(t *testing.T) {
	tests := []struct {
		name               string
		cfg                protocol.TwoStageConfig
		limits             protocol.Limits
		wantCycles, wantDu string
	}{
		{name: "defaults", wantCycles: "3", wantDu: "3"},
		{name: "configured", cfg: protocol.TwoStageConfig{MaxPhaseCycles: 5, MaxDuplicateAttempts: 4}, wantCycles: "5", wantDu: "4"},
		{name: "lowered", cfg: protocol.TwoStageConfig{MaxPhaseCycles: 5, MaxDuplicateAttempts: 4},
			limits: protocol.Limits{MaxPhaseCycles: 2, MaxDuplicateAttempts: 1}, wantCycles: "2", wantDu: "1"},
		{name: "not raised", limits: protocol.Limits{MaxPhaseCycles: 10, MaxDuplicateAttempts: 10}, wantCycles: "3", wantDu: "3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, streamReply(stream().Role().Content("hi").Finish("stop").Done()))
			a := read(t, run(t, protocol.NewTwoStage(tt.cfg, nil), exchange(newRequest(t, true, history(), ""), u, tt.limits)))
			got := [2]string{a.header.Get("X-Phasegate-Max-Phase-Cycles"), a.header.Get("X-Phasegate-Max-Duplicate-Attempts")}
			if want := [2]string{tt.wantCycles, tt.wantDu}; got != want {
				t.Errorf("budget headers = %q, want %q", got, want)
			}
		})
	}
}

// TestTwoStagePlanModeTools checks the tools the upstream is shown.
func TestTwoStagePlanModeTools(t *testing.T) {
	tests := []struct {
		name       string
		planTools  []string
		plan       bool
		wantTools  []string
		wantChoice bool
	}{
		{name: "act mode shows every tool", planTools: []string{"read_file"}, wantTools: []string{"read_file", "write_file", "list_dir"}, wantChoice: true},
		{name: "plan mode shows the allowlist", planTools: []string{"read_file", "list_dir", "grep"}, plan: true, wantTools: []string{"read_file", "list_dir"}, wantChoice: true},
		{name: "plan mode with no declared tool allowed", planTools: []string{"grep"}, plan: true},
		{name: "plan mode without an allowlist allows nothing", plan: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, streamReply(stream().Role().Content("hi").Finish("stop").Done()))
			req := newRequest(t, true, history(), `"tool_choice":"auto","parallel_tool_calls":false`)
			read(t, run(t, protocol.NewTwoStage(protocol.TwoStageConfig{PlanTools: tt.planTools}, nil), exchange(req, u, protocol.Limits{Plan: tt.plan})))
			sent := u.sent()
			if len(sent) != 1 {
				t.Fatalf("upstream calls = %d, want 1", len(sent))
			}
			var got []string
			for _, tool := range sent[0].Tools {
				got = append(got, tool.Function.Name)
			}
			if diff := cmp.Diff(tt.wantTools, got); diff != "" {
				t.Errorf("tools sent upstream (-want +got):\n%s", diff)
			}
			_, hasTools := sent[0].Field("tools")
			if hasTools != (len(tt.wantTools) > 0) {
				t.Errorf("tools field present = %v, want %v (upstreams reject \"tools\": [])", hasTools, len(tt.wantTools) > 0)
			}
			for _, field := range []string{"tool_choice", "parallel_tool_calls"} {
				if _, ok := sent[0].Field(field); ok != tt.wantChoice {
					t.Errorf("%s present = %v, want %v", field, ok, tt.wantChoice)
				}
			}
		})
	}
}

// TestTwoStageUpstreamRequest: the upstream is always asked to stream with
// usage, and every other field of the client's request is sent as it came.
func TestTwoStageUpstreamRequest(t *testing.T) {
	vendor := `"temperature":0,"thinking":{"type":"enabled"},"max_tokens":100,"x_vendor":{"a": [1, 2.50]}`
	tests := []struct {
		name              string
		stream            bool
		extra             string
		wantStreamOptions string
	}{
		{name: "streaming client without stream_options", stream: true, extra: vendor, wantStreamOptions: `{"include_usage":true}`},
		{name: "non-streaming client", stream: false, extra: vendor, wantStreamOptions: `{"include_usage":true}`},
		{name: "client that declined usage", stream: true, extra: vendor + `,"stream_options":{"include_usage":false,"x_opt":1}`,
			wantStreamOptions: `{"include_usage":true,"x_opt":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dupThenAnswer := []reply{
				streamReply(stream().Role().ToolCall(0, "c2", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Done()),
				streamReply(stream().Role().Content("ok").Finish("stop").Done()),
			}
			u := newUpstream(t, dupThenAnswer...)
			req := newRequest(t, tt.stream, history(ran("c1", "read_file", `{"path":"a.go"}`)), tt.extra)
			read(t, run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), exchange(req, u, protocol.Limits{})))
			sent := u.sent()
			if len(sent) != 2 {
				t.Fatalf("upstream calls = %d, want 2", len(sent))
			}
			for i, r := range sent {
				if raw, _ := r.Field("stream"); string(raw) != "true" {
					t.Errorf("call %d: stream = %s, want true", i+1, raw)
				}
				raw, _ := r.Field("stream_options")
				var got, want map[string]any
				if err := json.Unmarshal(raw, &got); err != nil {
					t.Fatalf("call %d: stream_options %s: %v", i+1, raw, err)
				}
				_ = json.Unmarshal([]byte(tt.wantStreamOptions), &want)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("call %d: stream_options (-want +got):\n%s", i+1, diff)
				}
				for _, key := range []string{"model", "temperature", "thinking", "max_tokens", "x_vendor", "tools"} {
					want, _ := req.Field(key)
					if got, _ := r.Field(key); string(got) != string(want) {
						t.Errorf("call %d: %s = %s, want %s byte for byte", i+1, key, got, want)
					}
				}
			}
			if diff := cmp.Diff(raws(req.Messages), raws(sent[0].Messages)); diff != "" {
				t.Errorf("messages are not sent byte for byte (-client +sent):\n%s", diff)
			}
			if got := req.Stream; got != tt.stream {
				t.Errorf("the client's request was changed: stream = %v, want %v", got, tt.stream)
			}
		})
	}
}

// TestTwoStageUsage: the usage of every internal call is summed into the
// one usage the client sees, vendor fields included; a call the guard cut
// short before its usage came is estimated, and says so.
func TestTwoStageUsage(t *testing.T) {
	answer := stream().Role().Content("ok").Finish("stop").
		Usage(120, 20, map[string]any{"prompt_cache_hit_tokens": 100, "prompt_cache_miss_tokens": 20, "completion_tokens_details": map[string]any{"reasoning_tokens": 6}}).Done()
	// DeepSeek puts the usage on the finish chunk itself.
	deepseekDup := stream().Role().ToolCall(0, "c2", "list_dir").
		Raw(rawChunk(`{"content":""}`, "tool_calls", `"usage":{"prompt_tokens":100,"completion_tokens":10,"total_tokens":110,`+
			`"prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":36,"completion_tokens_details":{"reasoning_tokens":4}}`)).Done()
	cutDup := stream().Role().ToolCall(0, "c2", "list_dir", `{}`).Finish("tool_calls").Usage(100, 10, nil).Done()
	hist := history(ran("c1", "list_dir", `{}`))
	tests := []struct {
		name          string
		stream        bool
		extra         string
		replies       []reply
		want          map[string]any // nil: no usage chunk
		wantEstimated bool
	}{
		{
			name: "summed across a refusal", stream: true, extra: `"stream_options":{"include_usage":true}`,
			replies: []reply{streamReply(deepseekDup), streamReply(answer)},
			want: map[string]any{"prompt_tokens": 220.0, "completion_tokens": 30.0, "total_tokens": 250.0,
				"prompt_cache_hit_tokens": 164.0, "prompt_cache_miss_tokens": 56.0, "completion_tokens_details": map[string]any{"reasoning_tokens": 10.0}},
		},
		{
			name: "summed for a non-streaming client", stream: false,
			replies: []reply{streamReply(deepseekDup), streamReply(answer)},
			want: map[string]any{"prompt_tokens": 220.0, "completion_tokens": 30.0, "total_tokens": 250.0,
				"prompt_cache_hit_tokens": 164.0, "prompt_cache_miss_tokens": 56.0, "completion_tokens_details": map[string]any{"reasoning_tokens": 10.0}},
		},
		{
			name: "not shown to a streaming client that did not ask", stream: true,
			replies: []reply{streamReply(deepseekDup), streamReply(answer)},
		},
		{
			name: "estimated for a call cut short", stream: true, extra: `"stream_options":{"include_usage":true}`,
			replies: []reply{streamReply(cutDup), streamReply(answer)}, wantEstimated: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, tt.replies...)
			a := read(t, run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), exchange(newRequest(t, tt.stream, hist, tt.extra), u, protocol.Limits{})))
			if tt.want == nil && !tt.wantEstimated {
				if len(a.usage) != 0 {
					t.Errorf("usage = %s, want no usage chunk", a.usage)
				}
				return
			}
			if len(a.usage) != 1 {
				t.Fatalf("usage chunks = %d, want 1", len(a.usage))
			}
			got := usageMap(t, a.usage[0])
			last := a.chunks[len(a.chunks)-1]
			if last.Ext == nil || last.Ext.UsageEstimated != tt.wantEstimated {
				t.Errorf("usage chunk metadata = %+v, want usage_estimated %v", last.Ext, tt.wantEstimated)
			}
			if !tt.wantEstimated {
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("usage (-want +got):\n%s", diff)
				}
				return
			}
			// The cut call's usage is estimated; the answer's is real and
			// its vendor fields pass as they came.
			prompt, _ := got["prompt_tokens"].(float64)
			completion, _ := got["completion_tokens"].(float64)
			total, _ := got["total_tokens"].(float64)
			if prompt <= 120 || completion <= 20 || total != prompt+completion {
				t.Errorf("usage = %v, want more than the answer's own 120+20 and total = prompt + completion", got)
			}
			if got["prompt_cache_hit_tokens"] != 100.0 {
				t.Errorf("prompt_cache_hit_tokens = %v, want 100", got["prompt_cache_hit_tokens"])
			}
		})
	}
}

// phaseStep is the metadata of a run of chunks.
type phaseStep struct {
	Phase             string
	PhaseIndex, Cycle int
}

func TestTwoStagePhaseMetadata(t *testing.T) {
	tests := []struct {
		name       string
		history    []string
		replies    []reply
		want       []phaseStep
		wantHeader map[string]string
	}{
		{
			name:    "text answer",
			history: history(),
			replies: []reply{streamReply(stream().Role().Content("hi").Finish("stop").Usage(1, 1, nil).Done())},
			want:    []phaseStep{{"action_phase", 1, 0}, {"complete", 2, 0}},
			wantHeader: map[string]string{"X-Phasegate-Phase": "action_phase", "X-Phasegate-Phase-Index": "1", "X-Phasegate-Cycle-Index": "0",
				"X-Phasegate-Project-Id": "proj-1", "X-Upstream": "fake"},
		},
		{
			name:    "forwarded call in the second cycle",
			history: history(ran("c1", "read_file", `{"path":"a.go"}`)),
			replies: []reply{streamReply(stream().Role().Content("Next.").ToolCall(0, "c2", "read_file", `{"path":"b.go"}`).Finish("tool_calls").Done())},
			want:    []phaseStep{{"action_phase", 1, 1}, {"tool_phase", 2, 2}, {"complete", 3, 2}},
			wantHeader: map[string]string{"X-Phasegate-Phase": "action_phase", "X-Phasegate-Phase-Index": "1", "X-Phasegate-Cycle-Index": "1",
				"X-Phasegate-Max-Phase-Cycles": "3", "X-Phasegate-Max-Duplicate-Attempts": "3"},
		},
		{
			name:    "refusal then forwarded call",
			history: history(ran("c1", "read_file", `{"path":"a.go"}`)),
			replies: []reply{
				streamReply(stream().Role().ToolCall(0, "c2", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Done()),
				streamReply(stream().Role().ToolCall(0, "c3", "list_dir", `{}`).Finish("tool_calls").Done()),
			},
			want: []phaseStep{{"action_phase", 1, 1}, {"tool_phase", 2, 2}, {"complete", 3, 2}},
		},
		{
			name:    "forced final answer",
			history: history(ran("c1", "read_file", `{"path":"a.go"}`), ran("c2", "read_file", `{"path":"b.go"}`), ran("c3", "list_dir", `{}`)),
			replies: []reply{streamReply(stream().Role().Content("Done.").Finish("stop").Done())},
			want:    []phaseStep{{"action_phase", 1, 3}, {"complete", 2, 3}},
			wantHeader: map[string]string{"X-Phasegate-Phase": "action_phase", "X-Phasegate-Phase-Index": "1", "X-Phasegate-Cycle-Index": "3",
				"X-Upstream": "fake"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, tt.replies...)
			a := read(t, run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil),
				exchange(newRequest(t, true, tt.history, `"stream_options":{"include_usage":true}`), u, protocol.Limits{})))
			var got []phaseStep
			for _, c := range a.chunks {
				if c.Ext == nil {
					continue
				}
				s := phaseStep{c.Ext.Phase, c.Ext.PhaseIndex, c.Ext.CycleIndex}
				if len(got) == 0 || got[len(got)-1] != s {
					got = append(got, s)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("phase metadata, runs of chunks (-want +got):\n%s", diff)
			}
			for k, want := range tt.wantHeader {
				if got := a.header.Get(k); got != want {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

// TestTwoStageDoneWithoutFinish: a stream that ends with [DONE] but no
// finish reason ended cleanly (only an end with neither [DONE] nor a
// finish reason is truncated); the client still gets exactly one finish.
func TestTwoStageDoneWithoutFinish(t *testing.T) {
	tests := []struct {
		name       string
		up         *sim.Stream
		wantFinish string
		wantCall   string
	}{
		{name: "text", up: stream().Role().Content("hi").Done(), wantFinish: chat.FinishStop},
		{name: "a call with empty arguments", up: stream().Role().ToolCall(0, "c1", "list_dir").Done(), wantFinish: chat.FinishToolCalls, wantCall: "c1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, streamReply(tt.up))
			a := read(t, run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), exchange(newRequest(t, true, history(), ""), u, protocol.Limits{})))
			if got := a.finish(); got != tt.wantFinish {
				t.Errorf("finish = %q, want %q", got, tt.wantFinish)
			}
			var gotCall string
			if len(a.calls) == 1 {
				gotCall = a.calls[0].ID
			}
			if gotCall != tt.wantCall {
				t.Errorf("forwarded call = %q, want %q", gotCall, tt.wantCall)
			}
			u.checkClosed(t)
		})
	}
}

var errRead = errors.New("connection reset by test")

func TestTwoStageErrors(t *testing.T) {
	dup := streamReply(stream().Role().ToolCall(0, "c2", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Done())
	tests := []struct {
		name    string
		replies []reply
		check   func(error) bool
		want    string // what check wants, for the message
		// wantBytes is whether chunks reached the consumer before the error.
		wantBytes bool
	}{
		{
			name:    "upstream error before any byte",
			replies: []reply{{sendErr: &protocol.UpstreamError{Status: http.StatusTooManyRequests, Body: []byte(`{"error":{"message":"slow down"}}`)}}},
			check: func(err error) bool {
				var ue *protocol.UpstreamError
				return errors.As(err, &ue) && ue.Status == http.StatusTooManyRequests
			},
			want: "*protocol.UpstreamError with status 429",
		},
		{
			name:    "upstream error on the re-ask",
			replies: []reply{dup, {sendErr: &protocol.UpstreamError{Status: http.StatusServiceUnavailable}}},
			check: func(err error) bool {
				var ue *protocol.UpstreamError
				return errors.As(err, &ue) && ue.Status == http.StatusServiceUnavailable
			},
			want: "*protocol.UpstreamError with status 503", wantBytes: true,
		},
		{
			name:    "text cut off",
			replies: []reply{streamReply(stream().Role().Content("partial ", "answer"))},
			check:   func(err error) bool { return errors.Is(err, protocol.ErrTruncated) },
			want:    "protocol.ErrTruncated", wantBytes: true,
		},
		{
			// Nothing but the opening chunk reached the client, so each
			// cut answer is retried unseen, MaxTransientRetries times,
			// before the error stands.
			name:    "cut off after a call with empty arguments",
			replies: slices.Repeat([]reply{streamReply(stream().Role().ToolCall(0, "c1", "list_dir"))}, 1+protocol.MaxTransientRetries),
			check:   func(err error) bool { return errors.Is(err, protocol.ErrTruncated) },
			want:    "protocol.ErrTruncated", wantBytes: true,
		},
		{
			name:    "cut off inside a call's arguments",
			replies: slices.Repeat([]reply{streamReply(stream().Role().ToolCall(0, "c1", "read_file", `{"path":`, `"a.g`))}, 1+protocol.MaxTransientRetries),
			check:   func(err error) bool { return errors.Is(err, protocol.ErrTruncated) },
			want:    "protocol.ErrTruncated", wantBytes: true,
		},
		{
			name:    "cut off after text: too late to retry",
			replies: []reply{streamReply(stream().Role().Content("partial").ToolCall(0, "c1", "read_file", `{"path":`))},
			check:   func(err error) bool { return errors.Is(err, protocol.ErrTruncated) },
			want:    "protocol.ErrTruncated", wantBytes: true,
		},
		{
			name:    "read error",
			replies: []reply{{data: streamReply(stream().Role().Content("partial")).data, readErr: errRead}},
			check:   func(err error) bool { return errors.Is(err, errRead) },
			want:    "the read error", wantBytes: true,
		},
		{
			// The upstream's fault, not the guard's: no fallback that would
			// send the request again.
			name:    "garbage before any byte",
			replies: []reply{{data: []string{"not json"}}},
			check:   isInvalidResponse,
			want:    "protocol.ErrInvalidResponse, not a *protocol.GuardError",
		},
		{
			name:    "an error object inside the stream",
			replies: []reply{{data: []string{`{"error":{"message":"overloaded","type":"server_error"}}`}}},
			check:   isInvalidResponse,
			want:    "protocol.ErrInvalidResponse, not a *protocol.GuardError",
		},
		{
			name:    "an error object after the first byte",
			replies: []reply{{data: append(streamReply(stream().Role().Content("hi")).data, `{"error":{"message":"overloaded"}}`)}},
			check:   isInvalidResponse,
			want:    "protocol.ErrInvalidResponse", wantBytes: true,
		},
		{
			name:    "garbage after the first byte",
			replies: []reply{{data: append(streamReply(stream().Role().Content("hi")).data, "{oops")}},
			check: func(err error) bool {
				var ge *protocol.GuardError
				return err != nil && !errors.As(err, &ge)
			},
			want: "an error that is not a *protocol.GuardError (too late to fall back)", wantBytes: true,
		},
		{
			name:    "a non-streaming answer to a stream request",
			replies: []reply{{body: []byte(`{"id":"x","object":"chat.completion","choices":[]}`)}},
			check:   isInvalidResponse,
			want:    "protocol.ErrInvalidResponse, not a *protocol.GuardError",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, tt.replies...)
			res := run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil),
				exchange(newRequest(t, true, history(ran("c1", "read_file", `{"path":"a.go"}`)), ""), u, protocol.Limits{}))
			if !tt.check(res.err) {
				t.Errorf("error = %v (%T), want %s", res.err, res.err, tt.want)
			}
			gotBytes := false
			for _, ev := range res.events {
				switch ev.Kind {
				case protocol.KindChunk:
					gotBytes = true
					if bytes.Contains(ev.Data, []byte(`"tool_calls"`)) {
						t.Errorf("a tool call reached the consumer of a failed response: %s", ev.Data)
					}
				case protocol.KindDone:
					t.Errorf("[DONE] reached the consumer of a failed response")
				}
			}
			if gotBytes != tt.wantBytes {
				t.Errorf("chunks before the error = %v, want %v", gotBytes, tt.wantBytes)
			}
			if n, want := len(u.sent()), len(tt.replies); n != want {
				t.Errorf("upstream calls = %d, want %d", n, want)
			}
			u.checkClosed(t)
		})
	}
}

// TestTwoStageConsumerStops: a consumer that stops ranging (the client
// left) makes the guard close the upstream and ask nothing more.
func TestTwoStageConsumerStops(t *testing.T) {
	dup := streamReply(stream().Role().ToolCall(0, "c2", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Done())
	long := streamReply(stream().Role().Content("one ", "two ", "three ", "four").Finish("stop").Done())
	tests := []struct {
		name      string
		replies   []reply
		after     int // events taken before stopping
		wantCalls int
	}{
		{name: "at the start", replies: []reply{long}, after: 1, wantCalls: 1},
		{name: "mid-answer", replies: []reply{long}, after: 3, wantCalls: 1},
		{name: "at the notice of a refusal", replies: []reply{dup, long}, after: 3, wantCalls: 1},
		{name: "in the re-ask", replies: []reply{dup, long}, after: 4, wantCalls: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, tt.replies...)
			x := exchange(newRequest(t, true, history(ran("c1", "read_file", `{"path":"a.go"}`)), ""), u, protocol.Limits{})
			n := 0
			for _, err := range protocol.NewTwoStage(protocol.TwoStageConfig{}, nil).Run(context.Background(), x) {
				if err != nil {
					t.Fatalf("error = %v, want none before the consumer stops", err)
				}
				n++
				if n == tt.after {
					break
				}
			}
			if n != tt.after {
				t.Fatalf("the run ended after %d events, before the consumer stopped at %d", n, tt.after)
			}
			if got := len(u.sent()); got != tt.wantCalls {
				t.Errorf("upstream calls = %d, want %d", got, tt.wantCalls)
			}
			u.checkClosed(t)
			last := u.response(t, tt.wantCalls-1)
			if last.read == last.total {
				t.Errorf("the upstream was read to its end (%d events) after the consumer stopped", last.total)
			}
		})
	}
}

// TestTwoStageAssembled: a non-streaming client's chunks assemble into one
// chat.completion holding the forwarded call, the usage and the metadata.
func TestTwoStageAssembled(t *testing.T) {
	up := stream().Role().Reasoning("Read it.").Content("Let me look.").
		ToolCall(0, "call_a", "read_file", `{"path":`, `"a.go"}`).ToolCall(1, "call_b", "list_dir").Finish("tool_calls").Done()
	u := newUpstream(t, streamReply(up))
	res := run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), exchange(newRequest(t, false, history(), ""), u, protocol.Limits{}))
	read(t, res)
	var asm chat.Assembler
	for _, ev := range res.events {
		if ev.Kind == protocol.KindChunk {
			if err := asm.Add(ev.Data); err != nil {
				t.Fatalf("Assembler.Add: %v", err)
			}
		}
	}
	body, err := asm.Completion()
	if err != nil {
		t.Fatalf("Completion: %v", err)
	}
	var got struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Role      string          `json:"role"`
				Content   *string         `json:"content"`
				Reasoning string          `json:"reasoning_content"`
				ToolCalls []chat.ToolCall `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage map[string]any `json:"usage"`
		Ext   *ext           `json:"phasegate"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("completion %s: %v", body, err)
	}
	if got.Object != "chat.completion" || len(got.Choices) != 1 {
		t.Fatalf("completion = %s, want one choice of a chat.completion", body)
	}
	m := got.Choices[0].Message
	wantCalls := []chat.ToolCall{{ID: "call_a", Type: "function", Function: chat.FunctionCall{Name: "read_file", Arguments: `{"path":"a.go"}`}}}
	if diff := cmp.Diff(wantCalls, m.ToolCalls); diff != "" {
		t.Errorf("tool calls (-want +got):\n%s", diff)
	}
	if m.Role != "assistant" || m.Content == nil || *m.Content != "Let me look." || m.Reasoning != "Read it." {
		t.Errorf("message = %+v, want the assistant's text and reasoning", m)
	}
	if got.Choices[0].FinishReason != chat.FinishToolCalls {
		t.Errorf("finish = %q, want tool_calls", got.Choices[0].FinishReason)
	}
	if got.Usage == nil {
		t.Errorf("completion has no usage: a non-streaming client always gets it")
	}
	if got.Ext == nil || got.Ext.Phase != string(protocol.PhaseComplete) {
		t.Errorf("completion metadata = %+v, want phase complete", got.Ext)
	}
}

// TestTwoStageLedgerFromHistory: when token fitting dropped messages,
// Exchange.History — the history as the client sent it — is the ledger, so
// a call truncation hid from the model still counts and is still blocked.
func TestTwoStageLedgerFromHistory(t *testing.T) {
	three := []any{ran("c1", "read_file", `{"path":"a.go"}`), ran("c2", "read_file", `{"path":"b.go"}`), ran("c3", "list_dir", `{}`)}
	tests := []struct {
		name    string
		full    []string
		replies []reply
		// wantCalls is the number of upstream calls; wantNotice the first
		// notice the model gets.
		wantCalls  int
		wantNotice string
	}{
		{
			name:       "executed calls count toward the cycle budget",
			full:       history(three...),
			replies:    []reply{streamReply(stream().Role().Content("Done.").Finish("stop").Done())},
			wantCalls:  1,
			wantNotice: cycleNotice(3, 3, 3, 3),
		},
		{
			name: "a repeat of a dropped call is a duplicate",
			full: history(ran("c1", "read_file", `{"path":"a.go"}`)),
			replies: []reply{
				streamReply(stream().Role().ToolCall(0, "c2", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Done()),
				streamReply(stream().Role().Content("Done.").Finish("stop").Done()),
			},
			wantCalls:  2,
			wantNotice: duplicateNotice(1, 3, 2, 3),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, tt.replies...)
			fitted := newRequest(t, true, history(), "") // what truncation left
			x := exchange(fitted, u, protocol.Limits{})
			x.History = newRequest(t, true, tt.full, "").Messages
			a := read(t, run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), x))
			sent := u.sent()
			if len(sent) != tt.wantCalls {
				t.Fatalf("upstream calls = %d, want %d", len(sent), tt.wantCalls)
			}
			if got := messagesAfter(sent[len(sent)-1], len(fitted.Messages)); len(got) == 0 || got[len(got)-1].Content != tt.wantNotice {
				t.Errorf("messages appended = %+v, want the notice %q last", got, tt.wantNotice)
			}
			if diff := cmp.Diff(raws(fitted.Messages), raws(sent[0].Messages[:min(len(fitted.Messages), len(sent[0].Messages))])); diff != "" {
				t.Errorf("the upstream got other messages than the fitted ones (-want +got):\n%s", diff)
			}
			if len(a.calls) != 0 || a.finish() != chat.FinishStop {
				t.Errorf("calls %+v, finish %q; want no call and stop", a.calls, a.finish())
			}
		})
	}
}

// TestTwoStageTransient: DeepSeek's insufficient_system_resource finish (or
// a stream cut at the opening chunk) before any byte reached the client is
// retried unseen; after bytes were sent the reason is passed on as it came,
// never turned into stop.
func TestTwoStageTransient(t *testing.T) {
	busy := streamReply(stream().Role().Finish(protocol.FinishInsufficientResource).Done())
	good := streamReply(stream().Role().Content("answer").Finish("stop").Done())
	late := streamReply(stream().Role().Content("half an ").Finish(protocol.FinishInsufficientResource).Done())
	// held said only what a hold-back scanner held back: a '<' that might
	// begin a leaked call (or, with an envelope rule, a delimiter).
	held := streamReply(stream().Role().Content("<").Finish(protocol.FinishInsufficientResource).Done())
	heldTail := streamReply(stream().Role().Content("<<<ORCH").Finish(protocol.FinishInsufficientResource).Done())
	tests := []struct {
		name        string
		replies     []reply
		limits      protocol.Limits
		wantContent string
		wantFinish  string
	}{
		{name: "busy, then an answer", replies: []reply{busy, good}, wantContent: "answer", wantFinish: "stop"},
		{name: "busy twice, then an answer", replies: []reply{busy, busy, good}, wantContent: "answer", wantFinish: "stop"},
		{name: "busy past the retries: reason passed on", replies: []reply{busy, busy, busy}, wantFinish: protocol.FinishInsufficientResource},
		{name: "busy after text: reason passed on, no retry", replies: []reply{late}, wantContent: "half an ", wantFinish: protocol.FinishInsufficientResource},
		{name: "busy after held text only: retried unseen", replies: []reply{held, good}, wantContent: "answer", wantFinish: "stop"},
		{name: "busy after held text past the retries: the text, then the reason", replies: []reply{held, held, held}, wantContent: "<", wantFinish: protocol.FinishInsufficientResource},
		{name: "busy after a held delimiter tail only: retried unseen", replies: []reply{heldTail, good}, limits: protocol.Limits{Envelope: protocol.EnvelopeOptional}, wantContent: "answer", wantFinish: "stop"},
		{name: "busy after a held delimiter tail past the retries: the text, then the reason", replies: []reply{heldTail, heldTail, heldTail}, limits: protocol.Limits{Envelope: protocol.EnvelopeOptional}, wantContent: "<<<ORCH", wantFinish: protocol.FinishInsufficientResource},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, tt.replies...)
			res := run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), exchange(newRequest(t, true, history(), ""), u, tt.limits))
			a := read(t, res)
			if a.content != tt.wantContent {
				t.Errorf("content: got %q, want %q", a.content, tt.wantContent)
			}
			if len(a.finishes) != 1 || a.finishes[0] != tt.wantFinish {
				t.Errorf("finishes: got %q, want [%q]", a.finishes, tt.wantFinish)
			}
			if n := len(u.sent()); n != len(tt.replies) {
				t.Errorf("upstream calls: got %d, want %d", n, len(tt.replies))
			}
			u.checkClosed(t)
		})
	}
}

// TestTwoStageRefitsReasks: a re-ask grows the request by the refused
// answer and a notice, so it goes through the exchange's Fit again; the
// first call, which the proxy fitted already, does not.
func TestTwoStageRefitsReasks(t *testing.T) {
	dup := streamReply(stream().Role().ToolCall(0, "c9", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Done())
	answer := streamReply(stream().Role().Content("done").Finish("stop").Done())
	u := newUpstream(t, dup, answer)
	x := exchange(newRequest(t, true, history(ran("c1", "read_file", `{"path":"a.go"}`)), ""), u, protocol.Limits{})
	var fitted []int // message counts Fit saw
	x.Tokens = fitFunc(func(req *chat.Request) error {
		fitted = append(fitted, len(req.Messages))
		// Make room as the proxy would: drop the oldest non-system message.
		msgs := append([]chat.Message{req.Messages[0]}, req.Messages[2:]...)
		req.SetMessages(msgs)
		return nil
	})
	a := read(t, run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), x))
	if a.content == "" || len(a.finishes) != 1 || a.finishes[0] != "stop" {
		t.Fatalf("answer: content %q, finishes %q; want the text answer", a.content, a.finishes)
	}
	sent := u.sent()
	if len(fitted) != 1 {
		t.Fatalf("Fit calls: got %d, want 1 (the re-ask only)", len(fitted))
	}
	if got, want := len(sent[1].Messages), fitted[0]-1; got != want {
		t.Errorf("re-ask messages sent: got %d, want %d (as Fit left them)", got, want)
	}
	if last := sent[1].Messages[len(sent[1].Messages)-1]; last.Role != chat.RoleSystem {
		t.Errorf("last message of the re-ask: got role %q, want the notice", last.Role)
	}
}

// TestTwoStageRefitError: a re-ask that cannot be made to fit ends the
// response with the client's error.
func TestTwoStageRefitError(t *testing.T) {
	dup := streamReply(stream().Role().Content("Again: ").ToolCall(0, "c9", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Done())
	u := newUpstream(t, dup)
	x := exchange(newRequest(t, true, history(ran("c1", "read_file", `{"path":"a.go"}`)), ""), u, protocol.Limits{})
	tooLong := chat.InvalidRequest("messages", "too long")
	x.Tokens = fitFunc(func(*chat.Request) error { return tooLong })
	res := run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), x)
	if !errors.Is(res.err, tooLong) {
		t.Errorf("error: got %v, want the Fit error", res.err)
	}
	if n := len(u.sent()); n != 1 {
		t.Errorf("upstream calls: got %d, want 1", n)
	}
}

// fitFunc is a protocol.Tokens whose Fit is the function itself; it
// learns nothing and counts four bytes a token.
type fitFunc func(req *chat.Request) error

func (f fitFunc) Fit(req *chat.Request) (protocol.Prompt, error) {
	if err := f(req); err != nil {
		return protocol.Prompt{}, err
	}
	n := req.EncodedLen() / 4
	return protocol.Prompt{Counted: n, Estimate: n}, nil
}

func (fitFunc) Learn(*chat.Request, protocol.Prompt, []byte) bool { return false }

func (fitFunc) Prompt(req *chat.Request) protocol.Prompt {
	n := req.EncodedLen() / 4
	return protocol.Prompt{Counted: n, Estimate: n}
}

func (fitFunc) Count(_, text string) int { return (len(text) + 3) / 4 }

// isInvalidResponse reports an upstream answer that is not a completion,
// classified as the upstream's fault and never as the guard's.
func isInvalidResponse(err error) bool {
	var ge *protocol.GuardError
	f := protocol.Classify(err)
	return errors.Is(err, protocol.ErrInvalidResponse) && !errors.As(err, &ge) &&
		f.Error.Status == http.StatusBadGateway && f.Error.Code == "upstream_invalid_response" && f.UpstreamKind == "invalid_response"
}

// TestTwoStageToolResultTraces: the tool results a request brings — those
// answering the calls of its last assistant message — are each traced as
// tool_result with the tool's name and call id (never the result), once;
// results of earlier steps, already traced when they came, are not.
func TestTwoStageToolResultTraces(t *testing.T) {
	answer := streamReply(stream().Role().Content("done").Finish("stop").Done())
	tests := []struct {
		name string
		msgs []string
		want []metrics.Trace
	}{
		{name: "no tool result", msgs: history()},
		{name: "the newest result only", msgs: history(ran("c1", "read_file", `{"path":"a.go"}`), ran("c2", "list_dir", `{}`)),
			want: []metrics.Trace{{Kind: metrics.TraceToolResult, Tool: "list_dir", ToolCallID: "c2"}}},
		{name: "a call not answered yet", msgs: history(ran("c1", "read_file", `{"path":"a.go"}`)[:1])},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			u := newUpstream(t, answer)
			read(t, run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, rec), exchange(newRequest(t, true, tt.msgs, ""), u, protocol.Limits{})))
			var got []metrics.Trace
			for _, ev := range rec.kinds(metrics.TraceToolResult) {
				got = append(got, metrics.Trace{Kind: ev.Kind, Tool: ev.Tool, ToolCallID: ev.ToolCallID})
				if ev.RequestID != "req-1" {
					t.Errorf("tool_result request id = %q, want req-1", ev.RequestID)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("tool_result traces (-want +got):\n%s", diff)
			}
		})
	}
}

// usageMeter records the usage the guard metered.
type usageMeter struct{ usage []protocol.Usage }

func (m *usageMeter) Usage(u protocol.Usage) { m.usage = append(m.usage, u) }
func (m *usageMeter) Failed(error)           {}

// TestTwoStageUsageSettledOnce: an answer stopped at its forwarded call,
// before it reported usage, is estimated once, also when the client leaves
// while the call is written.
func TestTwoStageUsageSettledOnce(t *testing.T) {
	up := stream().Role().ToolCall(0, "call_a", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Usage(100, 10, nil).Done()
	u := newUpstream(t, streamReply(up))
	m := &usageMeter{}
	x := exchange(newRequest(t, true, history(), ""), u, protocol.Limits{})
	x.Meter = m
	stopped := false
	for ev, err := range protocol.NewTwoStage(protocol.TwoStageConfig{}, nil).Run(context.Background(), x) {
		if err != nil {
			t.Fatalf("error = %v, want none before the consumer stops", err)
		}
		if ev.Kind == protocol.KindChunk && strings.Contains(string(ev.Data), `"tool_calls"`) {
			stopped = true
			break // the client leaves at the call
		}
	}
	if !stopped {
		t.Fatal("the guard wrote no tool call")
	}
	u.checkClosed(t)
	if len(m.usage) != 1 || !m.usage[0].Estimated {
		t.Errorf("metered usage = %+v, want one estimate", m.usage)
	}
}
