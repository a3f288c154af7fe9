package proxy_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/phasegate/phasegate/envelope"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/sim"
)

// orchestratorGateway is a go-openai client of simGateway.
func orchestratorGateway(t *testing.T, rules ...proxy.EnvelopeRule) *openai.Client {
	t.Helper()
	return newClient(simGateway(t, rules...))
}

// askContent asks req of client, streamed or whole, and returns the
// content of the answer's first choice.
func askContent(t *testing.T, client *openai.Client, req openai.ChatCompletionRequest, stream bool) string {
	t.Helper()
	ctx := testContext(t)
	if !stream {
		resp, err := client.CreateChatCompletion(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Choices[0].Message.Content
	}
	s, err := client.CreateChatCompletionStream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := collect(s)
	if err != nil {
		t.Fatal(err)
	}
	return res.Content
}

// The go-openai client receives the orchestrator's envelopes repaired or
// asked again, streamed and not, and never a broken one.
func TestEnvelopesThroughOpenAIClient(t *testing.T) {
	cases := []struct {
		prompt       string
		wantNotice   bool
		wantRepaired bool
	}{
		{prompt: "Analyse the code."},
		{prompt: "Analyse the code (broken).", wantNotice: true},
		{prompt: "Analyse the code (missing).", wantNotice: true},
		{prompt: "Analyse the code (repair).", wantRepaired: true},
	}
	client := orchestratorGateway(t, proxy.EnvelopeRule{Pattern: "phasegate-sim-orch*", Mode: protocol.EnvelopeRequired})
	for _, tc := range cases {
		for _, stream := range []bool{true, false} {
			t.Run(tc.prompt+map[bool]string{true: " stream", false: " whole"}[stream], func(t *testing.T) {
				req := openai.ChatCompletionRequest{Model: sim.OrchestratorModel, Messages: userMessage(tc.prompt)}
				content := askContent(t, client, req, stream)
				r := envelope.Parse(content)
				if !r.Valid {
					t.Fatalf("the client got no valid envelope: %+v\n%q", r, content)
				}
				if r.Repaired {
					t.Errorf("the client got an envelope that still needs repair: %q", content)
				}
				if got := strings.Count(content, envelope.StartDelimiter); got != 1 {
					t.Errorf("the client got %d envelopes, want 1 (a broken one never shows): %q", got, content)
				}
				if got := strings.Contains(content, "**System Notice**: The orchestrator envelope could not be used"); got != tc.wantNotice {
					t.Errorf("notice shown = %v, want %v: %q", got, tc.wantNotice, content)
				}
			})
		}
	}
}

// A non-streaming answer carries the verdict in its top-level phasegate
// object; the header overrides the configured rule, and a bad value or
// the pass-through route is a 400 in OpenAI's shape.
func TestEnvelopeReportAndHeader(t *testing.T) {
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: sim.BaseURL, Simulated: true}}}
	gw := serveGateway(t, cfg, proxy.Options{Transport: &sim.Transport{}, DefaultProtocol: proxy.ProtocolTwoStage,
		TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{MaxEnvelopeRetries: 1}, nil)})
	body := `{"model":"` + sim.OrchestratorModel + `","messages":[{"role":"user","content":"Analyse (repair)."}]}`
	resp := post(t, testContext(t), gw, "/v1/chat/completions", body, http.Header{"X-Phasegate-Envelope": {"optional"}})
	var got struct {
		Phasegate struct {
			Envelope *protocol.EnvelopeReport `json:"envelope"`
		} `json:"phasegate"`
	}
	if err := json.Unmarshal(readAll(t, resp.Body), &got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	if e := got.Phasegate.Envelope; e == nil || !e.Valid || !e.Repaired || e.Phase != "analysis" || len(e.Errors) != 0 {
		t.Errorf("phasegate.envelope = %+v, want valid, repaired, analysis", e)
	}

	// Without the header and with no rule, the envelope is the model's text.
	resp = post(t, testContext(t), gw, "/v1/chat/completions", body, nil)
	got.Phasegate.Envelope = nil
	if err := json.Unmarshal(readAll(t, resp.Body), &got); err != nil || got.Phasegate.Envelope != nil {
		t.Errorf("without a rule: %v, envelope = %+v, want none", err, got.Phasegate.Envelope)
	}

	twoChoices := strings.Replace(body, `"messages"`, `"n":2,"messages"`, 1)
	for _, tc := range []struct{ path, body, value, want string }{
		{"/v1/chat/completions", body, "always", "X-Phasegate-Envelope must be optional, required or off"},
		{"/standard/v1/chat/completions", body, "required", "X-Phasegate-Envelope is served by the guard"},
		{"/v1/chat/completions", twoChoices, "required", "X-Phasegate-Envelope needs n = 1"},
	} {
		resp := post(t, testContext(t), gw, tc.path, tc.body, http.Header{"X-Phasegate-Envelope": {tc.value}})
		var e struct {
			Error struct{ Message, Type string }
		}
		if err := json.Unmarshal(readAll(t, resp.Body), &e); err != nil || resp.StatusCode != http.StatusBadRequest ||
			!strings.Contains(e.Error.Message, tc.want) || e.Error.Type != "invalid_request_error" {
			t.Errorf("%s with %q: status %d, error %+v, want 400 saying %q", tc.path, tc.value, resp.StatusCode, e.Error, tc.want)
		}
	}
}
