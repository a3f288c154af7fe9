package proxy_test

// End-to-end tests with the go-openai client, a real client users run,
// through the real router against the scripted upstream.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	openai "github.com/sashabaranov/go-openai"

	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

func userMessage(text string) []openai.ChatCompletionMessage {
	return []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: text}}
}

// streamResult is what a go-openai client accumulates from a stream.
type streamResult struct {
	Content, Reasoning string
	// Finishes are the finish reasons, in order: one, for a good stream.
	Finishes  []openai.FinishReason
	ToolCalls []openai.ToolCall
	Usage     *openai.Usage
	Chunks    int
	// MaxChoices is the most choices one chunk carried.
	MaxChoices int
}

// collect reads a go-openai stream to its end, accumulating tool calls by
// index as a client must: id, type and name come with the first fragment
// only, arguments in pieces.
func collect(stream *openai.ChatCompletionStream) (streamResult, error) {
	var r streamResult
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return r, nil
		}
		if err != nil {
			return r, err
		}
		r.Chunks++
		r.MaxChoices = max(r.MaxChoices, len(c.Choices))
		if c.Usage != nil {
			r.Usage = c.Usage
		}
		for _, ch := range c.Choices {
			r.Content += ch.Delta.Content
			r.Reasoning += ch.Delta.ReasoningContent
			if ch.FinishReason != "" {
				r.Finishes = append(r.Finishes, ch.FinishReason)
			}
			for _, d := range ch.Delta.ToolCalls {
				if d.Index == nil {
					return r, errors.New("tool call delta without index")
				}
				for len(r.ToolCalls) <= *d.Index {
					r.ToolCalls = append(r.ToolCalls, openai.ToolCall{})
				}
				tc := &r.ToolCalls[*d.Index]
				if d.ID != "" {
					tc.ID = d.ID
				}
				if d.Type != "" {
					tc.Type = d.Type
				}
				tc.Function.Name += d.Function.Name
				tc.Function.Arguments += d.Function.Arguments
			}
		}
	}
}

func TestOpenAIClientStream(t *testing.T) {
	t.Parallel()
	args := `{"path":"/etc/hosts","lines":[1,2,3],"note":"ünïcode \"quoted\""}`
	tests := []struct {
		name  string
		reply sim.Reply
		usage bool
		want  streamResult
	}{
		{
			name:  "reasoning then content",
			reply: sim.NewStream(testModel).Role().Reasoning("Let me ", "think.").Content("Hello", ", world").Finish("stop").Done().Reply(),
			want:  streamResult{Content: "Hello, world", Reasoning: "Let me think.", Finishes: []openai.FinishReason{openai.FinishReasonStop}, Chunks: 6, MaxChoices: 1},
		},
		{
			name: "usage with vendor fields",
			reply: sim.NewStream(testModel).Role().Content("ok").Finish("stop").
				Usage(12, 3, map[string]any{"prompt_cache_hit_tokens": 10, "prompt_tokens_details": map[string]any{"cached_tokens": 10}}).Done().Reply(),
			usage: true,
			want: streamResult{Content: "ok", Finishes: []openai.FinishReason{openai.FinishReasonStop}, Chunks: 4, MaxChoices: 1,
				Usage: &openai.Usage{PromptTokens: 12, CompletionTokens: 3, TotalTokens: 15, PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: 10}}},
		},
		{
			name: "fragmented tool calls",
			reply: sim.NewStream(testModel).Role().
				ToolCall(0, "call_a", "read_file", args[:5], args[5:17], args[17:30], args[30:]).
				ToolCall(1, "call_b", "list_dir").
				Finish("tool_calls").Done().Reply(),
			want: streamResult{Finishes: []openai.FinishReason{openai.FinishReasonToolCalls}, Chunks: 7, MaxChoices: 1, ToolCalls: []openai.ToolCall{
				{ID: "call_a", Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "read_file", Arguments: args}},
				{ID: "call_b", Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "list_dir"}},
			}},
		},
		{
			name: "keep-alives on the way",
			reply: sim.NewStream(testModel).Role().KeepAlive().KeepAlive().Content("a").KeepAlive().
				Content("b").Finish("stop").KeepAlive().Done().Reply(),
			want: streamResult{Content: "ab", Finishes: []openai.FinishReason{openai.FinishReasonStop}, Chunks: 4, MaxChoices: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up, gw := startUpstream(t, proxytest.Script(tt.reply))
			req := openai.ChatCompletionRequest{Model: testModel, Messages: userMessage("hi"), Stream: true}
			if tt.usage {
				req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
			}
			stream, err := newClient(gw).CreateChatCompletionStream(testContext(t), req)
			if err != nil {
				t.Fatalf("CreateChatCompletionStream: %v", err)
			}
			defer stream.Close()
			got, err := collect(stream)
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("client accumulated (-want +got):\n%s", diff)
			}
			if len(tt.want.ToolCalls) > 0 {
				var v map[string]any
				if err := json.Unmarshal([]byte(got.ToolCalls[0].Function.Arguments), &v); err != nil {
					t.Errorf("accumulated arguments do not parse: %v", err)
				}
			}
			if rec := up.Received(); len(rec) != 1 || rec[0].Path != "/v1/chat/completions" {
				t.Errorf("upstream got %v, want one POST /v1/chat/completions", rec)
			}
		})
	}
}

