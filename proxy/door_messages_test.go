package proxy_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// Anthropic's Messages API through the gateway, with the Anthropic Go
// SDK as the client, on the simulated models.

// msGateway serves the guard (the default protocol of /v1) in front of
// an upstream answering with respond, one provider "deepseek" (the
// DeepSeek dialect: thinking blocks go back as reasoning_content), with
// cfg's other fields; its metrics are on the returned registry.
func msGateway(t *testing.T, respond proxytest.Responder, cfg proxy.Config) (*proxytest.Upstream, *httptest.Server, *prometheus.Registry) {
	t.Helper()
	up, usrv := proxytest.NewServer(t, respond)
	cfg.Providers = []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}
	if len(cfg.ClientKeys) > 0 {
		cfg.Providers[0].APIKey = "sk-upstream"
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, []string{"deepseek"})
	gw := serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, Metrics: m, Gatherer: reg,
		Tokens: tkCounter(t), TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{Metrics: m}, nil)})
	return up, gw, reg
}

// msClient is an Anthropic client of the gateway at base (its URL, or a
// protocol route of it), with key as its x-api-key, reading nothing of
// the environment and never retrying.
func msClient(base, key string, opts ...option.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]option.RequestOption{option.WithoutEnvironmentDefaults(), option.WithBaseURL(base),
		option.WithAPIKey(key), option.WithMaxRetries(0)}, opts...)...)
}

// msWeather is a custom tool.
var msWeather = anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "get_weather", Description: anthropic.String("The weather in a city"),
	InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}}}}

// msSend sends params once, streamed (and accumulated as the SDK does) or
// not.
func msSend(t *testing.T, c anthropic.Client, stream bool, params anthropic.MessageNewParams, opts ...option.RequestOption) (*anthropic.Message, error) {
	t.Helper()
	ctx := proxytest.Context(t)
	if !stream {
		return c.Messages.New(ctx, params, opts...)
	}
	s := c.Messages.NewStreaming(ctx, params, opts...)
	defer s.Close()
	var m anthropic.Message
	for s.Next() {
		if err := m.Accumulate(s.Current()); err != nil {
			return nil, err
		}
	}
	return &m, s.Err()
}

// msText is the text of m's text blocks.
func msText(m *anthropic.Message) string {
	var b strings.Builder
	for _, bl := range m.Content {
		if bl.Type == "text" {
			b.WriteString(bl.Text)
		}
	}
	return b.String()
}

// msAgent plays an agent on model: it sends the question and its whole
// history each turn, with one tool (msWeather), runs every tool_use it
// gets (each answered "sunny"), and stops at an answer with no tool_use or after maxTurns.
// It returns the calls it ran and the answer.
func msAgent(t *testing.T, c anthropic.Client, model string, stream bool, maxTurns int) (ran []string, answer string) {
	t.Helper()
	msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What's the weather in Paris?"))}
	tools := []anthropic.ToolUnionParam{msWeather}
	for range maxTurns {
		m, err := msSend(t, c, stream, anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 1024, Messages: msgs, Tools: tools})
		if err != nil {
			t.Fatalf("turn %d: %v", len(msgs), err)
		}
		msgs = append(msgs, m.ToParam())
		var results []anthropic.ContentBlockParamUnion
		for _, b := range m.Content {
			if b.Type == "tool_use" {
				ran = append(ran, b.Name+string(b.Input))
				results = append(results, anthropic.NewToolResultBlock(b.ID, "sunny", false))
			}
		}
		if len(results) == 0 {
			if m.StopReason != anthropic.StopReasonEndTurn {
				t.Errorf("an answer without tool_use stopped for %q", m.StopReason)
			}
			return ran, msText(m)
		}
		if m.StopReason != anthropic.StopReasonToolUse {
			t.Errorf("an answer with tool_use stopped for %q", m.StopReason)
		}
		msgs = append(msgs, anthropic.NewUserMessage(results...))
	}
	return ran, ""
}

