package tokens

import (
	"encoding/json"
	"testing"

	"github.com/phasegate/phasegate/chat"
)

func newCounter(tb testing.TB, cfg Config) *Counter {
	tb.Helper()
	c, err := New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return c
}

func msg(tb testing.TB, fields map[string]any) chat.Message {
	tb.Helper()
	m, err := chat.NewMessageFields(fields)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func decodeMessages(tb testing.TB, s string) []chat.Message {
	tb.Helper()
	var ms []chat.Message
	if err := json.Unmarshal([]byte(s), &ms); err != nil {
		tb.Fatal(err)
	}
	return ms
}

func decodeTools(tb testing.TB, s string) []chat.Tool {
	tb.Helper()
	var ts []chat.Tool
	if err := json.Unmarshal([]byte(s), &ts); err != nil {
		tb.Fatal(err)
	}
	return ts
}

// The examples of OpenAI's cookbook "How to count tokens with tiktoken"
// (examples/How_to_count_tokens_with_tiktoken.ipynb in openai/openai-cookbook,
// sections 6 and 7), whose outputs show the prompt_tokens the API reported:
// 129 for gpt-3.5-turbo and gpt-4 (cl100k_base), 124 for gpt-4o and
// gpt-4o-mini (o200k_base); with the weather tool, 105 and 101.
const (
	cookbookMessages = `[
		{"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
		{"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
		{"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
		{"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
		{"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to do better."},
		{"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client deliverable."}
	]`
	cookbookToolMessages = `[
		{"role": "system", "content": "You are a helpful assistant that can answer to questions about the weather."},
		{"role": "user", "content": "What's the weather like in San Francisco?"}
	]`
	cookbookTools = `[{
		"type": "function",
		"function": {
			"name": "get_current_weather",
			"description": "Get the current weather in a given location",
			"parameters": {
				"type": "object",
				"properties": {
					"location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
					"unit": {"type": "string", "description": "The unit of temperature to return", "enum": ["celsius", "fahrenheit"]}
				},
				"required": ["location"]
			}
		}
	}]`
)

func TestCountCookbook(t *testing.T) {
	c := newCounter(t, DefaultConfig())
	tests := []struct {
		name     string
		model    string
		messages string
		tools    string
		want     int
	}{
		{"messages gpt-4", "gpt-4", cookbookMessages, "", 129},
		{"messages gpt-3.5-turbo", "gpt-3.5-turbo", cookbookMessages, "", 129},
		{"messages gpt-4o", "gpt-4o", cookbookMessages, "", 124},
		{"messages gpt-4o-mini", "gpt-4o-mini", cookbookMessages, "", 124},
		{"tools gpt-4", "gpt-4", cookbookToolMessages, cookbookTools, 105},
		{"tools gpt-4o", "gpt-4o", cookbookToolMessages, cookbookTools, 101},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tools []chat.Tool
			if tt.tools != "" {
				tools = decodeTools(t, tt.tools)
			}
			f, err := c.Fit(tt.model, decodeMessages(t, tt.messages), tools, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if f.PromptTokens != tt.want {
				t.Errorf("got %d prompt tokens, want %d", f.PromptTokens, tt.want)
			}
		})
	}
}

// TestCountMessage pins the counting rules beyond the cookbook: what adds
// to a message's count and what does not.
func TestCountMessage(t *testing.T) {
	c := newCounter(t, DefaultConfig())
	e := c.models.resolve("gpt-4o").enc
	text := func(s string) int { return c.countText(e, s) }
	reasoning := "The user wants the weather, so call the tool."
	tests := []struct {
		name string
		msg  map[string]any
		want int
	}{
		{"user", map[string]any{"role": "user", "content": "Hello there"}, 3 + text("user") + text("Hello there")},
		{"name", map[string]any{"role": "user", "name": "ann", "content": "Hi"}, 3 + text("user") + 1 + text("ann") + text("Hi")},
		{"null content", map[string]any{"role": "assistant", "content": nil}, 3 + text("assistant")},
		{"text parts", map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "one"},
			map[string]any{"type": "text", "text": " two"},
		}}, 3 + text("user") + text("one") + text(" two")},
		{"image parts", map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,AAAA", "detail": "low"}},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "https://example.com/a.png"}},
		}}, 3 + text("user") + imageLowTokens + imageTokens},
		{"tool calls with reasoning", map[string]any{
			"role": "assistant", "content": nil, "reasoning_content": reasoning,
			"tool_calls": []any{map[string]any{"id": "call_1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`}}},
		}, 3 + text("assistant") + text(reasoning) + perToolCall + text("get_weather") + text(`{"city":"Paris"}`)},
		{"tool result without id", map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "18°C"}, 3 + text("tool") + text("18°C")},
		{"unknown string field", map[string]any{"role": "assistant", "content": "x", "refusal": "no", "prefix": true}, 3 + text("assistant") + text("x") + text("no")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := msg(t, tt.msg)
			if got := c.messageTokens(e, &m); got != tt.want {
				t.Errorf("got %d tokens, want %d", got, tt.want)
			}
		})
	}
}

// TestCountToolNested checks that schema parts the cookbook's formula does
// not read still count.
func TestCountToolNested(t *testing.T) {
	c := newCounter(t, DefaultConfig())
	e := c.models.resolve("gpt-4o").enc
	flat := decodeTools(t, `[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"a":{"type":"string","description":"x"}}}}}]`)
	nested := decodeTools(t, `[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"a":{"type":"string","description":"x"},"b":{"type":"array","items":{"type":"object","properties":{"c":{"type":"integer"}}}}}}}}]`)
	if got, flatN := c.toolTokens(e, &nested[0]), c.toolTokens(e, &flat[0]); got <= flatN+5 {
		t.Errorf("nested tool: got %d tokens, want more than %d (the flat one) + 5", got, flatN)
	}
}