func TestOpenAIClientNonStreaming(t *testing.T) {
	t.Parallel()
	args := `{"q":"weather in Paris"}`
	tests := []struct {
		name  string
		reply sim.Reply
		want  openai.ChatCompletionMessage
		usage openai.Usage
	}{
		{
			name: "content and reasoning",
			reply: sim.Completion(testModel, map[string]any{"content": "Bonjour", "reasoning_content": "French greeting."}, "stop",
				map[string]any{"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7, "prompt_cache_hit_tokens": 4,
					"completion_tokens_details": map[string]any{"reasoning_tokens": 1}}),
			want:  openai.ChatCompletionMessage{Role: "assistant", Content: "Bonjour", ReasoningContent: "French greeting."},
			usage: openai.Usage{PromptTokens: 5, CompletionTokens: 2, TotalTokens: 7, CompletionTokensDetails: &openai.CompletionTokensDetails{ReasoningTokens: 1}},
		},
		{
			name: "tool call",
			reply: sim.Completion(testModel, map[string]any{"content": nil, "tool_calls": []any{
				map[string]any{"id": "call_1", "type": "function", "function": map[string]any{"name": "search", "arguments": args}}}}, "tool_calls",
				map[string]any{"prompt_tokens": 9, "completion_tokens": 8, "total_tokens": 17}),
			want: openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{
				{ID: "call_1", Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "search", Arguments: args}}}},
			usage: openai.Usage{PromptTokens: 9, CompletionTokens: 8, TotalTokens: 17},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, gw := startUpstream(t, proxytest.Script(tt.reply))
			resp, err := newClient(gw).CreateChatCompletion(testContext(t), openai.ChatCompletionRequest{Model: testModel, Messages: userMessage("hi")})
			if err != nil {
				t.Fatalf("CreateChatCompletion: %v", err)
			}
			if len(resp.Choices) != 1 {
				t.Fatalf("got %d choices, want 1", len(resp.Choices))
			}
			if diff := cmp.Diff(tt.want, resp.Choices[0].Message); diff != "" {
				t.Errorf("message (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.usage, resp.Usage); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			if resp.Header().Get("X-Request-Id") == "" {
				t.Errorf("no X-Request-Id on the response")
			}
		})
	}
}

