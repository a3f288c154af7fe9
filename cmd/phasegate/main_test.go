package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/goleak"

	"github.com/phasegate/phasegate/internal/gather"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// runMainEnv, set to 1, makes the test binary run the gateway's main
// instead of the tests: TestProcessShutdown starts it so, as a process of
// its own, and signals it.
const runMainEnv = "PHASEGATE_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main() // exits 1 on error
		os.Exit(0)
	}
	// TestRunReadHeaderTimeout waits this long; the gateway's own is 10s.
	readHeaderTimeout = time.Second
	proxy.ReleaseMode()
	goleak.VerifyTestMain(m)
}

// wait bounds every wait of these tests.
const wait = 10 * time.Second

// logBuffer collects run's log lines and tells when one contains a
// phrase. It is safe for concurrent use.
type logBuffer struct {
	mu      sync.Mutex
	b       strings.Builder
	waiters map[string]chan struct{}
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	for phrase, ch := range l.waiters {
		if strings.Contains(l.b.String(), phrase) {
			close(ch)
			delete(l.waiters, phrase)
		}
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// logged returns a channel closed once a line contains phrase.
func (l *logBuffer) logged(phrase string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan struct{})
	if strings.Contains(l.b.String(), phrase) {
		close(ch)
		return ch
	}
	if l.waiters == nil {
		l.waiters = map[string]chan struct{}{}
	}
	l.waiters[phrase] = ch
	return ch
}

// gateway is one run of the command.
type gateway struct {
	addr   string
	url    string
	log    *logBuffer
	cancel context.CancelFunc
	// interrupt ends the run with a cause, as a signal does.
	interrupt context.CancelCauseFunc
	done      chan error
}

// start runs the command with args and environment e (LISTEN_ADDR
// defaults to a free loopback port, SHUTDOWN_DRAIN_DELAY to 0) until the
// test ends.
func start(t *testing.T, args []string, e map[string]string) *gateway {
	t.Helper()
	return startLogging(t, args, e, gather.DefaultDelay)
}

// startLogging is start with the log's lines gathered for delay before
// they are written.
func startLogging(t *testing.T, args []string, e map[string]string, delay time.Duration) *gateway {
	t.Helper()
	return startHooked(t, args, e, runHooks{logDelay: delay})
}

// startHooked is start with the run's hooks (its own listening hook is
// set here).
func startHooked(t *testing.T, args []string, e map[string]string, hooks runHooks) *gateway {
	t.Helper()
	full := map[string]string{"LISTEN_ADDR": "127.0.0.1:0", "LOG_LEVEL": "info", "SHUTDOWN_DRAIN_DELAY": "0"}
	for k, v := range e {
		full[k] = v
	}
	g := &gateway{log: &logBuffer{}, done: make(chan error, 1)}
	var ctx context.Context
	ctx, g.interrupt = context.WithCancelCause(context.Background())
	g.cancel = func() { g.interrupt(nil) }

	addrc := make(chan net.Addr, 1)
	hooks.listening = func(a net.Addr) { addrc <- a }
	go func() { g.done <- run(ctx, args, env(full), io.Discard, g.log, hooks) }()
	select {
	case a := <-addrc:
		g.addr = a.String()
	case err := <-g.done:
		g.cancel()
		t.Fatalf("run ended before listening: %v\n%s", err, g.log)
	case <-time.After(wait):
		g.cancel()
		t.Fatalf("run never listened\n%s", g.log)
	}

	g.url = "http://" + g.addr
	t.Cleanup(func() {
		g.cancel()
		select {
		case <-g.done:
		case <-time.After(wait):
			t.Errorf("run did not return after its context ended")
		}
	})
	return g
}

// stop cancels the run's context and returns what run returned.
func (g *gateway) stop(t *testing.T) error {
	t.Helper()
	g.cancel()
	select {
	case err := <-g.done:
		g.done <- err // for the cleanup
		return err
	case <-time.After(wait):
		t.Fatalf("run did not return after its context ended")
		return nil
	}
}

func (g *gateway) client() *openai.Client {
	c := openai.DefaultConfig("sk-client")
	c.BaseURL = g.url + "/v1"
	c.EmptyMessagesLimit = 1 << 20
	return openai.NewClientWithConfig(c)
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// streamed accumulates a go-openai stream, tool calls by index.
func streamed(t *testing.T, s *openai.ChatCompletionStream) (content string, calls []openai.ToolCall, finish openai.FinishReason) {
	t.Helper()
	for {
		c, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return content, calls, finish
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		for _, ch := range c.Choices {
			content += ch.Delta.Content
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
			for _, d := range ch.Delta.ToolCalls {
				for len(calls) <= *d.Index {
					calls = append(calls, openai.ToolCall{})
				}
				tc := &calls[*d.Index]
				if d.ID != "" {
					tc.ID, tc.Type = d.ID, d.Type
				}
				tc.Function.Name += d.Function.Name
				tc.Function.Arguments += d.Function.Arguments
			}
		}
	}
}

// TestRunSimulated serves the built-in simulated model end to end, as a
// user who configured nothing gets it: listed, streaming a tool call, and
// answering from the tool's result.
func TestRunSimulated(t *testing.T) {
	t.Parallel()
	g := start(t, nil, nil)
	ctx := testContext(t)
	c := g.client()

	models, err := c.ListModels(ctx)
	if err != nil {
		t.Fatalf("ListModels: %v", err)
	}
	var ids []string
	for _, m := range models.Models {
		ids = append(ids, m.ID)
	}
	if !strings.Contains(","+strings.Join(ids, ",")+",", ","+sim.Model+",") {
		t.Errorf("models = %v, want %s among them", ids, sim.Model)
	}

	tool := openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "get_weather",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}
	msgs := []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "Weather in Paris?"}}
	s, err := c.CreateChatCompletionStream(ctx, openai.ChatCompletionRequest{Model: sim.Model, Messages: msgs, Tools: []openai.Tool{tool}, Stream: true})
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	_, calls, finish := streamed(t, s)
	s.Close()
	want := []openai.ToolCall{{ID: "call_sim_1", Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "get_weather", Arguments: `{"city":"example"}`}}}
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("tool calls (-want +got):\n%s", diff)
	}
	if finish != openai.FinishReasonToolCalls {
		t.Errorf("finish = %q, want tool_calls", finish)
	}

	msgs = append(msgs,
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: calls},
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: "call_sim_1", Content: "Sunny, 21°C"})
	s, err = c.CreateChatCompletionStream(ctx, openai.ChatCompletionRequest{Model: sim.Model, Messages: msgs, Tools: []openai.Tool{tool}, Stream: true})
	if err != nil {
		t.Fatalf("second stream: %v", err)
	}
	content, calls, finish := streamed(t, s)
	s.Close()
	if !strings.Contains(content, "Sunny, 21°C") || len(calls) != 0 || finish != openai.FinishReasonStop {
		t.Errorf("answer = %q, %d calls, finish %q; want the tool result, no call, stop", content, len(calls), finish)
	}

	hello := openai.ChatCompletionRequest{Model: "any-model", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hello"}}}
	resp, err := c.CreateChatCompletion(ctx, hello)
	if err != nil {
		t.Fatalf("non-streaming: %v", err)
	}
	if got := resp.Choices[0].Message.Content; !strings.Contains(got, "You said: hello") {
		t.Errorf("answer = %q, want the simulated echo", got)
	}
	again, err := c.CreateChatCompletion(ctx, hello)
	if err != nil {
		t.Fatalf("non-streaming again: %v", err)
	}
	if !strings.HasPrefix(resp.ID, "chatcmpl-") || again.ID == resp.ID {
		t.Errorf("answer ids = %q then %q, want a fresh chatcmpl- id each", resp.ID, again.ID)
	}
	if !strings.Contains(g.log.String(), "SIMULATED") {
		t.Errorf("no warning that the simulated model is served in the log:\n%s", g.log)
	}
	if err := g.stop(t); err != nil {
		t.Errorf("run = %v, want nil after a graceful shutdown", err)
	}
}