// A streamed answer accumulates, with the SDK's own accumulator, into the
// message a whole answer is: the same blocks, stop reason and usage.
func TestMessagesSDKNewAndStream(t *testing.T) {
	_, gw, reg := msGateway(t, proxytest.Simulated(), proxy.Config{})
	c := msClient(gw.URL, "sk-client")
	params := anthropic.MessageNewParams{Model: sim.Model, MaxTokens: 256,
		System:   []anthropic.TextBlockParam{{Text: "Be brief."}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello there"))}}
	whole, err := msSend(t, c, false, params)
	if err != nil {
		t.Fatal(err)
	}
	streamed, err := msSend(t, c, true, params)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*anthropic.Message{whole, streamed} {
		if !strings.HasPrefix(m.ID, "msg_") || m.Model != sim.Model || m.Role != "assistant" || m.StopReason != anthropic.StopReasonEndTurn ||
			!strings.Contains(msText(m), "Hello there") || m.Usage.InputTokens == 0 || m.Usage.OutputTokens == 0 {
			t.Errorf("message %+v", m)
		}
	}
	kinds := func(m *anthropic.Message) (k []string) {
		for _, b := range m.Content {
			k = append(k, b.Type)
		}
		return k
	}
	if !slices.Equal(kinds(whole), kinds(streamed)) || msText(whole) != msText(streamed) || whole.Usage.OutputTokens != streamed.Usage.OutputTokens {
		t.Errorf("streamed %v %q %+v, whole %v %q %+v", kinds(streamed), msText(streamed), streamed.Usage, kinds(whole), msText(whole), whole.Usage)
	}
	if _, got := doorSeries(t, reg, "phasegate_requests_total", metrics.DoorMessages); got != 2 {
		t.Errorf("requests counted under door messages: %v, want 2", got)
	}
}

// A tool round trip: tool_use, then the tool_result, then the answer,
// streamed and not.
func TestMessagesSDKToolRoundTrip(t *testing.T) {
	_, gw, _ := msGateway(t, proxytest.Simulated(), proxy.Config{})
	c := msClient(gw.URL, "sk-client")
	for _, stream := range []bool{false, true} {
		ran, answer := msAgent(t, c, sim.Model, stream, 4)
		if len(ran) != 1 || !strings.HasPrefix(ran[0], "get_weather{") || !strings.Contains(answer, "sunny") {
			t.Errorf("stream %v: ran %v, answer %q; want one get_weather call and an answer from its result", stream, ran, answer)
		}
	}
}

// The thinking block of an answer comes back on the next request, and
// reaches the DeepSeek-shaped upstream as the reasoning_content of the
// assistant message its tool call is in, as thinking mode requires.
func TestMessagesSDKThinkingBack(t *testing.T) {
	up, gw, _ := msGateway(t, proxytest.Simulated(), proxy.Config{})
	c := msClient(gw.URL, "sk-client")
	for _, stream := range []bool{false, true} {
		params := anthropic.MessageNewParams{Model: sim.Model, MaxTokens: 1024, Tools: []anthropic.ToolUnionParam{msWeather},
			Thinking: anthropic.ThinkingConfigParamOfEnabled(1024),
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What's the weather in Paris?"))}}
		first, err := msSend(t, c, stream, params)
		if err != nil {
			t.Fatal(err)
		}
		if len(first.Content) < 2 || first.Content[0].Type != "thinking" || first.Content[0].Thinking == "" || first.Content[0].Signature == "" ||
			first.Content[len(first.Content)-1].Type != "tool_use" {
			t.Fatalf("stream %v: first answer %+v, want a signed thinking block, then a tool_use", stream, first.Content)
		}
		if sent := msUpstreamThinking(t, up.Received()[len(up.Received())-1]); sent != `{"type":"enabled"}` {
			t.Errorf("stream %v: thinking sent upstream %s", stream, sent)
		}
		call := first.Content[len(first.Content)-1]
		params.Messages = append(params.Messages, first.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(call.ID, "sunny", false)))
		second, err := msSend(t, c, stream, params)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(msText(second), "sunny") {
			t.Errorf("stream %v: second answer %q", stream, msText(second))
		}
		rec := up.Received()
		if got := cxUpstream(t, rec[len(rec)-1]).reasoning; !slices.Equal(got, []string{first.Content[0].Thinking}) {
			t.Errorf("stream %v: reasoning_content sent upstream %q, want the thinking block %q", stream, got, first.Content[0].Thinking)
		}
	}
}

// msUpstreamThinking is the thinking member of an upstream request.
func msUpstreamThinking(t *testing.T, r proxytest.Received) string {
	t.Helper()
	var v struct {
		Thinking json.RawMessage `json:"thinking"`
	}
	if err := r.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return string(v.Thinking)
}

// The looping simulated model is bounded on /v1/messages exactly as on
// chat: one execution, its repeats refused and re-asked within a
// response, then an answer; /standard/v1/messages passes the loop on.
func TestMessagesSDKLoopingModel(t *testing.T) {
	_, gw, _ := msGateway(t, proxytest.Simulated(), proxy.Config{})
	for _, stream := range []bool{false, true} {
		ran, answer := msAgent(t, msClient(gw.URL, "sk-client"), sim.LoopingModel, stream, 8)
		if len(ran) != 1 || answer == "" {
			t.Errorf("stream %v, guarded: ran %d calls %v, answer %q; want 1 call and an answer", stream, len(ran), ran, answer)
		}
		ran, answer = msAgent(t, msClient(gw.URL+"/standard", "sk-client"), sim.LoopingModel, stream, 4)
		if len(ran) < 4 || answer != "" {
			t.Errorf("stream %v, standard: ran %d calls, answer %q; want the loop passed on", stream, len(ran), answer)
		}
	}
}

// msAPIError is the SDK's error of err, which must be one.
func msAPIError(t *testing.T, err error) *anthropic.Error {
	t.Helper()
	var ae *anthropic.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not the SDK's API error", err, err)
	}
	return ae
}

// A client key goes as x-api-key, or as a bearer token; any other, or
// none, is a 401 authentication_error in Anthropic's shape that never
// reaches the upstream; the upstream gets the gateway's own key and
// neither anthropic-version nor anthropic-beta.
func TestMessagesSDKAuth(t *testing.T) {
	up, gw, _ := msGateway(t, proxytest.Simulated(), proxy.Config{ClientKeys: []proxy.ClientKey{{Key: "key-a"}}})
	params := anthropic.MessageNewParams{Model: sim.Model, MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
	beta := option.WithHeader("anthropic-beta", "interleaved-thinking-2025-05-14")
	for _, c := range []anthropic.Client{msClient(gw.URL, "key-a"),
		anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(gw.URL), option.WithAuthToken("key-a"), option.WithMaxRetries(0))} {
		for _, stream := range []bool{false, true} {
			if _, err := msSend(t, c, stream, params, beta); err != nil {
				t.Errorf("stream %v: %v", stream, err)
			}
		}
	}
	for _, r := range up.Received() {
		for _, h := range []string{"Anthropic-Version", "Anthropic-Beta", "X-Api-Key"} {
			if v := r.Header.Get(h); v != "" {
				t.Errorf("the upstream got %s: %s", h, v)
			}
		}
		if got := r.Header.Get("Authorization"); got != "Bearer sk-upstream" {
			t.Errorf("the upstream got Authorization %q, want the gateway's key", got)
		}
	}
	before := len(up.Received())
	for _, key := range []string{"key-b", ""} {
		for _, stream := range []bool{false, true} {
			_, err := msSend(t, msClient(gw.URL, key), stream, params)
			if ae := msAPIError(t, err); ae.StatusCode != http.StatusUnauthorized || ae.Type() != "authentication_error" || ae.Message == "" {
				t.Errorf("key %q, stream %v: %d %q %q", key, stream, ae.StatusCode, ae.Type(), ae.Message)
			}
		}
	}
	wrong := msClient(gw.URL, "key-b")
	if _, err := wrong.Messages.CountTokens(proxytest.Context(t), anthropic.MessageCountTokensParams{Model: sim.Model,
		Messages: params.Messages}); msAPIError(t, err).Type() != "authentication_error" {
		t.Errorf("count_tokens with a wrong key: %v", err)
	}
	if _, err := wrong.Models.List(proxytest.Context(t), anthropic.ModelListParams{}); msAPIError(t, err).Type() != "authentication_error" {
		t.Errorf("models with a wrong key: %v", err)
	}
	if n := len(up.Received()) - before; n != 0 {
		t.Errorf("refused requests reached the upstream %d times", n)
	}
}

// The gateway's rate limit and an upstream's 429 are rate_limit_error
// 429s with Retry-After; an upstream's 503 is Anthropic's 529
// overloaded_error.
func TestMessagesSDKRateLimited(t *testing.T) {
	params := anthropic.MessageNewParams{Model: sim.Model, MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
	_, gw, _ := msGateway(t, proxytest.Simulated(), proxy.Config{ClientKeys: []proxy.ClientKey{{Key: "key-a"}},
		RateLimits: proxy.RateLimits{KeyRequests: 1}})
	c := msClient(gw.URL, "key-a")
	if _, err := msSend(t, c, false, params); err != nil {
		t.Fatal(err)
	}
	for _, stream := range []bool{false, true} {
		_, err := msSend(t, c, stream, params)
		if ae := msAPIError(t, err); ae.StatusCode != http.StatusTooManyRequests || ae.Type() != "rate_limit_error" || ae.Response.Header.Get("Retry-After") == "" {
			t.Errorf("gateway limit, stream %v: %d %q Retry-After %q", stream, ae.StatusCode, ae.Type(), ae.Response.Header.Get("Retry-After"))
		}
	}

	limited := sim.Error(http.StatusTooManyRequests, "slow down", "rate_limit_error", "rate_limited")
	limited.Header = http.Header{"Retry-After": {"7"}}
	for _, tc := range []struct {
		reply  sim.Reply
		status int
		typ    string
	}{
		{limited, http.StatusTooManyRequests, "rate_limit_error"},
		{sim.Error(http.StatusServiceUnavailable, "busy", "server_error", "overloaded"), 529, "overloaded_error"},
	} {
		_, gw, _ := msGateway(t, func(proxytest.Received) sim.Reply { return tc.reply }, proxy.Config{})
		for _, stream := range []bool{false, true} {
			_, err := msSend(t, msClient(gw.URL, "sk-client"), stream, params)
			ae := msAPIError(t, err)
			if ae.StatusCode != tc.status || string(ae.Type()) != tc.typ {
				t.Errorf("upstream %d, stream %v: %d %q, want %d %s", tc.reply.Status, stream, ae.StatusCode, ae.Type(), tc.status, tc.typ)
			}
			if tc.status == http.StatusTooManyRequests && ae.Response.Header.Get("Retry-After") != "7" {
				t.Errorf("upstream 429, stream %v: Retry-After %q, want the upstream's", stream, ae.Response.Header.Get("Retry-After"))
			}
		}
	}
}

// A resumable stream is replayed, from its log, as the events the client
// read: the SDK accumulates the replay into the same message.
func TestMessagesSDKResume(t *testing.T) {
	_, gw, _ := msGateway(t, proxytest.Simulated(), proxy.Config{})
	c := msClient(gw.URL, "sk-client")
	params := anthropic.MessageNewParams{Model: sim.Model, MaxTokens: 1024, Tools: []anthropic.ToolUnionParam{msWeather},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What's the weather in Paris?"))}}
	live, err := msSend(t, c, true, params, option.WithHeader("X-Phasegate-Resumable", "true"), option.WithHeader("X-Request-Id", "ms-resume-1"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(proxytest.Context(t), http.MethodGet, gw.URL+"/v1/phasegate/requests/ms-resume-1/events", nil)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	s := ssestream.NewStream[anthropic.MessageStreamEventUnion](ssestream.NewDecoder(resp), nil)
	defer s.Close()
	var replayed anthropic.Message
	for s.Next() {
		if err := replayed.Accumulate(s.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if replayed.ID != live.ID || len(replayed.Content) != len(live.Content) || replayed.StopReason != anthropic.StopReasonToolUse ||
		replayed.Content[len(replayed.Content)-1].ID != live.Content[len(live.Content)-1].ID || replayed.Usage.OutputTokens != live.Usage.OutputTokens || replayed.Usage.InputTokens != live.Usage.InputTokens {
		t.Errorf("replayed %+v, want the live message %+v", replayed, live)
	}
}

// count_tokens counts with the gateway's counter; the models are listed
// and read in Anthropic's shape, asked as an Anthropic client.
func TestMessagesSDKCountTokensAndModels(t *testing.T) {
	_, gw, _ := msGateway(t, proxytest.Simulated(), proxy.Config{})
	c := msClient(gw.URL, "sk-client")
	ctx := proxytest.Context(t)
	short, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: sim.Model,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	if err != nil {
		t.Fatal(err)
	}
	long, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: sim.Model, Tools: []anthropic.MessageCountTokensToolUnionParam{{OfTool: msWeather.OfTool}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(strings.Repeat("the weather in Paris ", 100)))}})
	if err != nil {
		t.Fatal(err)
	}
	if short.InputTokens < 1 || long.InputTokens < short.InputTokens+400 {
		t.Errorf("counted %d and %d tokens", short.InputTokens, long.InputTokens)
	}
	page, err := c.Models.List(ctx, anthropic.ModelListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if !slices.Contains(ids, sim.LoopingModel) || page.HasMore {
		t.Errorf("models %v", ids)
	}
	m, err := c.Models.Get(ctx, sim.LoopingModel, anthropic.ModelGetParams{})
	if err != nil || m.ID != sim.LoopingModel || m.Type != "model" {
		t.Errorf("model: %+v %v", m, err)
	}
	// The simulated model serves any name, as the route's provider says;
	// a provider's 404 is Anthropic's.
	if m, err := c.Models.Get(ctx, "deepseek-v4-flash", anthropic.ModelGetParams{}); err != nil || m.ID != "deepseek-v4-flash" {
		t.Errorf("a name the provider serves: %+v %v", m, err)
	}
	if _, err := c.Models.Get(ctx, "no such model", anthropic.ModelGetParams{}); msAPIError(t, err).Type() != "not_found_error" {
		t.Errorf("a model the provider does not know: %v", err)
	}
	// An OpenAI client still gets OpenAI's list.
	_, _, body := rsRaw(t, gw, http.MethodGet, "/v1/models", "", "")
	if !strings.HasPrefix(string(body), `{"object":"list"`) {
		t.Errorf("an OpenAI client's models: %s", body)
	}
}

// msRaw posts body to path of gw with an x-api-key and headers h, and
// returns the status, header and body.
func msRaw(t *testing.T, gw *httptest.Server, path, body string, h http.Header) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(proxytest.Context(t), http.MethodPost, gw.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// msError is an error body in Anthropic's shape.
func msError(t *testing.T, b []byte) (typ, message string) {
	t.Helper()
	var v struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Type != "error" || v.Error.Message == "" {
		t.Fatalf("not an error in Anthropic's shape: %s", b)
	}
	return v.Error.Type, v.Error.Message
}

// What a chat upstream cannot use is dropped, named in
// X-Phasegate-Dropped and counted under door messages; with
// HOSTED_TOOLS=refuse a hosted tool is a 400 before any upstream call.
func TestMessagesDropped(t *testing.T) {
	body := `{"model":"phasegate-sim","max_tokens":64,"context_management":{"edits":[]},
		"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],
		"messages":[{"role":"user","content":"What's the weather in Paris?"}],
		"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}},
		         {"type":"web_search_20250305","name":"web_search","max_uses":5}]}`
	up, gw, reg := msGateway(t, proxytest.Simulated(), proxy.Config{})
	status, h, b := msRaw(t, gw, "/v1/messages?beta=true", body, nil)
	if status != http.StatusOK {
		t.Fatalf("%d %s", status, b)
	}
	if got, want := h.Get("X-Phasegate-Dropped"), "cache_control, context_management, web_search_20250305"; got != want {
		t.Errorf("X-Phasegate-Dropped = %q, want %q", got, want)
	}
	for _, f := range []string{"cache_control", "context_management", "tools.web_search"} {
		if got := cxDropped(t, reg, "messages", f); got != 1 {
			t.Errorf("dropped %s counted %v times, want 1", f, got)
		}
	}
	if tools := cxUpstream(t, up.Received()[0]).tools; !slices.Equal(tools, []string{"get_weather"}) {
		t.Errorf("tools sent upstream: %v", tools)
	}

	up, gw, _ = msGateway(t, proxytest.Simulated(), proxy.Config{HostedTools: proxy.HostedRefuse})
	status, _, b = msRaw(t, gw, "/v1/messages", body, nil)
	if typ, _ := msError(t, b); status != http.StatusBadRequest || typ != "invalid_request_error" {
		t.Errorf("refused hosted tool: %d %s", status, b)
	}
	if n := len(up.Received()); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
}

// Errors before the first byte are in Anthropic's shape on every
// Messages route, the middleware's included: a body over the limit, a
// malformed request, the guard's route switched off.
func TestMessagesErrorShapes(t *testing.T) {
	up, gw, _ := msGateway(t, proxytest.Simulated(), proxy.Config{MaxBodyBytes: 4 << 10})
	big := `{"model":"phasegate-sim","max_tokens":8,"messages":[{"role":"user","content":"` + strings.Repeat("x", 8<<10) + `"}]}`
	for _, tc := range []struct {
		name, path, body string
		status           int
		typ              string
	}{
		{"over the body limit", "/v1/messages", big, http.StatusRequestEntityTooLarge, "request_too_large"},
		{"count_tokens over the body limit", "/v1/messages/count_tokens", big, http.StatusRequestEntityTooLarge, "request_too_large"},
		{"no max_tokens", "/two-stage/v1/messages", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, http.StatusBadRequest, "invalid_request_error"},
		{"not JSON", "/standard/v1/messages/", `{"model":`, http.StatusBadRequest, "invalid_request_error"},
	} {
		status, _, b := msRaw(t, gw, tc.path, tc.body, nil)
		if typ, _ := msError(t, b); status != tc.status || typ != tc.typ {
			t.Errorf("%s: %d %s, want %d %s", tc.name, status, b, tc.status, tc.typ)
		}
	}
	if n := len(up.Received()); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
	off := serveGateway(t, proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: gw.URL + "/unused"}}}, proxy.Options{})
	status, _, b := msRaw(t, off, "/two-stage/v1/messages", `{}`, nil)
	if typ, _ := msError(t, b); status != http.StatusNotImplemented || typ != "api_error" {
		t.Errorf("two-stage off: %d %s", status, b)
	}
}

// While the upstream sends keep-alive comments, the client reads ping
// events; an upstream stream cut after the first byte ends with an error
// event, which the SDK reports.
func TestMessagesPingAndErrorEvent(t *testing.T) {
	reply := sim.NewStream(sim.Model).KeepAlive().KeepAlive().Role().Content("Hel", "lo").Finish("stop").Usage(5, 2, nil).Done().Reply()
	_, gw, _ := msGateway(t, func(proxytest.Received) sim.Reply { return reply }, proxy.Config{})
	body := `{"model":"phasegate-sim","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	status, _, b := msRaw(t, gw, "/v1/messages", body, nil)
	if status != http.StatusOK || !strings.HasPrefix(string(b), "event: ping\ndata: {\"type\":\"ping\"}\n\nevent: ping\n") {
		t.Errorf("%d %.200q, want pings first", status, b)
	}
	m, err := msSend(t, msClient(gw.URL, "sk-client"), true, anthropic.MessageNewParams{Model: sim.Model, MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	if err != nil || msText(m) != "Hello" {
		t.Errorf("the SDK read %+v, %v", m, err)
	}

	cut := sim.NewStream(sim.Model).Role().Content("Hel", "lo").Reply()
	cut.Cut = true
	_, gw, _ = msGateway(t, func(proxytest.Received) sim.Reply { return cut }, proxy.Config{})
	status, _, b = msRaw(t, gw, "/v1/messages", body, nil)
	if status != http.StatusOK || !strings.Contains(string(b), "\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\"") ||
		!strings.HasSuffix(string(b), "}}\n\n") || strings.Contains(string(b), "message_stop") {
		t.Errorf("cut stream: %d %q", status, b)
	}
	_, err = msSend(t, msClient(gw.URL, "sk-client"), true, anthropic.MessageNewParams{Model: sim.Model, MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	if err == nil {
		t.Error("the SDK read a cut stream without an error")
	}
}

// ccHeader are the headers Claude Code 2.1.328 sends with every request.
func ccHeader() http.Header {
	return http.Header{"X-Api-Key": {"key-a"}, "Anthropic-Version": {"2023-06-01"},
		"Anthropic-Beta": {"claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,mid-conversation-tool-changes-2026-07-01,thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,effort-2025-11-24"},
		"Anthropic-Dangerous-Direct-Browser-Access": {"true"}, "X-App": {"cli"}, "X-Claude-Code-Session-Id": {"74e3c151-fd79-4baf-b5eb-508e5bc65ac9"},
		"User-Agent": {"claude-cli/2.1.328 (external, sdk-cli)"}, "X-Stainless-Lang": {"js"}, "X-Stainless-Retry-Count": {"0"}}
}

// ccRequest is a request shaped as Claude Code 2.1.328 sends it (its
// fields, blocks and tools, short texts in place of its prompts), with
// messages after its first user message and system message.
func ccRequest(model string, messages ...any) map[string]any {
	schema := func(prop string) map[string]any {
		return map[string]any{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "additionalProperties": false,
			"properties": map[string]any{prop: map[string]any{"type": "string"}}, "required": []string{prop}}
	}
	eph := map[string]any{"type": "ephemeral"}
	first := []any{
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "<system-reminder>\nNotes.\n</system-reminder>\n"},
			map[string]any{"type": "text", "text": "list the files"}}},
		map[string]any{"role": "system", "content": []any{map[string]any{"type": "text", "text": "# Environment\n - Primary working directory: /tmp/w", "cache_control": eph}}},
	}
	return map[string]any{"model": model, "max_tokens": 32000, "stream": true, "messages": append(first, messages...),
		"system": []any{map[string]any{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328; cc_entrypoint=sdk-cli;"},
			map[string]any{"type": "text", "text": "You are an agent.", "cache_control": eph}},
		"tools": []any{map[string]any{"name": "Bash", "description": "Run a command", "input_schema": schema("command")},
			map[string]any{"name": "Read", "description": "Read a file", "input_schema": schema("file_path")},
			map[string]any{"name": "DeferredToolPlaceholder", "description": "", "input_schema": map[string]any{"type": "object", "properties": map[string]any{}}, "defer_loading": true}},
		"metadata":           map[string]any{"user_id": `{"device_id":"9c0947","account_uuid":"","session_id":"74e3c151-fd79-4baf-b5eb-508e5bc65ac9"}`},
		"thinking":           map[string]any{"type": "adaptive", "display": "omitted"},
		"context_management": map[string]any{"edits": []any{map[string]any{"type": "clear_thinking_20251015", "keep": "all"}}},
		"output_config":      map[string]any{"effort": "high"},
	}
}

// msStream posts req to path with header h and reads the stream with the
// SDK's decoder and accumulator.
func msStream(t *testing.T, gw *httptest.Server, path string, h http.Header, req map[string]any) (http.Header, anthropic.Message) {
	t.Helper()
	body, _ := json.Marshal(req)
	r, _ := http.NewRequestWithContext(proxytest.Context(t), http.MethodPost, gw.URL+path, strings.NewReader(string(body)))
	r.Header = h.Clone()
	r.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
	}
	s := ssestream.NewStream[anthropic.MessageStreamEventUnion](ssestream.NewDecoder(resp), nil)
	defer s.Close()
	var m anthropic.Message
	for s.Next() {
		if err := m.Accumulate(s.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return resp.Header, m
}

// msToolUses are the tool_use blocks of m.
func msToolUses(m anthropic.Message) []anthropic.ContentBlockUnion {
	var out []anthropic.ContentBlockUnion
	for _, b := range m.Content {
		if b.Type == "tool_use" {
			out = append(out, b)
		}
	}
	return out
}

// Claude Code's requests, as Claude Code 2.1.328 sends them, on the
// looping model: every field and beta accepted (those a chat upstream has
// no use for dropped and named), its system message kept in its place,
// one command run and then an answer; a new turn's call whose upstream id
// the history holds comes back under an id of the gateway's.
func TestMessagesClaudeCodeRequests(t *testing.T) {
	up, gw, reg := msGateway(t, proxytest.Simulated(), proxy.Config{ClientKeys: []proxy.ClientKey{{Key: "key-a"}}})
	const path = "/v1/messages?beta=true"
	h, first := msStream(t, gw, path, ccHeader(), ccRequest(sim.LoopingModel))
	if got, want := h.Get("X-Phasegate-Dropped"), "cache_control, context_management, defer_loading, output_config"; got != want {
		t.Errorf("X-Phasegate-Dropped = %q, want %q", got, want)
	}
	calls := msToolUses(first)
	if len(calls) != 1 || calls[0].Name != "Bash" || first.StopReason != anthropic.StopReasonToolUse {
		t.Fatalf("first answer: %+v", first)
	}
	run := []any{first.ToParam(), map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": calls[0].ID,
		"content": "This command requires approval", "is_error": true, "cache_control": map[string]any{"type": "ephemeral"}}}}}
	_, second := msStream(t, gw, path, ccHeader(), ccRequest(sim.LoopingModel, run...))
	if len(msToolUses(second)) != 0 || second.StopReason != anthropic.StopReasonEndTurn || !strings.Contains(msText(&second), "Final answer") {
		t.Errorf("second answer: %+v, want the final answer", second)
	}
	again := append(run, second.ToParam(), map[string]any{"role": "user", "content": "and again"})
	_, third := msStream(t, gw, path, ccHeader(), ccRequest(sim.LoopingModel, again...))
	if c := msToolUses(third); len(c) != 1 || c[0].ID == calls[0].ID || !strings.HasPrefix(c[0].ID, "toolu_") {
		t.Errorf("a new turn's call: %+v, want an id other than %q", c, calls[0].ID)
	}

	for i, r := range up.Received() {
		for k := range r.Header {
			if strings.HasPrefix(k, "Anthropic-") || k == "X-Api-Key" {
				t.Errorf("upstream request %d got %s", i, k)
			}
		}
	}
	var sent struct {
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
		Thinking json.RawMessage `json:"thinking"`
		User     string          `json:"user"`
	}
	if err := up.Received()[0].Decode(&sent); err != nil {
		t.Fatal(err)
	}
	if len(sent.Messages) != 3 || sent.Messages[2].Role != "system" || string(sent.Thinking) != `{"type":"enabled"}` || !strings.Contains(sent.User, "session_id") {
		t.Errorf("sent upstream: %+v", sent)
	}
	if got := cxDropped(t, reg, "messages", "tool_field"); got != 3 {
		t.Errorf("defer_loading counted %v times, want 3", got)
	}
}
