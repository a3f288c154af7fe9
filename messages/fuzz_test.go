package messages_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/messages"
)

// Any body translates to a chat request the pipeline accepts or to a
// 400 in OpenAI's shape (which the door shapes as Anthropic's); nothing
// panics.
func FuzzTranslate(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"url","url":"u"}}]},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"c","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"c","content":[{"type":"text","text":"r"}],"is_error":true}]}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":{"type":"object"}},{"type":"web_search_20250305","name":"w"}],"tool_choice":{"type":"tool","name":"f","disable_parallel_tool_use":true},"thinking":{"type":"enabled","budget_tokens":2000},"stream":true,"top_k":3,"temperature":0,"stop_sequences":["x"],"metadata":{"user_id":"u"}}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"redacted_thinking","data":"d"},{"type":"server_tool_use","id":"s","name":"web_search","input":{}}]}],"context_management":{},"x\u0041":1}`,
	} {
		f.Add([]byte(s), true, false)
	}
	f.Fuzz(func(t *testing.T, body []byte, deepseek, small bool) {
		cfg := messages.Config{DeepSeek: deepseek, Images: deepseek, TopK: !deepseek}
		if small {
			cfg.Limits = messages.Limits{MaxDepth: 6, MaxMessages: 3, MaxBlocks: 4, MaxTools: 2}
			cfg.HostedTools = messages.HostedRefuse
		}
		for _, translate := range []func([]byte, messages.Config) (*messages.Translation, error){messages.Translate, messages.CountBody} {
			tr, err := translate(body, cfg)
			if err == nil {
				if _, perr := chat.ParseRequest(tr.Body); perr != nil {
					t.Fatalf("translation %s is refused by the chat parser: %v", tr.Body, perr)
				}
				continue
			}
			var e *chat.Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
				t.Fatalf("err = %v, want a 400 *chat.Error", err)
			}
			if _, b := messages.ErrorResponse(e); !json.Valid(b) {
				t.Fatalf("error body is not JSON: %s", b)
			}
		}
	})
}

// fuzzChunk makes the chunk op stands for; text is the fragment it
// carries.
func fuzzChunk(op byte, text string, raw []byte) string {
	q, _ := json.Marshal(text)
	idx := int(op>>4) % 3
	const head = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":`
	switch op % 9 {
	case 0:
		return head + `{"reasoning_content":` + string(q) + `}}]}`
	case 1:
		return head + `{"content":` + string(q) + `}}]}`
	case 2:
		return head + fmt.Sprintf(`{"tool_calls":[{"index":%d,"id":"call_%d","type":"function","function":{"name":"f","arguments":%s}}]}}]}`, idx, idx, q)
	case 3:
		return head + fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]}}]}`, idx, q)
	case 4:
		return head + `{},"finish_reason":"` + []string{"stop", "tool_calls", "length", "content_filter"}[idx] + `","stop_reason":` + string(q) + `}]}`
	case 5:
		return `{"id":"c","choices":[],"usage":{"prompt_tokens":` + fmt.Sprint(len(text)) + `,"completion_tokens":3,"prompt_cache_hit_tokens":1}}`
	case 6:
		return `{"error":{"message":` + string(q) + `,"type":"upstream_error","param":null,"code":"stream_cut"}}`
	case 7:
		return string(raw)
	}
	return head + `{}}]}`
}

// Chunks in any order, split anywhere, make a well-formed stream: every
// event's data is JSON of its type, blocks open and close in order, and
// the SDK reads it (or the error it ends with); nothing panics.
func FuzzStream(f *testing.F) {
	f.Add([]byte{0, 0, 1, 1, 2, 3, 3, 4, 5}, "frag\"ment\n", []byte(`{"choices":[]}`), true)
	f.Add([]byte{2, 3, 0x12, 0x13, 3, 1, 6}, "{\"a\":", []byte(`{`), false)
	f.Add([]byte{7, 1, 8, 0, 4}, "é\x00", []byte(`{"choices":[{"delta":{"content":"\u00e9"}}],"phasegate":{"usage_estimated":true}}`), true)
	f.Fuzz(func(t *testing.T, ops []byte, text string, raw []byte, end bool) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		s := messages.NewStream(messages.Reply{Model: "m", StopSequences: []string{text}})
		var out []byte
		for i, op := range ops {
			if op%9 == 8 {
				out = s.Ping(out)
				continue
			}
			lo, hi := min(i, len(text)), min(i+len(text)/2+1, len(text))
			out, _ = s.Chunk(out, []byte(fuzzChunk(op, text[lo:hi], raw)), nil)
		}
		if end {
			out = s.End(out)
		} else {
			out = s.Fail(out, &chat.Error{Status: 502, Message: text})
		}
		evs := parseEvents(t, out)
		if len(evs) == 0 || (evs[len(evs)-1].name != "message_stop" && evs[len(evs)-1].name != "error") {
			t.Fatalf("the stream ends with %v", eventNames(evs))
		}
		sdk, err := sdkStream(t, out)
		if evs[len(evs)-1].name == "error" {
			if err == nil {
				t.Fatalf("the SDK read no error from an error event")
			}
			return
		}
		if err != nil {
			t.Fatalf("the SDK cannot read the stream: %v\n%s", err, out)
		}
		accumulate(t, sdk)
	})
}