// TestRunUpstreams wires two upstream doubles by the environment: models
// are merged, chat and other /v1/* requests are routed by model, and the
// gateway's key is sent.
func TestRunUpstreams(t *testing.T) {
	t.Parallel()
	models := func(ids ...string) sim.Reply {
		var data []string
		for _, id := range ids {
			data = append(data, `{"id":"`+id+`","object":"model","created":1,"owned_by":"x"}`)
		}
		return sim.Reply{Body: []byte(`{"object":"list","data":[` + strings.Join(data, ",") + `]}`)}
	}
	respond := func(list sim.Reply) proxytest.Responder {
		return func(r proxytest.Received) sim.Reply {
			switch {
			case strings.HasSuffix(r.Path, "/models"):
				return list
			case strings.HasSuffix(r.Path, "/embeddings"):
				return sim.Reply{Body: []byte(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[1]}],"model":"m","usage":{"prompt_tokens":1,"total_tokens":1}}`)}
			}
			return sim.NewStream("m").Role().Content("from " + r.Path).Finish("stop").Done().Reply()
		}
	}
	ds, dsrv := proxytest.NewServer(t, respond(models("deepseek-v4-flash", "deepseek-v4-pro")))
	oa, osrv := proxytest.NewServer(t, respond(models("gpt-5")))
	g := start(t, nil, map[string]string{
		"DEEPSEEK_BASE_URL": dsrv.URL, "DEEPSEEK_API_KEY": secretEnv,
		"OPENAI_BASE_URL": osrv.URL + "/v1",
	})
	ctx := testContext(t)
	c := g.client()

	list, err := c.ListModels(ctx)
	if err != nil {
		t.Fatalf("ListModels: %v", err)
	}
	var ids []string
	for _, m := range list.Models {
		ids = append(ids, m.ID)
	}
	sort.Strings(ids)
	if diff := cmp.Diff([]string{"deepseek-v4-flash", "deepseek-v4-pro", "gpt-5"}, ids); diff != "" {
		t.Errorf("merged models (-want +got):\n%s", diff)
	}

	for _, model := range []string{"deepseek-v4-flash", "gpt-5"} {
		s, err := c.CreateChatCompletionStream(ctx, openai.ChatCompletionRequest{Model: model, Stream: true,
			Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}}})
		if err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		content, _, _ := streamed(t, s)
		s.Close()
		if content == "" {
			t.Errorf("%s: empty answer", model)
		}
	}
	if _, err := c.CreateEmbeddings(ctx, openai.EmbeddingRequest{Model: "deepseek-embed", Input: []string{"x"}}); err != nil {
		t.Fatalf("embeddings: %v", err)
	}

	type call struct{ Method, Path, Auth string }
	calls := func(up *proxytest.Upstream) []call {
		var out []call
		for _, r := range up.Received() {
			out = append(out, call{r.Method, r.Path, r.Header.Get("Authorization")})
		}
		return out
	}
	wantDS := []call{{"GET", "/models", "Bearer " + secretEnv}, {"POST", "/chat/completions", "Bearer " + secretEnv}, {"POST", "/embeddings", "Bearer " + secretEnv}}
	if diff := cmp.Diff(wantDS, calls(ds)); diff != "" {
		t.Errorf("deepseek got (-want +got):\n%s", diff)
	}
	wantOA := []call{{"GET", "/v1/models", "Bearer sk-client"}, {"POST", "/v1/chat/completions", "Bearer sk-client"}}
	if diff := cmp.Diff(wantOA, calls(oa)); diff != "" {
		t.Errorf("openai got (-want +got):\n%s", diff)
	}
	if strings.Contains(g.log.String(), secretEnv) {
		t.Errorf("the log shows the key:\n%s", g.log)
	}
}

// refusesConnections waits, without sleeping, until nothing accepts
// connections at addr: the server closed its listener.
func refusesConnections(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return
		}
		conn.Close()
	}
	t.Fatalf("%s still accepts connections", addr)
}

// TestRunShutdownDrains checks a shutdown lets an in-flight stream finish
// while refusing new connections.
func TestRunShutdownDrains(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	stream := sim.NewStream("gpt-5").Role().Content("all ", "of ", "it").Finish("stop").Done()
	_, usrv := proxytest.NewServer(t, func(proxytest.Received) sim.Reply {
		arrived <- struct{}{}
		<-release
		return stream.Reply()
	})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the double's Close
	g := start(t, nil, map[string]string{"OPENAI_BASE_URL": usrv.URL + "/v1", "SHUTDOWN_TIMEOUT": "1m"})

	req, _ := http.NewRequestWithContext(testContext(t), http.MethodPost, g.url+"/standard/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-5","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	type result struct {
		body string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- result{string(b), err}
	}()
	select {
	case <-arrived:
	case <-time.After(wait):
		t.Fatal("the request never reached the upstream")
	}

	shutting := g.log.logged("shutting down")
	g.cancel()
	select {
	case <-shutting:
	case <-time.After(wait):
		t.Fatal("run never started shutting down")
	}
	refusesConnections(t, g.addr)
	once.Do(func() { close(release) })

	r := <-got
	if r.err != nil {
		t.Fatalf("in-flight stream: %v", r.err)
	}
	var want strings.Builder
	for _, ev := range stream.Events() {
		want.WriteString("data: " + ev.Data + "\n\n")
	}
	if r.body != want.String() {
		t.Errorf("in-flight stream got\n%s\nwant\n%s", r.body, want.String())
	}
	if err := g.stop(t); err != nil {
		t.Errorf("run = %v, want nil", err)
	}
	if strings.Contains(g.log.String(), "grace ran out") {
		t.Errorf("the drain ran out of time:\n%s", g.log)
	}
}

// TestRunDrainDelay checks a shutdown first turns /readyz to 503 for
// SHUTDOWN_DRAIN_DELAY while the listener still accepts and serves, so a
// load balancer sees the gateway leave, and closes the listener only after
// the delay.
func TestRunDrainDelay(t *testing.T) {
	t.Parallel()
	const delay = 2 * time.Second // long enough for two requests on a loaded machine
	g := start(t, nil, map[string]string{"SHUTDOWN_DRAIN_DELAY": delay.String()})
	// No keep-alive: every request dials, so every answer shows the
	// listener still accepts.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(testContext(t), http.MethodGet, g.url+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if got := get("/readyz"); got != http.StatusOK {
		t.Fatalf("/readyz before the signal = %d, want 200", got)
	}

	draining, shutting := g.log.logged("draining"), g.log.logged("shutting down")
	signalled := time.Now()
	g.cancel()
	select {
	case <-draining: // logged once /readyz says 503
	case <-time.After(wait):
		t.Fatalf("run never started draining\n%s", g.log)
	}
	if got := get("/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz while draining = %d, want 503", got)
	}
	if got := get("/healthz"); got != http.StatusOK {
		t.Errorf("/healthz while draining = %d, want 200: the gateway still serves", got)
	}

	select {
	case <-shutting:
	case <-time.After(wait):
		t.Fatalf("run never shut down after the drain delay\n%s", g.log)
	}
	if elapsed := time.Since(signalled); elapsed < delay {
		t.Errorf("the shutdown started %v after the signal, want no sooner than the %v drain delay", elapsed, delay)
	}
	refusesConnections(t, g.addr)
	if err := g.stop(t); err != nil {
		t.Errorf("run = %v, want nil", err)
	}
}

// TestRunInteractiveInterruptSkipsDrain: Ctrl-C in a terminal stops the
// gateway at once, however long SHUTDOWN_DRAIN_DELAY is; a signal from
// elsewhere (a container's SIGTERM) still drains first.
func TestRunInteractiveInterruptSkipsDrain(t *testing.T) {
	t.Parallel()
	g := start(t, nil, map[string]string{"SHUTDOWN_DRAIN_DELAY": "1h"})
	draining := g.log.logged("draining")
	g.interrupt(errInteractiveInterrupt)
	select {
	case err := <-g.done:
		if err != nil {
			t.Errorf("run = %v, want nil", err)
		}
		g.done <- err // for the cleanup's stop
	case <-time.After(wait):
		t.Fatalf("run still draining after an interrupt in a terminal, with a drain delay of 1h\n%s", g.log)
	}
	select {
	case <-draining:
	default:
		t.Errorf("run did not log its drain\n%s", g.log)
	}
	if !strings.Contains(g.log.String(), `"delay":"0s"`) {
		t.Errorf("the drain's log line does not say it waits 0s:\n%s", g.log)
	}
}

// TestSignalContext: the first SIGINT ends the context, with the cause of
// an interrupt in a terminal only when interactive; SIGTERM never has it.
func TestSignalContext(t *testing.T) {
	for _, tc := range []struct {
		sig         syscall.Signal
		interactive bool
		want        bool
	}{
		{syscall.SIGINT, true, true},
		{syscall.SIGINT, false, false},
		{syscall.SIGTERM, true, false},
	} {
		ctx, stop := signalContext(tc.interactive)
		if err := syscall.Kill(os.Getpid(), tc.sig); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
			t.Fatalf("%v: the context did not end", tc.sig)
		}
		if got := errors.Is(context.Cause(ctx), errInteractiveInterrupt); got != tc.want {
			t.Errorf("%v, interactive %v: cause %v, want an interactive interrupt %v", tc.sig, tc.interactive, context.Cause(ctx), tc.want)
		}
		stop()
	}
}

// TestRunShutdownLimit checks a stream that outlives the shutdown grace is
// cut, and its upstream call cancelled, once the grace runs out.
func TestRunShutdownLimit(t *testing.T) {
	t.Parallel()
	up, usrv := proxytest.NewServer(t, proxytest.Script(sim.Reply{Events: sim.NewStream("gpt-5").Role().Content("Once").Events(), Hang: true}))
	g := start(t, nil, map[string]string{"OPENAI_BASE_URL": usrv.URL + "/v1", "SHUTDOWN_TIMEOUT": "200ms"})

	req, _ := http.NewRequestWithContext(testContext(t), http.MethodPost, g.url+"/standard/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-5","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line = %q, %v; want the first event", line, err)
	}

	if err := g.stop(t); err != nil {
		t.Errorf("run = %v, want nil", err)
	}
	select {
	case <-up.Cancelled():
	case <-time.After(wait):
		t.Fatal("the upstream call outlived the shutdown")
	}
	if !strings.Contains(g.log.String(), "grace ran out") {
		t.Errorf("no log line for the cut streams:\n%s", g.log)
	}
}

// TestRunReadHeaderTimeout checks a client that never finishes its headers
// is dropped: ReadHeaderTimeout is set. It waits out the 10s bound, in
// parallel with the other tests.
func TestRunReadHeaderTimeout(t *testing.T) {
	t.Parallel()
	g := start(t, nil, nil)
	conn, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(readHeaderTimeout + wait))
	_, err = io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server still holds a connection whose headers never came")
	}
}

// TestRunFails checks run reports what keeps it from serving.
func TestRunFails(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name   string
		env    map[string]string
		wantIn string
	}{
		{name: "invalid configuration", env: map[string]string{"LISTEN_ADDR": "127.0.0.1:0", "MAX_PHASE_CYCLES": "-1"}, wantIn: "MAX_PHASE_CYCLES"},
		{name: "address in use", env: map[string]string{"LISTEN_ADDR": busy.Addr().String()}, wantIn: "listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(testContext(t), nil, env(tt.env), io.Discard, io.Discard, runHooks{})
			if err == nil || !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("run = %v, want an error naming %q", err, tt.wantIn)
			}
		})
	}
}

// TestRunClientKeys: PHASEGATE_API_KEYS gates the gateway: without one of
// its keys a request gets a 401, with one the simulated model answers, a
// key's project is the request's (the guard signs calls with it, so the
// request declares a tool), and no key reaches the log.
func TestRunClientKeys(t *testing.T) {
	const key, projectKey = "pg-test-key-alpha", "pg-test-key-beta"
	g := start(t, nil, map[string]string{"PHASEGATE_API_KEYS": key + ", " + projectKey + ":proj-beta"})
	ask := func(auth string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, g.url+"/v1/chat/completions",
			strings.NewReader(`{"model":"phasegate-sim","messages":[{"role":"user","content":"hi"}],`+
				`"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object"}}}]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Project-Id", "proj-forged")
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := ask(""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a key: %d, want 401", resp.StatusCode)
	}
	if resp := ask("sk-someone-else"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("with a wrong key: %d, want 401", resp.StatusCode)
	}
	if resp := ask(key); resp.StatusCode != http.StatusOK || resp.Header.Get("X-Phasegate-Project-Id") != "key-1" {
		t.Errorf("with a key bound to no project: %d, project %q; want 200 and key-1, its own", resp.StatusCode, resp.Header.Get("X-Phasegate-Project-Id"))
	}
	if resp := ask(projectKey); resp.StatusCode != http.StatusOK || resp.Header.Get("X-Phasegate-Project-Id") != "proj-beta" {
		t.Errorf("with a project's key: %d, project %q; want 200 and proj-beta", resp.StatusCode, resp.Header.Get("X-Phasegate-Project-Id"))
	}
	// With client keys and no listener of its own, /metrics asks for the
	// admin key (METRICS_REQUIRE_ADMIN_KEY=auto).
	resp, err := http.Get(g.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/metrics with client keys: %d, want 401", resp.StatusCode)
	}
	if err := g.stop(t); err != nil {
		t.Fatal(err)
	}
	if log := g.log.String(); strings.Contains(log, key) || strings.Contains(log, projectKey) {
		t.Errorf("a client key reached the log:\n%s", log)
	}
}

