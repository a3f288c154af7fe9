package tokens

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/chat"
)

// errorBody is an OpenAI-style error body; code and typ are JSON values.
func errorBody(message, typ, code string) string {
	return rawErrorBody(message, fmt.Sprintf(`"type":%s,"param":null,"code":%s`, typ, code))
}

// rawErrorBody is an error body with the message and other fields, as
// JSON members.
func rawErrorBody(message, fields string) string {
	m, _ := json.Marshal(message)
	if fields != "" {
		fields = "," + fields
	}
	return fmt.Sprintf(`{"error":{"message":%s%s}}`, m, fields)
}

const (
	deepseekText = "This model's maximum context length is 131072 tokens. However, you requested 140012 tokens (135012 in the messages, 5000 in the completion). Please reduce the length of the messages or completion."
	resultedText = "This model's maximum context length is 128000 tokens. However, your messages resulted in 130500 tokens. Please reduce the length of the messages."
	requestText  = "This model's maximum context length is 128000 tokens. However, you requested 130500 tokens (126404 in the messages, 4096 in the completion). Please reduce the length of the messages or completion."
	inputText    = "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in 300123 tokens. Please reduce the length of the messages."
)

func TestParseOverflow(t *testing.T) {
	const (
		invalid = `"invalid_request_error"`
		ctxLen  = `"context_length_exceeded"`
	)
	tests := []struct {
		name   string
		body   string
		want   Overflow
		wantOK bool
	}{
		{
			name:   "DeepSeek",
			body:   errorBody(deepseekText, invalid, invalid),
			want:   Overflow{Limit: 131072, Requested: 140012, Prompt: 135012, Completion: 5000},
			wantOK: true,
		},
		{
			name:   "DeepSeek without max_tokens",
			body:   errorBody("This model's maximum context length is 131072 tokens. However, you requested 131749 tokens (131749 in the messages, 0 in the completion). Please reduce the length of the messages or completion.", invalid, invalid),
			want:   Overflow{Limit: 131072, Requested: 131749, Prompt: 131749},
			wantOK: true,
		},
		{
			name:   "OpenAI, messages resulted in",
			body:   errorBody(resultedText, invalid, ctxLen),
			want:   Overflow{Limit: 128000, Requested: 130500, Prompt: 130500},
			wantOK: true,
		},
		{
			name:   "OpenAI, requested in the messages and in the completion",
			body:   errorBody(requestText, invalid, ctxLen),
			want:   Overflow{Limit: 128000, Requested: 130500, Prompt: 126404, Completion: 4096},
			wantOK: true,
		},
		{
			name:   "OpenAI, functions counted apart",
			body:   errorBody("This model's maximum context length is 8192 tokens. However, you requested 8213 tokens (6683 in the messages, 730 in the functions, and 800 in the completion). Please reduce the length of the messages, functions, or completion.", invalid, ctxLen),
			want:   Overflow{Limit: 8192, Requested: 8213, Prompt: 7413, Completion: 800},
			wantOK: true,
		},
		{
			name:   "OpenAI, newer models' input limit",
			body:   errorBody(inputText, invalid, ctxLen),
			want:   Overflow{Limit: 272000, Input: true, Requested: 300123, Prompt: 300123},
			wantOK: true,
		},
		{
			name:   "OpenAI completions, prompt and completion",
			body:   errorBody("This model's maximum context length is 4097 tokens, however you requested 4200 tokens (3200 in your prompt; 1000 for the completion). Please reduce your prompt; or completion length.", invalid, ctxLen),
			want:   Overflow{Limit: 4097, Requested: 4200, Prompt: 3200, Completion: 1000},
			wantOK: true,
		},
		{
			name:   "thousands separators",
			body:   errorBody("This model's maximum context length is 1,048,576 tokens. However, you requested 1,050,012 tokens (1,045,012 in the messages, 5,000 in the completion).", invalid, invalid),
			want:   Overflow{Limit: 1048576, Requested: 1050012, Prompt: 1045012, Completion: 5000},
			wantOK: true,
		},
		{
			name:   "thousands separators, input limit",
			body:   errorBody("Input tokens exceed the configured limit of 272,000 tokens. Your messages resulted in 300,123 tokens.", invalid, ctxLen),
			want:   Overflow{Limit: 272000, Input: true, Requested: 300123, Prompt: 300123},
			wantOK: true,
		},
		{
			name:   "a total without its parts",
			body:   errorBody("This model's maximum context length is 32768 tokens. However, you requested 40000 tokens. Please reduce the length of the messages.", invalid, ctxLen),
			want:   Overflow{Limit: 32768, Requested: 40000},
			wantOK: true,
		},
		{
			name:   "code alone",
			body:   errorBody(resultedText, "null", ctxLen),
			want:   Overflow{Limit: 128000, Requested: 130500, Prompt: 130500},
			wantOK: true,
		},
		{
			name:   "type alone",
			body:   rawErrorBody(deepseekText, `"type":"invalid_request_error"`),
			want:   Overflow{Limit: 131072, Requested: 140012, Prompt: 135012, Completion: 5000},
			wantOK: true,
		},
		{
			name:   "other fields and case",
			body:   `{"id":"x","error":{"code":"context_length_exceeded","message":"this model's MAXIMUM context length is 200000 tokens. however, YOU REQUESTED 210000 tokens (200000 in the messages, 10000 in the completion).","extra":[1,2]}}`,
			want:   Overflow{Limit: 200000, Requested: 210000, Prompt: 200000, Completion: 10000},
			wantOK: true,
		},

		{name: "not JSON", body: deepseekText},
		{name: "empty", body: ""},
		{name: "an array", body: `[` + errorBody(deepseekText, invalid, invalid) + `]`},
		{name: "error as a string", body: `{"error":"This model's maximum context length is 131072 tokens. However, you requested 140012 tokens."}`},
		{name: "message not a string", body: `{"error":{"message":131072,"code":"context_length_exceeded"}}`},
		{name: "another code", body: errorBody(deepseekText, `"server_error"`, `"rate_limit_exceeded"`)},
		{name: "no code or type", body: rawErrorBody(resultedText, "")},
		{name: "a numeric code", body: `{"error":{"code":400,"message":"The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`},
		{name: "no figures", body: errorBody("Your input exceeds the context window of this model. Please adjust your input and try again.", invalid, ctxLen)},
		{name: "another invalid request", body: errorBody("Invalid max_tokens value, the valid range of max_tokens is [1, 8192]", invalid, invalid)},
		{name: "limit alone", body: errorBody("This model's maximum context length is 131072 tokens. Please reduce the length of the messages.", invalid, ctxLen)},
		{name: "requested alone", body: errorBody("However, you requested 140012 tokens (135012 in the messages, 5000 in the completion).", invalid, ctxLen)},
		{name: "a limit of 0", body: errorBody("This model's maximum context length is 0 tokens. However, your messages resulted in 10 tokens.", invalid, ctxLen)},
		{name: "nothing requested", body: errorBody("This model's maximum context length is 4096 tokens. However, your messages resulted in 0 tokens.", invalid, ctxLen)},
		{name: "a figure too large", body: errorBody("This model's maximum context length is 99999999999999999999 tokens. However, your messages resulted in 10 tokens.", invalid, ctxLen)},
		{name: "a part too large", body: errorBody("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (99999999999999999999 in the messages, 0 in the completion).", invalid, ctxLen)},
		{name: "misplaced separators", body: errorBody("This model's maximum context length is 131,0720 tokens. However, your messages resulted in 140,012 tokens.", invalid, ctxLen)},
		{name: "a negative figure", body: errorBody("This model's maximum context length is -5 tokens. However, your messages resulted in 10 tokens.", invalid, ctxLen)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseOverflow([]byte(tt.body))
			if ok != tt.wantOK || got != tt.want {
				t.Errorf("got %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func FuzzParseOverflow(f *testing.F) {
	for _, text := range []string{deepseekText, resultedText, requestText, inputText} {
		f.Add([]byte(errorBody(text, `"invalid_request_error"`, `"context_length_exceeded"`)))
	}
	f.Add([]byte(`{"error":{"message":"This model's maximum context length is 1,000 tokens. However, you requested 9,999,999 tokens (1, in the messages, ,5 in the completion)","code":"context_length_exceeded"}}`))
	f.Add([]byte(`{"error":{"message":"you requested 5 tokens ((((","type":"invalid_request_error"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		o, ok := ParseOverflow(body)
		if !ok {
			if o != (Overflow{}) {
				t.Fatalf("got %+v with ok false, want the zero Overflow", o)
			}
			return
		}
		for _, n := range []int{o.Limit, o.Requested, o.Prompt, o.Completion} {
			if n < 0 || n > 4*maxFigure {
				t.Fatalf("got %+v: a figure out of range", o)
			}
		}
		if o.Limit == 0 || o.Requested == 0 {
			t.Fatalf("got %+v: want a limit and a requested count", o)
		}
		// What the Counter learns from any of it keeps its bounds.
		c := newCounter(t, learnCfg())
		c.LearnOverflow("oa", 1+o.Requested%5000, o.Completion, o)
		if r := c.Ratio("oa"); r < 1 || r > maxRatio {
			t.Fatalf("got ratio %v from %+v, want within [1, %v]", r, o, maxRatio)
		}
		if l, _ := c.learnedOf(c.models.resolve("oa"), "oa", false).limits(c.Limits("oa")); l.ContextWindow > c.Limits("oa").ContextWindow {
			t.Fatalf("got window %d from %+v, want it never raised", l.ContextWindow, o)
		}
	})
}

// overflowUpstream is an upstream double that judges prompts by its own
// tokenizer, ratio times tiktoken, and rejects those over its limit with
// the message its phrasing writes.
type overflowUpstream struct {
	limit int
	input bool    // limit is of the prompt alone
	ratio float64 // its tokens per tiktoken token
	// phrase writes the message: limit, the prompt's count split into the
	// messages and the functions, the completion counted (max_tokens).
	phrase func(limit, messages, functions, completion int) string
}

func (u overflowUpstream) count(tiktoken int) int {
	return int(math.Ceil(float64(tiktoken) * u.ratio))
}

// accepts reports whether the upstream takes a prompt of that many
// tiktoken tokens with that max_tokens.
func (u overflowUpstream) accepts(tiktoken, maxTokens int) bool {
	if u.input {
		return u.count(tiktoken) <= u.limit
	}
	return u.count(tiktoken)+maxTokens <= u.limit
}

// reject is the body of its 400; tools is the tiktoken count of the tool
// definitions within the prompt.
func (u overflowUpstream) reject(tiktoken, tools, maxTokens int) []byte {
	functions := u.count(tools)
	msg := u.phrase(u.limit, u.count(tiktoken)-functions, functions, maxTokens)
	return []byte(errorBody(msg, `"invalid_request_error"`, `"context_length_exceeded"`))
}

var (
	deepseekPhrase = func(limit, messages, functions, completion int) string {
		return fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			limit, messages+functions+completion, messages+functions, completion)
	}
	resultedPhrase = func(limit, messages, functions, _ int) string {
		return fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", limit, messages+functions)
	}
	functionsPhrase = func(limit, messages, functions, completion int) string {
		return fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the functions, and %d in the completion). Please reduce the length of the messages, functions, or completion.",
			limit, messages+functions+completion, messages, functions, completion)
	}
	inputPhrase = func(limit, messages, functions, _ int) string {
		return fmt.Sprintf("Input tokens exceed the configured limit of %d tokens. Your messages resulted in %d tokens. Please reduce the length of the messages.", limit, messages+functions)
	}
	totalPhrase = func(limit, messages, functions, completion int) string {
		return fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens. Please reduce the length of the messages.", limit, messages+functions+completion)
	}
	separatorsPhrase = func(limit, messages, functions, completion int) string {
		return strings.NewReplacer("131072", "131,072").Replace(deepseekPhrase(limit, messages, functions, completion))
	}
)

// TestLearnOverflow: an upstream rejects a prompt the gateway judged to
// fit; after LearnOverflow, fitting the same request again gives a smaller
// prompt that the upstream, by its own count, accepts.
func TestLearnOverflow(t *testing.T) {
	tests := []struct {
		name      string
		model     string
		upstream  overflowUpstream
		size      int // the history's tiktoken count
		maxTokens int
		tools     bool
	}{
		{
			name:      "DeepSeek: a smaller window than configured",
			model:     "ds",
			upstream:  overflowUpstream{limit: 12_000, ratio: 1.05, phrase: deepseekPhrase},
			size:      12_500,
			maxTokens: 1000,
		},
		{
			name:     "DeepSeek without max_tokens: 0 in the completion",
			model:    "ds",
			upstream: overflowUpstream{limit: 12_000, ratio: 1, phrase: deepseekPhrase},
			size:     12_500,
		},
		{
			name:     "OpenAI: its tokenizer counts more than tiktoken",
			model:    "oa",
			upstream: overflowUpstream{limit: 12_000, ratio: 1.15, phrase: resultedPhrase},
			size:     10_500,
		},
		{
			name:      "OpenAI with max_tokens: in the messages and in the completion",
			model:     "oa",
			upstream:  overflowUpstream{limit: 12_000, ratio: 1.1, phrase: deepseekPhrase},
			size:      9500,
			maxTokens: 2000,
		},
		{
			name:      "OpenAI with tools: the functions counted apart",
			model:     "oa",
			upstream:  overflowUpstream{limit: 11_000, ratio: 1.1, phrase: functionsPhrase},
			size:      9500,
			maxTokens: 800,
			tools:     true,
		},
		{
			name:      "OpenAI newer models: an input limit below what the window leaves",
			model:     "g5",
			upstream:  overflowUpstream{limit: 27_200, input: true, ratio: 1, phrase: inputPhrase},
			size:      28_000,
			maxTokens: 1000,
		},
		{
			name:      "a total without its parts: max_tokens is the completion",
			model:     "oa",
			upstream:  overflowUpstream{limit: 12_000, ratio: 1.1, phrase: totalPhrase},
			size:      9500,
			maxTokens: 2000,
		},
		{
			name:      "thousands separators",
			model:     "ds",
			upstream:  overflowUpstream{limit: 12_000, ratio: 1.05, phrase: separatorsPhrase},
			size:      12_500,
			maxTokens: 1000,
		},
		{
			name:     "an unknown name",
			model:    "llama",
			upstream: overflowUpstream{limit: 6000, ratio: 1.2, phrase: resultedPhrase},
			size:     5500,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCounter(t, learnCfg())
			h := sized(t, c, tt.model, tt.size)
			var tools []chat.Tool
			if tt.tools {
				tools = decodeTools(t, cookbookTools)
			}
			toolTokens := sum(c, tt.model, nil, tools) - sum(c, tt.model, nil, nil)
			sent, err := c.Fit(tt.model, h.msgs, tools, tt.maxTokens, 0)
			if err != nil {
				t.Fatal(err)
			}
			if sent.DroppedMessages != 0 || tt.upstream.accepts(sent.PromptTokens, tt.maxTokens) {
				t.Fatalf("set-up: %d dropped, upstream accepts %d tokens; want a whole history it rejects", sent.DroppedMessages, sent.PromptTokens)
			}
			o, ok := ParseOverflow(tt.upstream.reject(sent.PromptTokens, toolTokens, tt.maxTokens))
			if !ok {
				t.Fatalf("ParseOverflow: not an overflow")
			}

			c.LearnOverflow(tt.model, sent.PromptTokens, tt.maxTokens, o)
			again, err := c.Fit(tt.model, h.msgs, tools, tt.maxTokens, 0)
			if err != nil {
				t.Fatal(err)
			}
			if again.PromptTokens >= sent.PromptTokens {
				t.Errorf("got %d tokens again, want fewer than the %d sent", again.PromptTokens, sent.PromptTokens)
			}
			if !tt.upstream.accepts(again.PromptTokens, tt.maxTokens) {
				t.Errorf("got %d tokens again, %d by the upstream's count with %d for the completion: over its limit %d",
					again.PromptTokens, tt.upstream.count(again.PromptTokens), tt.maxTokens, tt.upstream.limit)
			}
		})
	}
}

// TestLearnOverflowNoFit: when the messages that must stay exceed the
// limit the upstream reported, fitting again fails with the gateway's own
// 400, which is what the client then sees.
func TestLearnOverflowNoFit(t *testing.T) {
	c := newCounter(t, learnCfg())
	h := &history{tb: t}
	h.text("sys", "system", 20).text("u1", "user", 500).text("a1", "assistant", 500).text("u2", "user", 3000)
	u := overflowUpstream{limit: 3000, ratio: 1, phrase: resultedPhrase}
	sent, err := c.Fit("oa", h.msgs, nil, 0, 0)
	if err != nil || u.accepts(sent.PromptTokens, 0) {
		t.Fatalf("set-up: got %v, upstream accepts %d tokens; want a history it rejects", err, sent.PromptTokens)
	}
	o, ok := ParseOverflow(u.reject(sent.PromptTokens, 0, 0))
	if !ok {
		t.Fatal("ParseOverflow: not an overflow")
	}
	c.LearnOverflow("oa", sent.PromptTokens, 0, o)
	_, err = c.Fit("oa", h.msgs, nil, 0, 0)
	var ce *chat.Error
	if !errors.As(err, &ce) {
		t.Fatalf("got error %v, want a *chat.Error", err)
	}
	if got, want := [3]any{ce.Status, ce.Code, ce.Param}, [3]any{http.StatusBadRequest, CodeContextLengthExceeded, "messages"}; got != want {
		t.Errorf("got %v, want %v", got, want)
	}
	if !strings.Contains(ce.Message, "maximum context length is 3000 tokens") {
		t.Errorf("got message %q, want the upstream's window in it", ce.Message)
	}
}

// TestLearnOverflowOnlyMoreCareful: what LearnOverflow learns never
// lowers the ratio or raises a window.
func TestLearnOverflowOnlyMoreCareful(t *testing.T) {
	tests := []struct {
		name       string
		learn      []Overflow // each learned from a prompt of 10,000 tiktoken tokens
		maxTokens  int
		wantRatio  float64
		wantWindow int
		wantInput  int
	}{
		{
			name:       "a larger window is ignored",
			learn:      []Overflow{{Limit: 20_000, Requested: 10_000, Prompt: 10_000}},
			wantRatio:  1,
			wantWindow: 12_000,
		},
		{
			name:       "the configured window is kept",
			learn:      []Overflow{{Limit: 12_000, Requested: 10_000, Prompt: 10_000}},
			wantRatio:  1,
			wantWindow: 12_000,
		},
		{
			name:       "a smaller count does not lower the ratio",
			learn:      []Overflow{{Limit: 9000, Requested: 9500, Prompt: 7000, Completion: 2500}},
			wantRatio:  1,
			wantWindow: 9000,
		},
		{
			name:       "the ratio rises to the upstream's count",
			learn:      []Overflow{{Limit: 12_000, Requested: 13_500, Prompt: 12_500, Completion: 1000}},
			wantRatio:  1.25,
			wantWindow: 12_000,
		},
		{
			name:       "at most to 2",
			learn:      []Overflow{{Limit: 12_000, Requested: 50_000, Prompt: 50_000}},
			wantRatio:  2,
			wantWindow: 12_000,
		},
		{
			name:       "a total less max_tokens is the prompt",
			learn:      []Overflow{{Limit: 12_000, Requested: 14_000}},
			maxTokens:  2000,
			wantRatio:  1.2,
			wantWindow: 12_000,
		},
		{
			name:       "a total less its completion is the prompt",
			learn:      []Overflow{{Limit: 12_000, Requested: 14_000, Completion: 3000}},
			maxTokens:  2000,
			wantRatio:  1.1,
			wantWindow: 12_000,
		},
		{
			name: "the smallest window and the highest ratio stay",
			learn: []Overflow{
				{Limit: 10_000, Requested: 13_000, Prompt: 13_000},
				{Limit: 11_000, Requested: 11_500, Prompt: 11_500},
				{Limit: 8000, Requested: 12_000, Prompt: 12_000},
			},
			wantRatio:  1.3,
			wantWindow: 8000,
		},
		{
			name: "an input limit is apart from the window",
			learn: []Overflow{
				{Limit: 9000, Input: true, Requested: 10_000, Prompt: 10_000},
				{Limit: 9500, Input: true, Requested: 10_000, Prompt: 10_000},
			},
			wantRatio:  1,
			wantWindow: 12_000,
			wantInput:  9000,
		},
		{
			name:       "an empty overflow teaches nothing",
			learn:      []Overflow{{}},
			wantRatio:  1,
			wantWindow: 12_000,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCounter(t, learnCfg())
			for _, o := range tt.learn {
				c.LearnOverflow("oa", 10_000, tt.maxTokens, o)
			}
			l, input := c.learnedOf(c.models.resolve("oa"), "oa", false).limits(c.Limits("oa"))
			got := [3]any{c.Ratio("oa"), l.ContextWindow, input}
			if want := [3]any{tt.wantRatio, tt.wantWindow, tt.wantInput}; math.Abs(got[0].(float64)-tt.wantRatio) > 1e-9 || got[1] != want[1] || got[2] != want[2] {
				t.Errorf("got ratio, window, input limit %v; want %v", got, want)
			}
			if got, want := c.Limits("oa").ContextWindow, 12_000; got != want {
				t.Errorf("got configured window %d, want %d", got, want)
			}
		})
	}
}
