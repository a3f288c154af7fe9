package proxy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
	"github.com/phasegate/phasegate/tokens"
)

// strictUpstream plays a provider whose tokenizer counts a quarter more
// than tiktoken and whose window is the gateway's configured one: prompts
// the gateway thinks fit are refused with DeepSeek's context-length error,
// whose figures are the provider's own count.
type strictUpstream struct {
	counter *tokens.Counter
	window  int
	// reserve is what the provider keeps for the completion when a request
	// sets no max_tokens.
	reserve int

	mu     sync.Mutex
	counts []int // the provider's count of each request's prompt
}

func (u *strictUpstream) respond(rec proxytest.Received) sim.Reply {
	req, err := chat.ParseRequest(rec.Body)
	if err != nil {
		return sim.Error(http.StatusBadRequest, err.Error(), "invalid_request_error", "invalid_request_error")
	}
	f, err := u.counter.Fit(req.Model, req.Messages, req.Tools, req.MaxTokens, 0)
	if err != nil {
		return sim.Error(http.StatusBadRequest, err.Error(), "invalid_request_error", "invalid_request_error")
	}
	prompt := (f.PromptTokens + f.DroppedTokens) * 5 / 4
	u.mu.Lock()
	u.counts = append(u.counts, prompt)
	u.mu.Unlock()
	completion := u.reserve
	if req.MaxTokens > 0 {
		completion = req.MaxTokens
	}
	if prompt+completion > u.window {
		return sim.Error(http.StatusBadRequest, fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens "+
			"(%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			u.window, prompt+completion, prompt, completion), "invalid_request_error", "invalid_request_error")
	}
	if !req.Stream {
		return sim.Completion(req.Model, map[string]any{"content": "fits now"}, chat.FinishStop,
			map[string]any{"prompt_tokens": prompt, "completion_tokens": 2, "total_tokens": prompt + 2})
	}
	return sim.NewStream(req.Model).Role().Content("fits ", "now").Finish(chat.FinishStop).Done().Reply()
}

// refitHistory is a conversation whose tiktoken count is between lo and
// hi: the gateway's budget for tkSmall is about 9,800.
func refitHistory(t *testing.T, c *tokens.Counter, lo, hi int) []openai.ChatCompletionMessage {
	r := rand.New(rand.NewPCG(3, 4))
	msgs := []openai.ChatCompletionMessage{{Role: "system", Content: "You are a helpful assistant. " + tkProse(r, 100)}}
	for range 200 {
		msgs = append(msgs, openai.ChatCompletionMessage{Role: "user", Content: tkProse(r, 60)},
			openai.ChatCompletionMessage{Role: "assistant", Content: tkProse(r, 120)})
		last := append(msgs[:len(msgs):len(msgs)], openai.ChatCompletionMessage{Role: "user", Content: "And now?"})
		if n := tkCount(t, c, tkParse(t, tkSmall, last, nil)); n >= lo {
			if n > hi {
				t.Fatalf("history of %d tokens, want %d to %d", n, lo, hi)
			}
			return last
		}
	}
	t.Fatal("history never reached its size")
	return nil
}

// TestContextLengthRetry: the gateway's count says a history fits, the
// upstream's own count says it does not and answers a context-length 400
// before any byte was written. The gateway reads the upstream's figures,
// learns from them, fits the history again and retries once, on both
// routes, streaming or not: the client gets the answer, and the retried
// prompt fits by the upstream's count.
func TestContextLengthRetry(t *testing.T) {
	for _, route := range []string{"/standard/v1", "/two-stage/v1"} {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s stream=%v", tkRouteName(route), stream), func(t *testing.T) {
				counter := tkCounter(t)
				up := &strictUpstream{counter: tkCounter(t), window: tkSmallLimits.ContextWindow, reserve: 2000}
				recv, gw := tkGateway(t, counter, up.respond)
				msgs := refitHistory(t, counter, 8800, 9700)
				text, _, err := tkAsk(tsContext(t), tkClient(gw, route, nil), tkSmall, tkHistory{msgs: msgs}, stream)
				if err != nil {
					t.Fatalf("the client got an error: %v", err)
				}
				if text != "fits now" {
					t.Errorf("answer %q, want the upstream's", text)
				}
				received := recv.Received()
				if len(received) != 2 || len(up.counts) != 2 {
					t.Fatalf("upstream calls = %d, want 2 (the refused one and the retry)", len(received))
				}
				if up.counts[1]+up.reserve > up.window {
					t.Errorf("retried prompt of %d tokens by the upstream's count, over its window of %d less %d", up.counts[1], up.window, up.reserve)
				}
				var first, second struct {
					Messages []json.RawMessage `json:"messages"`
				}
				if json.Unmarshal(received[0].Body, &first) != nil || json.Unmarshal(received[1].Body, &second) != nil ||
					len(second.Messages) >= len(first.Messages) {
					t.Errorf("retry sent %d messages, the refused call %d: want fewer", len(second.Messages), len(first.Messages))
				}
			})
		}
	}
}

// TestContextLengthNoFit: when even the last user message alone is over
// the upstream's window, no fit is possible: the client gets the
// upstream's own 400, after one call; a 400 that is not about the context
// length is relayed at once too.
func TestContextLengthNoFit(t *testing.T) {
	counter := tkCounter(t)
	r := rand.New(rand.NewPCG(5, 6))
	huge := []openai.ChatCompletionMessage{{Role: "user", Content: tkProse(r, 7700)}}
	if n := tkCount(t, counter, tkParse(t, tkSmall, huge, nil)); n < 8000 || n > 9700 {
		t.Fatalf("user message of %d tokens, want one the gateway thinks fits and the upstream does not", n)
	}
	tests := []struct {
		name    string
		respond func() proxytest.Responder
		msgs    []openai.ChatCompletionMessage
		want    string
	}{
		{name: "no fit possible", respond: func() proxytest.Responder {
			return (&strictUpstream{counter: tkCounter(t), window: tkSmallLimits.ContextWindow, reserve: 2000}).respond
		},
			msgs: huge, want: "maximum context length"},
		{name: "another 400", respond: func() proxytest.Responder {
			return proxytest.Script(sim.Error(http.StatusBadRequest, "temperature must be at most 2", "invalid_request_error", "invalid_request_error"))
		},
			msgs: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}}, want: "temperature"},
	}
	for _, tt := range tests {
		for _, route := range []string{"/standard/v1", "/two-stage/v1"} {
			t.Run(tt.name+" "+tkRouteName(route), func(t *testing.T) {
				recv, gw := tkGateway(t, tkCounter(t), tt.respond())
				_, _, err := tkAsk(tsContext(t), tkClient(gw, route, nil), tkSmall, tkHistory{msgs: tt.msgs}, false)
				var apiErr *openai.APIError
				if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != http.StatusBadRequest || !strings.Contains(apiErr.Message, tt.want) {
					t.Fatalf("error = %v, want the upstream's 400 about %q", err, tt.want)
				}
				if n := len(recv.Received()); n != 1 {
					t.Errorf("upstream calls = %d, want 1", n)
				}
			})
		}
	}
}
