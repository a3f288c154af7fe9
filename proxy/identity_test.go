package proxy_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// simGateway serves the guard in front of the simulated models, in
// process, with envelope rules.
func simGateway(t *testing.T, rules ...proxy.EnvelopeRule) *httptest.Server {
	t.Helper()
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: sim.BaseURL, Simulated: true}}, Envelopes: rules}
	return serveGateway(t, cfg, proxy.Options{Transport: &sim.Transport{}, DefaultProtocol: proxy.ProtocolTwoStage,
		TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{MaxEnvelopeRetries: protocol.DefaultMaxEnvelopeRetries}, nil)})
}

// identityBody is a request for model with the read_file and list_dir
// tools; ran adds a turn in which read_file a.go ran once.
func identityBody(model, prompt string, stream, ran bool) string {
	msgs := []any{map[string]any{"role": "user", "content": prompt}}
	if ran {
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": nil, "reasoning_content": "Read a.go.", "tool_calls": []any{map[string]any{
				"id": "call_1", "type": "function", "function": map[string]any{"name": "read_file", "arguments": `{"path":"a.go"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "package a"})
	}
	b, _ := json.Marshal(map[string]any{"model": model, "messages": msgs, "stream": stream, "tools": tsTools()})
	return string(b)
}

type identityScenario struct {
	name   string
	gw     func(t *testing.T) *httptest.Server
	body   func(stream bool) string
	header http.Header
}

func identityScenarios() []identityScenario {
	looper := func(t *testing.T) *httptest.Server {
		_, gw := tsGateway(t, tsDeepSeek(t, tsLooper), protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), false)
		return gw
	}
	orchestrator := func(t *testing.T) *httptest.Server {
		return simGateway(t, proxy.EnvelopeRule{Pattern: "phasegate-sim-orch*", Mode: protocol.EnvelopeRequired})
	}
	return []identityScenario{
		{name: "refusal re-ask and forced final answer", gw: looper, header: http.Header{"X-Phasegate-Max-Duplicate-Attempts": {"1"}},
			body: func(stream bool) string { return identityBody(tsModel, "Read a.go.", stream, true) }},
		{name: "spent cycle budget", gw: looper, header: http.Header{"X-Phasegate-Max-Phase-Cycles": {"1"}},
			body: func(stream bool) string { return identityBody(tsModel, "Read a.go.", stream, true) }},
		{name: "envelope re-ask", gw: orchestrator,
			body: func(stream bool) string {
				return identityBody(sim.OrchestratorModel, "Analyse the code (broken).", stream, false)
			}},
		{name: "leaked call recovery", gw: func(t *testing.T) *httptest.Server { return simGateway(t) },
			body: func(stream bool) string { return identityBody(sim.LeakyModel, "Read a.go.", stream, false) }},
	}
}

// Every chunk and body of the guard's scenarios, whose responses hold
// two or more upstream answers or chunks the guard wrote first, is valid
// against OpenAI's schemas and carries one id, one real created time and
// one model.
func TestGuardScenariosOneIdentity(t *testing.T) {
	v := newOpenAPIValidator(t)
	for _, sc := range identityScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			gw := sc.gw(t)
			resp, body := tsPost(t, gw, "/v1/chat/completions", sc.body(true), sc.header)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("stream: %d %s", resp.StatusCode, body)
			}
			var first chat.Chunk
			data := tsData(t, body)
			for k, d := range data {
				if d == chat.Done {
					continue
				}
				v.check(t, "CreateChatCompletionStreamResponse", []byte(d))
				c, err := chat.DecodeChunk([]byte(d))
				if err != nil {
					t.Fatalf("chunk %d: %v", k, err)
				}
				if k == 0 {
					first = c
				}
				if c.ID != first.ID || c.Created != first.Created || c.Model != first.Model || c.Created == 0 {
					t.Errorf("chunk %d is %q %d %q; the first was %q %d %q", k, c.ID, c.Created, c.Model, first.ID, first.Created, first.Model)
				}
			}
			if len(data) < 3 {
				t.Fatalf("stream of %d events", len(data))
			}
			resp, body = tsPost(t, gw, "/v1/chat/completions", sc.body(false), sc.header)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("body: %d %s", resp.StatusCode, body)
			}
			v.check(t, "CreateChatCompletionResponse", body)
			var whole struct {
				Created int64 `json:"created"`
			}
			if err := json.Unmarshal(body, &whole); err != nil || whole.Created == 0 {
				t.Errorf("body created %d (%v): %s", whole.Created, err, body)
			}
		})
	}
}

// The go-openai client reads one id on every chunk of a guarded stream.
func TestGuardScenariosOneIDThroughOpenAIClient(t *testing.T) {
	for _, sc := range identityScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			gw := sc.gw(t)
			client, _ := tsClient(gw, "/v1", sc.header)
			var req openai.ChatCompletionRequest
			if err := json.Unmarshal([]byte(sc.body(true)), &req); err != nil {
				t.Fatal(err)
			}
			s, err := client.CreateChatCompletionStream(tsContext(t), req)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ids := map[string]int{}
			for {
				c, err := s.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				ids[c.ID]++
				if c.Created == 0 {
					t.Errorf("chunk with created 0: %+v", c)
				}
			}
			if len(ids) != 1 {
				t.Errorf("ids seen: %v; want one", ids)
			}
		})
	}
}

// models.retrieve answers the simulated models, by go-openai's GetModel
// and a raw GET, with the model object of the specification, for any name
// the simulated model serves: deepseek-v4-flash, the model of the README's
// examples, as well as phasegate-sim.
func TestRetrieveSimulatedModel(t *testing.T) {
	v := newOpenAPIValidator(t)
	gw := simGateway(t)
	client, _ := tsClient(gw, "/v1", nil)
	m, err := client.GetModel(tsContext(t), sim.LoopingModel)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != sim.LoopingModel || m.Object != "model" {
		t.Errorf("GetModel = %+v", m)
	}
	for _, tc := range []struct {
		model  string
		status int
		schema string
	}{{sim.Model, http.StatusOK, "Model"}, {"deepseek-v4-flash", http.StatusOK, "Model"}} {
		resp, err := gw.Client().Get(gw.URL + "/v1/models/" + tc.model)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("GET /v1/models/%s: %d %s; want %s", tc.model, resp.StatusCode, body, strconv.Itoa(tc.status))
		}
		v.check(t, tc.schema, body)
	}
}

// TestSimulatedIdentityOnEveryDoor: with no provider configured, an answer
// names the model the client asked for, on the chat route, the Responses
// API and the Messages API alike, streamed or not.
func TestSimulatedIdentityOnEveryDoor(t *testing.T) {
	gw := simGateway(t)
	const model = "deepseek-v4-flash"
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"` + model + `","messages":[{"role":"user","content":"Hello"}]}`},
		{"/v1/chat/completions", `{"model":"` + model + `","stream":true,"messages":[{"role":"user","content":"Hello"}]}`},
		{"/v1/chat/completions", `{"model":"` + model + `","stream":true,"messages":[{"role":"user","content":"Weather?"}],` +
			`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}`},
		{"/v1/responses", `{"model":"` + model + `","input":"Hello"}`},
		{"/v1/responses", `{"model":"` + model + `","input":"Hello","stream":true}`},
		{"/v1/messages", `{"model":"` + model + `","max_tokens":64,"messages":[{"role":"user","content":"Hello"}]}`},
		{"/v1/messages", `{"model":"` + model + `","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hello"}]}`},
	} {
		resp, err := gw.Client().Post(gw.URL+tc.path, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		names := regexp.MustCompile(`"model":"([^"]*)"`).FindAllStringSubmatch(string(body), -1)
		if resp.StatusCode != http.StatusOK || len(names) == 0 {
			t.Fatalf("POST %s %s: %d %s", tc.path, tc.body, resp.StatusCode, body)
		}
		for _, n := range names {
			if n[1] != model {
				t.Errorf("POST %s %s: an answer names %q, want %q:\n%s", tc.path, tc.body, n[1], model, body)
				break
			}
		}
	}
}

// TestRepeatedIDsRewritten: an upstream that writes "id" (and created
// and model) more than once in a chunk, after its head, in another case
// or escaped, or a dozen times, reaches the go-openai client, which keeps
// the last of duplicate names and matches them in any case, with one id,
// one created time and one model on every chunk of a guarded stream.
// Before, a repeat after the head of a chunk kept its own value, and so
// did every one past the sixth: the client saw five ids.
func TestRepeatedIDsRewritten(t *testing.T) {
	head := `{"id":"up-1","object":"chat.completion.chunk","created":1,"model":"` + tsModel + `"`
	choice := func(delta string) string {
		return `,"choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]`
	}
	twelve := strings.Repeat(`,"id":"up-x","created":9,"model":"other"`, 12)
	s := sim.NewStream(tsModel).
		Raw(head + choice(`{"role":"assistant","content":"a"}`) + `}`).
		Raw(head + choice(`{"content":"b"}`) + `,"id":"up-2"}`).
		Raw(head + choice(`{"content":"c"}`) + `,"ID":"up-3","Created":3,"MODEL":"m3"}`).
		Raw(head + choice(`{"content":"d"}`) + `,"i\u0064":"up-4"}`).
		Raw(head + choice(`{"content":"e"}`) + twelve + `}`).
		Raw(head + `,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`).Done()
	_, gw := tsGateway(t, func(proxytest.Received) sim.Reply { return s.Reply() }, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), false)
	client, _ := tsClient(gw, "/v1", nil)
	var req openai.ChatCompletionRequest
	if err := json.Unmarshal([]byte(identityBody(tsModel, "Say it.", true, false)), &req); err != nil {
		t.Fatal(err)
	}
	st, err := client.CreateChatCompletionStream(tsContext(t), req)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ids, created, models := map[string]int{}, map[int64]int{}, map[string]int{}
	text := ""
	for {
		c, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ids[c.ID]++
		created[c.Created]++
		models[c.Model]++
		if len(c.Choices) > 0 {
			text += c.Choices[0].Delta.Content
		}
	}
	if len(ids) != 1 || len(created) != 1 || len(models) != 1 || text != "abcde" {
		t.Errorf("ids %v, created %v, models %v, text %q; want one each and abcde", ids, created, models, text)
	}
}
