package sim_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/sim"
)

func TestError(t *testing.T) {
	t.Parallel()
	r := sim.Error(429, "slow down", "rate_limit_error", "rate_limit_exceeded")
	want := `{"error":{"code":"rate_limit_exceeded","message":"slow down","param":null,"type":"rate_limit_error"}}`
	if r.Status != 429 || string(r.Body) != want {
		t.Errorf("Error = %d %s, want 429 %s", r.Status, r.Body, want)
	}
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	r := sim.Completion("m", map[string]any{"content": "hi"}, "stop", map[string]any{"prompt_tokens": 1})
	var c struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Choices []struct {
			Message      map[string]any `json:"message"`
			FinishReason string         `json:"finish_reason"`
		} `json:"choices"`
		Usage map[string]int `json:"usage"`
	}
	if err := json.Unmarshal(r.Body, &c); err != nil {
		t.Fatal(err)
	}
	if c.Object != "chat.completion" || len(c.Choices) != 1 || c.Choices[0].Message["role"] != "assistant" ||
		c.Choices[0].Message["content"] != "hi" || c.Choices[0].FinishReason != "stop" || c.Usage["prompt_tokens"] != 1 {
		t.Errorf("Completion = %s", r.Body)
	}
	var again struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(sim.Completion("m", map[string]any{}, "stop", nil).Body, &again); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.ID, "chatcmpl-") || len(c.ID) < len("chatcmpl-")+20 || again.ID == c.ID {
		t.Errorf("ids = %q then %q, want fresh chatcmpl- ids", c.ID, again.ID)
	}
}
