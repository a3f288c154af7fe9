package chat

import (
	"encoding/json"
	"testing"
)

// FuzzOutChunk holds OutChunk.AppendJSON to json.Marshal, byte for byte,
// or both refusing: the chunks the guard writes (text, a tool-call
// fragment, a finish, the usage with its extension) with any strings,
// numbers and raw members.
func FuzzOutChunk(f *testing.F) {
	f.Add("chatcmpl-1", "m", "fp", int64(1700000000), uint8(1), "assistant", "Hi <b> & \u2028", "", "call_1", "function", "read_file", `{"path":"a"}`, "stop", `{"prompt_tokens":3}`, `{"phase":"action_phase"}`)
	f.Add("", "", "", int64(-1), uint8(0), "", "", "think", "", "", "", "", "", "", "")
	f.Add("id", "model", "", int64(0), uint8(2), "", "\xff\x00", "", "", "", "", "", "tool_calls", `{ "a" : [1, 2] }`, `not json`)
	f.Add("id", "model", "", int64(5), uint8(3), "", "", "", "", "", "", "\"", "", "[]", `{"x":"<&>"}`)
	f.Fuzz(func(t *testing.T, id, model, fp string, created int64, shape uint8, role, content, reasoning, callID, callType, name, args, finish, usage, ext string) {
		c := OutChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model, SystemFingerprint: fp}
		if usage != "" {
			c.Usage = json.RawMessage(usage)
		}
		if ext != "" {
			c.Extension = json.RawMessage(ext)
		}
		switch shape % 4 {
		case 1:
			c.Choices = []OutChoice{}
		case 2, 3:
			d := Delta{Role: role}
			if content != "" || shape&4 != 0 {
				d.Content = &content
			}
			if reasoning != "" || shape&8 != 0 {
				d.ReasoningContent = &reasoning
			}
			if callID != "" || name != "" || args != "" {
				tc := ToolCallDelta{Index: int(shape >> 4), ID: callID, Type: callType}
				tc.Function.Name, tc.Function.Arguments = name, args
				d.ToolCalls = []ToolCallDelta{tc}
			}
			ch := OutChoice{Index: int(shape >> 5), Delta: d}
			if finish != "" {
				ch.FinishReason = &finish
			}
			c.Choices = []OutChoice{ch}
			if shape%4 == 3 {
				c.Choices = append(c.Choices, OutChoice{Index: 1})
			}
		}
		want, werr := json.Marshal(c)
		got, gerr := c.AppendJSON([]byte("prefix"))
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("json.Marshal error %v, AppendJSON error %v", werr, gerr)
		}
		if werr != nil {
			if string(got) != "prefix" {
				t.Fatalf("AppendJSON failed but changed dst: %q", got)
			}
			return
		}
		if string(got) != "prefix"+string(want) {
			t.Fatalf("AppendJSON:\n got %s\nwant prefix%s", got, want)
		}
	})
}