// TestRunAdminListener: with ADMIN_LISTEN_ADDR, /metrics is served on its
// own listener and no longer beside the client routes.
func TestRunAdminListener(t *testing.T) {
	adminc := make(chan net.Addr, 1)
	g := startHooked(t, nil, map[string]string{"ADMIN_LISTEN_ADDR": "127.0.0.1:0"},
		runHooks{logDelay: gather.DefaultDelay, adminListening: func(a net.Addr) { adminc <- a }})
	var admin string
	select {
	case a := <-adminc:
		admin = "http://" + a.String()
	case <-time.After(wait):
		t.Fatal("the admin routes never listened")
	}
	status := func(url string) int {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status(admin + "/metrics"); got != http.StatusOK {
		t.Errorf("admin /metrics = %d, want 200", got)
	}
	if got := status(g.url + "/metrics"); got != http.StatusNotFound {
		t.Errorf("client-side /metrics = %d, want 404", got)
	}
	if got := status(admin + "/readyz"); got != http.StatusOK {
		t.Errorf("admin /readyz = %d, want 200", got)
	}
	if err := g.stop(t); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(admin + "/healthz"); err == nil {
		t.Errorf("the admin listener still answers after the gateway stopped")
	}
}

// TestRunShutdownEndsStreams: a stream still running when the shutdown
// grace runs out ends with an in-band error (shutting_down) and [DONE],
// not a cut connection, and run returns nil (the process exits 0).
func TestRunShutdownEndsStreams(t *testing.T) {
	// An upstream that starts answering, then holds the stream open.
	_, usrv := proxytest.NewServer(t, func(proxytest.Received) sim.Reply {
		return sim.NewStream("deepseek-v4-flash").Role().Content("partial").Delay(wait).Finish("stop").Done().Reply()
	})
	g := start(t, nil, map[string]string{"DEEPSEEK_BASE_URL": usrv.URL, "PROVIDERS": "deepseek", "SHUTDOWN_TIMEOUT": "300ms"})
	req, err := http.NewRequest(http.MethodPost, g.url+"/standard/v1/chat/completions",
		strings.NewReader(`{"model":"deepseek-v4-flash","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || !strings.Contains(line, "data:") {
		t.Fatalf("first line %q (%v), want the stream started", line, err)
	}
	g.cancel() // the signal
	rest, _ := io.ReadAll(r)
	if !strings.Contains(string(rest), `"code":"shutting_down"`) || !strings.Contains(string(rest), "data: [DONE]") {
		t.Errorf("the stream ended with %q, want an in-band shutting_down error and [DONE]", rest)
	}
	if err := g.stop(t); err != nil {
		t.Errorf("run returned %v, want nil", err)
	}
}

// TestRunShutdownUnanswered: a request whose upstream has not answered when
// the shutdown grace runs out gets a 503 in OpenAI's shape (code
// shutting_down), streamed or not, and run returns nil.
func TestRunShutdownUnanswered(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 2)
	release := make(chan struct{})
	_, usrv := proxytest.NewServer(t, func(proxytest.Received) sim.Reply {
		arrived <- struct{}{}
		<-release
		return sim.NewStream("gpt-5").Role().Content("late").Finish("stop").Done().Reply()
	})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the double's Close
	g := start(t, nil, map[string]string{"OPENAI_BASE_URL": usrv.URL + "/v1", "SHUTDOWN_TIMEOUT": "300ms"})

	type result struct {
		status int
		body   string
		err    error
	}
	send := func(stream bool) <-chan result {
		got := make(chan result, 1)
		body := fmt.Sprintf(`{"model":"gpt-5","stream":%t,"messages":[{"role":"user","content":"hi"}]}`, stream)
		req, _ := http.NewRequestWithContext(testContext(t), http.MethodPost, g.url+"/v1/chat/completions", strings.NewReader(body))
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				got <- result{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			got <- result{resp.StatusCode, string(b), err}
		}()
		return got
	}
	results := map[bool]<-chan result{false: send(false), true: send(true)}
	for range results {
		select {
		case <-arrived:
		case <-time.After(wait):
			t.Fatalf("the requests never reached the upstream\n%s", g.log)
		}
	}

	if err := g.stop(t); err != nil {
		t.Errorf("run = %v, want nil", err)
	}
	for stream, got := range results {
		var r result
		select {
		case r = <-got:
		case <-time.After(wait):
			t.Fatalf("stream=%t: no answer after the shutdown", stream)
		}
		var e struct {
			Error struct{ Type, Code, Message string }
		}
		if r.err != nil || r.status != http.StatusServiceUnavailable || json.Unmarshal([]byte(r.body), &e) != nil ||
			e.Error.Code != "shutting_down" || e.Error.Message == "" {
			t.Errorf("stream=%t: got %d %q (%v), want a 503 with an OpenAI-style shutting_down error", stream, r.status, r.body, r.err)
		}
	}
}