// TestOpenAIClientRawBodySurvives checks a non-streaming body reaches the
// client byte for byte, vendor fields and all.
func TestOpenAIClientRawBodySurvives(t *testing.T) {
	t.Parallel()
	body := `{"id":"c1","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":"<ok> & \u00e9","x_msg":[1,  2]},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2,"prompt_cache_hit_tokens":1,"prompt_cache_miss_tokens":0},"x_vendor":{"a":null}}`
	_, gw := startUpstream(t, proxytest.Script(sim.Reply{Body: []byte(body)}))
	resp := post(t, testContext(t), gw, "/v1/chat/completions", chatBody(false), nil)
	if got := string(readAll(t, resp.Body)); got != body {
		t.Errorf("body = %s\nwant   %s", got, body)
	}
}

// TestRequestBodySurvives checks the request reaches the upstream byte for
// byte: unknown fields, a zero temperature, DeepSeek's thinking switch,
// reasoning_content on an assistant tool-call message, key order.
func TestRequestBodySurvives(t *testing.T) {
	t.Parallel()
	body := `{"temperature":0,"model":"deepseek-v4-flash","thinking":{"type":"enabled"},"messages":[` +
		`{"role":"user","content":"hi","x_msg":{"k":[1, 2.0]}},` +
		`{"role":"assistant","content":null,"reasoning_content":"I should look.","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"<result> & more"}],` +
		`"stream":true,"stream_options":{"include_usage":true},"x_vendor":"\u00e9","top_p":1.0}`
	up, gw := startUpstream(t, proxytest.Script(sim.NewStream("deepseek-v4-flash").Role().Content("ok").Finish("stop").Done().Reply()))
	resp := post(t, testContext(t), gw, "/v1/chat/completions", body, nil)
	readAll(t, resp.Body)
	rec := up.Received()
	if len(rec) != 1 {
		t.Fatalf("upstream got %d requests, want 1", len(rec))
	}
	if got := string(rec[0].Body); got != body {
		t.Errorf("upstream body = %s\nwant             %s", got, body)
	}
	if got := rec[0].Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("upstream Content-Type = %q, want application/json", got)
	}
}

// TestOpenAIClientUpstreamError checks an upstream error reaches the
// client as the *openai.APIError it would get from OpenAI itself.
func TestOpenAIClientUpstreamError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		stream bool
		reply  sim.Reply
		status int
		code   any
		typ    string
		msg    string
	}{
		{name: "rate limited", reply: sim.Error(429, "Rate limit reached", "rate_limit_error", "rate_limit_exceeded"), status: 429, code: "rate_limit_exceeded", typ: "rate_limit_error", msg: "Rate limit reached"},
		{name: "rate limited stream", stream: true, reply: sim.Error(429, "Rate limit reached", "rate_limit_error", "rate_limit_exceeded"), status: 429, code: "rate_limit_exceeded", typ: "rate_limit_error", msg: "Rate limit reached"},
		{name: "bad key", reply: sim.Error(401, "Incorrect API key", "invalid_request_error", "invalid_api_key"), status: 401, code: "invalid_api_key", typ: "invalid_request_error", msg: "Incorrect API key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, gw := startUpstream(t, proxytest.Script(tt.reply))
			c := newClient(gw)
			req := openai.ChatCompletionRequest{Model: testModel, Messages: userMessage("hi"), Stream: tt.stream}
			var err error
			if tt.stream {
				var s *openai.ChatCompletionStream
				s, err = c.CreateChatCompletionStream(testContext(t), req)
				if err == nil {
					s.Close()
				}
			} else {
				_, err = c.CreateChatCompletion(testContext(t), req)
			}
			var apiErr *openai.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("error = %v (%T), want an *openai.APIError", err, err)
			}
			if apiErr.HTTPStatusCode != tt.status || apiErr.Code != tt.code || apiErr.Type != tt.typ || apiErr.Message != tt.msg {
				t.Errorf("APIError = {status %d, code %v, type %q, message %q}, want {%d, %v, %q, %q}",
					apiErr.HTTPStatusCode, apiErr.Code, apiErr.Type, apiErr.Message, tt.status, tt.code, tt.typ, tt.msg)
			}
		})
	}
}

