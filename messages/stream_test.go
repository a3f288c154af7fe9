package messages_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/messages"
)

// chunks are the chunks of a DeepSeek answer in thinking mode that calls
// a tool: reasoning, text, a call in fragments, the finish, the usage.
var chunks = []string{
	`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"deepseek-v4-pro","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""},"finish_reason":null}]}`,
	`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"deepseek-v4-pro","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"need \"ls\""},"finish_reason":null}]}`,
	`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"deepseek-v4-pro","choices":[{"index":0,"delta":{"content":"Let me ","reasoning_content":null},"finish_reason":null}]}`,
	`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"deepseek-v4-pro","choices":[{"index":0,"delta":{"content":"look.\n"},"finish_reason":null}]}`,
	`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"deepseek-v4-pro","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_00_x","type":"function","function":{"name":"Bash","arguments":""}}]},"finish_reason":null}]}`,
	`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"deepseek-v4-pro","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"command\":"}}]},"finish_reason":null}]}`,
	`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"deepseek-v4-pro","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":" \"ls\"}"}}]},"finish_reason":null}]}`,
	`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"deepseek-v4-pro","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
	`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"deepseek-v4-pro","choices":[],"usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150,"prompt_cache_hit_tokens":100,"prompt_cache_miss_tokens":20}}`,
}

// translate runs chunks through a Stream and ends it.
func translate(t *testing.T, r messages.Reply, chunks []string) []byte {
	t.Helper()
	s := messages.NewStream(r)
	var out []byte
	for i, c := range chunks {
		var err error
		if out, err = s.Chunk(out, []byte(c), []byte(`{"phase":"tool_phase"}`)); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
	}
	return s.End(out)
}

func TestStream(t *testing.T) {
	sse := translate(t, messages.Reply{Model: "deepseek-v4-pro", InputTokens: 118}, chunks)
	evs := parseEvents(t, sse)
	want := []string{"message_start",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"message_delta", "message_stop"}
	if d := cmp.Diff(want, eventNames(evs)); d != "" {
		t.Fatalf("events (-want +got):\n%s", d)
	}
	start := evs[0].data["message"].(map[string]any)
	if u := start["usage"].(map[string]any); u["input_tokens"] != float64(118) || start["model"] != "deepseek-v4-pro" {
		t.Errorf("message_start = %v, want the gateway's count and the requested model", start)
	}
	if d := evs[3].data["delta"].(map[string]any); d["type"] != "signature_delta" || d["signature"] == "" {
		t.Errorf("the thinking block ends with %v, want its signature", d)
	}

	sdkEvents, err := sdkStream(t, sse)
	if err != nil {
		t.Fatalf("the SDK's stream: %v", err)
	}
	got := view(t, accumulate(t, sdkEvents))
	wantMsg := message{ID: got.ID, Model: "deepseek-v4-pro", StopReason: "tool_use", Input: 20, CacheRead: 100, Output: 30, Content: []block{
		{Type: "thinking", Thinking: `need "ls"`, Signature: got.Content[0].Signature}, {Type: "text", Text: "Let me look.\n"},
		{Type: "tool_use", ID: "call_00_x", Name: "Bash", Input: map[string]any{"command": "ls"}}}}
	if d := cmp.Diff(wantMsg, got); d != "" {
		t.Errorf("accumulated message (-want +got):\n%s", d)
	}
}

// A ping may come at any time, before the message too; clients skip it.
func TestStreamPing(t *testing.T) {
	s := messages.NewStream(messages.Reply{Model: "m"})
	out := s.Ping(nil)
	out, _ = s.Chunk(out, []byte(`{"id":"c","choices":[{"delta":{"content":"a"}}]}`), nil)
	out = s.Ping(out)
	out = s.End(out)
	if d := cmp.Diff([]string{"ping", "message_start", "content_block_start", "content_block_delta", "ping", "content_block_stop", "message_delta", "message_stop"},
		eventNames(parseEvents(t, out))); d != "" {
		t.Fatalf("events (-want +got):\n%s", d)
	}
	evs, err := sdkStream(t, out)
	if err != nil || len(evs) != 6 {
		t.Fatalf("the SDK read %d events, err %v; want 6 and no error", len(evs), err)
	}
}

// An error after the first byte is an error event the SDK turns into an
// error of the right type; nothing follows it.
func TestStreamFail(t *testing.T) {
	for _, tc := range []struct {
		name, chunk string
		fail        *chat.Error
		want        messages.ErrorType
	}{
		{name: "in-band chunk", chunk: `{"error":{"message":"upstream cut the stream","type":"upstream_error","param":null,"code":"stream_cut"}}`, want: messages.TypeAPI},
		{name: "timeout chunk", chunk: `{"error":{"message":"no event for 60s","type":"timeout_error","param":null,"code":null}}`, want: messages.TypeTimeout},
		{name: "Fail", fail: &chat.Error{Status: 503, Message: "busy", Type: chat.TypeServer}, want: messages.TypeOverloaded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := messages.NewStream(messages.Reply{Model: "m"})
			out, _ := s.Chunk(nil, []byte(`{"id":"c","choices":[{"delta":{"reasoning_content":"a"}}]}`), nil)
			if tc.fail != nil {
				out = s.Fail(out, tc.fail)
			} else {
				var err error
				if out, err = s.Chunk(out, []byte(tc.chunk), nil); err != nil {
					t.Fatal(err)
				}
			}
			if more := s.End(nil); len(more) > 0 || !s.Ended() {
				t.Errorf("the stream goes on after its error: %q", more)
			}
			evs := parseEvents(t, out)
			if d := cmp.Diff([]string{"message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop", "error"}, eventNames(evs)); d != "" {
				t.Fatalf("events (-want +got):\n%s", d)
			}
			_, err := sdkStream(t, out)
			var ae *anthropic.Error
			if !errors.As(err, &ae) || string(ae.Type()) != string(tc.want) {
				t.Fatalf("the SDK's error = %v, want an %s", err, tc.want)
			}
		})
	}
}

// A stream with no chunk still opens and ends a message.
func TestStreamEmpty(t *testing.T) {
	s := messages.NewStream(messages.Reply{Model: "m", InputTokens: 7})
	out := s.End(nil)
	evs, err := sdkStream(t, out)
	if err != nil {
		t.Fatal(err)
	}
	m := accumulate(t, evs)
	if m.StopReason != "end_turn" || len(m.Content) != 0 || m.Usage.InputTokens != 7 || !strings.HasPrefix(s.ID(), "msg_") || m.ID != s.ID() {
		t.Errorf("message = %s", m.RawJSON())
	}
}

// A call that goes on after another block opened cannot be said: the
// stream refuses it and stays well formed.
func TestStreamInterleaved(t *testing.T) {
	s := messages.NewStream(messages.Reply{Model: "m"})
	var out []byte
	for _, c := range []string{
		`{"id":"c","choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{"}}]}}]}`,
		`{"id":"c","choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}`,
	} {
		out, _ = s.Chunk(out, []byte(c), nil)
	}
	out, err := s.Chunk(out, []byte(`{"id":"c","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]}}]}`), nil)
	if !errors.Is(err, messages.ErrInterleaved) {
		t.Errorf("err = %v, want ErrInterleaved", err)
	}
	parseEvents(t, s.End(out))
}

func TestStreamMalformedChunk(t *testing.T) {
	s := messages.NewStream(messages.Reply{Model: "m"})
	out, err := s.Chunk([]byte("x"), []byte(`{"choices":`), nil)
	if err == nil || string(out) != "x" {
		t.Errorf("Chunk = %q, %v; want dst unchanged and an error", out, err)
	}
}
