package proxy_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// The usage a Responses client reads is the one the upstream reported,
// streamed and not: input_tokens, output_tokens and their details come
// from the upstream's prompt_tokens, completion_tokens and details, not
// from the gateway's own count.
func TestResponsesUsageIsTheUpstreams(t *testing.T) {
	const prompt, completion, cached, reasoning = 1234, 56, 1000, 7
	details := map[string]any{"prompt_tokens_details": map[string]any{"cached_tokens": cached},
		"completion_tokens_details": map[string]any{"reasoning_tokens": reasoning}}
	stream := sim.Reply{Events: sim.NewStream(testModel).Role().Content("hello").Finish("stop").Usage(prompt, completion, details).Done().Events()}
	whole := sim.Completion(testModel, map[string]any{"content": "hello"}, "stop",
		map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
			"prompt_tokens_details": details["prompt_tokens_details"], "completion_tokens_details": details["completion_tokens_details"]})
	for _, tc := range []struct {
		name   string
		stream bool
		reply  sim.Reply
	}{{"stream", true, stream}, {"whole", false, whole}} {
		t.Run(tc.name, func(t *testing.T) {
			_, gw := rsGateway(t, proxytest.Script(tc.reply))
			body, _ := json.Marshal(map[string]any{"model": testModel, "input": "hi", "stream": tc.stream})
			status, _, b := rsRaw(t, gw, http.MethodPost, "/standard/v1/responses", "", string(body))
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			raw := b
			if tc.stream {
				evs := rsEvents(t, b)
				last := evs[len(evs)-1]
				if last.Name != "response.completed" {
					t.Fatalf("the stream ends with %s", last.Name)
				}
				raw, _ = json.Marshal(last.Data["response"])
			}
			var got struct {
				Usage struct {
					InputTokens        int `json:"input_tokens"`
					OutputTokens       int `json:"output_tokens"`
					TotalTokens        int `json:"total_tokens"`
					InputTokensDetails struct {
						CachedTokens int `json:"cached_tokens"`
					} `json:"input_tokens_details"`
					OutputTokensDetails struct {
						ReasoningTokens int `json:"reasoning_tokens"`
					} `json:"output_tokens_details"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			u := got.Usage
			if u.InputTokens != prompt || u.OutputTokens != completion || u.TotalTokens != prompt+completion ||
				u.InputTokensDetails.CachedTokens != cached || u.OutputTokensDetails.ReasoningTokens != reasoning {
				t.Errorf("usage %+v; want the upstream's: input %d (cached %d), output %d (reasoning %d)", u, prompt, cached, completion, reasoning)
			}
		})
	}
}