// TestOpenAIClientGatewayError checks the gateway's own errors read as an
// *openai.APIError too, before a stream and inside one.
func TestOpenAIClientGatewayError(t *testing.T) {
	t.Parallel()
	t.Run("before the stream", func(t *testing.T) {
		t.Parallel()
		gw := newGateway(t, config(closedServer(t)))
		_, err := newClient(gw).CreateChatCompletionStream(testContext(t), openai.ChatCompletionRequest{Model: testModel, Messages: userMessage("hi"), Stream: true})
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) {
			t.Fatalf("error = %v (%T), want an *openai.APIError", err, err)
		}
		if apiErr.HTTPStatusCode != http.StatusBadGateway || apiErr.Code != "upstream_unreachable" {
			t.Errorf("APIError = {status %d, code %v}, want {502, upstream_unreachable}", apiErr.HTTPStatusCode, apiErr.Code)
		}
	})
	t.Run("inside a truncated stream", func(t *testing.T) {
		t.Parallel()
		_, gw := startUpstream(t, proxytest.Script(sim.Reply{Events: sim.NewStream(testModel).Role().Content("half an ").Events(), Cut: true}))
		stream, err := newClient(gw).CreateChatCompletionStream(testContext(t), openai.ChatCompletionRequest{Model: testModel, Messages: userMessage("hi"), Stream: true})
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		got, err := collect(stream)
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) {
			t.Fatalf("error = %v (%T), want an *openai.APIError", err, err)
		}
		if apiErr.Code != "upstream_truncated" {
			t.Errorf("APIError code = %v, want upstream_truncated", apiErr.Code)
		}
		if got.Content != "half an " {
			t.Errorf("content before the error = %q, want %q", got.Content, "half an ")
		}
	})
}

// TestOpenAIClientDisconnectCancelsUpstream checks a client that gives up
// cancels the upstream call at once, mid-stream or waiting for an answer.
func TestOpenAIClientDisconnectCancelsUpstream(t *testing.T) {
	t.Parallel()
	t.Run("mid-stream", func(t *testing.T) {
		t.Parallel()
		up, gw := startUpstream(t, proxytest.Script(sim.Reply{Events: sim.NewStream(testModel).Role().Content("thinking...").Events(), Hang: true}))
		ctx, cancel := context.WithCancel(testContext(t))
		defer cancel()
		stream, err := newClient(gw).CreateChatCompletionStream(ctx, openai.ChatCompletionRequest{Model: testModel, Messages: userMessage("hi"), Stream: true})
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		for range 2 {
			if _, err := stream.Recv(); err != nil {
				t.Fatalf("Recv: %v", err)
			}
		}
		cancel()
		waitCancelled(t, up)
	})
	t.Run("waiting for a non-streaming answer", func(t *testing.T) {
		t.Parallel()
		arrived := make(chan struct{}, 1)
		up, gw := startUpstream(t, func(proxytest.Received) sim.Reply {
			arrived <- struct{}{}
			return sim.Reply{Hang: true}
		})
		ctx, cancel := context.WithCancel(testContext(t))
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			_, err := newClient(gw).CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: testModel, Messages: userMessage("hi")})
			errc <- err
		}()
		select {
		case <-arrived:
		case <-ctx.Done():
			t.Fatal("the request never reached the upstream")
		}
		cancel()
		waitCancelled(t, up)
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("client error = %v, want context.Canceled", err)
		}
	})
}

// TestOpenAIClientModels checks the model list reads with go-openai.
func TestOpenAIClientModels(t *testing.T) {
	t.Parallel()
	_, gw := startUpstream(t, proxytest.Simulated())
	list, err := newClient(gw).ListModels(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Models {
		ids = append(ids, m.ID)
	}
	if !strings.Contains(strings.Join(ids, ","), sim.Model) {
		t.Errorf("models = %v, want %s among them", ids, sim.Model)
	}
}
