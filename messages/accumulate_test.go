package messages_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/messages"
)

// A client that streams and one that does not get the same message for
// the same answer: the SDK's accumulator over the events equals the
// message FromCompletion makes of the chat.completion the gateway's
// assembler makes of the same chunks, id and signatures included. (A
// chat.completion keeps no order between text and calls: the blocks of
// a message are thinking, text, calls, which is the order of the
// answers compared here; a stream that says text after a call keeps its
// order.)
func TestStreamEqualsMessage(t *testing.T) {
	chunk := func(delta string) string {
		return `{"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}`
	}
	finish := func(reason string) string {
		return `{"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{},"finish_reason":"` + reason + `"}]}`
	}
	usage := `{"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":8}}}`
	for _, tc := range []struct {
		name   string
		chunks []string
	}{
		{"thinking, text and a call", chunks},
		{"text", []string{chunk(`{"role":"assistant","content":""}`), chunk(`{"content":"caf\u00e9 "}`), chunk(`{"content":"\"ok\"\n\ttab"}`), finish("stop"), usage}},
		{"reasoning only", []string{chunk(`{"reasoning_content":"hmm"}`), finish("stop")}},
		{"parallel calls, one without id", []string{
			chunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"Read","arguments":"{\"path\":\"a\"}"}}]}`),
			chunk(`{"tool_calls":[{"index":1,"type":"function","function":{"name":"Read","arguments":""}}]}`),
			chunk(`{"tool_calls":[{"index":1,"function":{"arguments":"{\"path\":"}}]}`),
			chunk(`{"tool_calls":[{"index":1,"function":{"arguments":"\"b\"}"}}]}`),
			finish("tool_calls"), usage}},
		{"a call with no arguments", []string{chunk(`{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"Now","arguments":""}}]}`), finish("tool_calls")}},
		{"cut by the length limit in a call", []string{chunk(`{"content":"Reading"}`),
			chunk(`{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"Read","arguments":"{\"pa"}}]}`), finish("length"), usage}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reply := messages.Reply{Model: "claude-sonnet-4-5", InputTokens: 33}
			evs, err := sdkStream(t, translate(t, reply, tc.chunks))
			if err != nil {
				t.Fatal(err)
			}
			streamed := view(t, accumulate(t, evs))

			var asm chat.Assembler
			for _, c := range tc.chunks {
				if err := asm.Add([]byte(c)); err != nil {
					t.Fatal(err)
				}
			}
			body, err := asm.Completion()
			if err != nil {
				t.Fatal(err)
			}
			msg, err := messages.FromCompletion(reply, body)
			if err != nil {
				t.Fatal(err)
			}
			whole := view(t, decodeMessage(t, msg))
			if d := cmp.Diff(whole, streamed); d != "" {
				t.Errorf("streamed message differs from the message (-message +streamed):\n%s\ncompletion: %s", d, body)
			}
			if !strings.HasPrefix(whole.ID, "msg_") {
				t.Errorf("id %q", whole.ID)
			}
		})
	}
}
