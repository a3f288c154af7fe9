package protocol_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/protocol"
)

// completion is a whole chat.completion whose first choice's message is
// msg (a JSON object), with usage prompt/completion and more top-level
// members (`"k":v,`).
func completion(msg, finish, usage, more string) reply {
	return reply{body: []byte(`{"id":"chatcmpl-whole","object":"chat.completion","created":1767225600,"model":"` + model + `",` + more +
		`"choices":[{"index":0,"message":` + msg + `,"logprobs":null,"finish_reason":"` + finish + `"}],"usage":` + usage + `}`)}
}

func TestTwoStageWholeAnswers(t *testing.T) {
	const used = `{"prompt_tokens":20,"completion_tokens":5,"total_tokens":25}`
	call := func(id, name, args string) string {
		return `{"id":"` + id + `","type":"function","function":{"name":"` + name + `","arguments":` + jsonText(args) + `}}`
	}
	cases := []struct {
		name    string
		stream  bool
		msgs    []string
		replies []reply
		// want is what the client reads: the content, the one call's name
		// and the finish; usage the summed usage it is told.
		content, call, finish string
		prompt                float64
		// sentStream is whether the guard asked the upstream for streams.
		sentStream bool
	}{{
		name:    "answer",
		msgs:    history(),
		replies: []reply{completion(`{"role":"assistant","content":"a.go holds the handler.","reasoning_content":"Short."}`, "stop", used, `"system_fingerprint":"fp_1","service_tier":"default",`)},
		content: "a.go holds the handler.", finish: "stop", prompt: 20,
	}, {
		name: "the first of two calls forwarded",
		msgs: history(),
		replies: []reply{completion(`{"role":"assistant","content":"Reading.","tool_calls":[`+call("call_a", "read_file", `{"path":"a.go"}`)+`,`+
			call("call_b", "read_file", `{"path":"b.go"}`)+`]}`, "tool_calls", used, "")},
		content: "Reading.", call: "read_file", finish: "tool_calls", prompt: 20,
	}, {
		name: "a duplicate refused, the model asked again",
		msgs: history(ran("call_1", "read_file", `{"path":"a.go"}`)),
		replies: []reply{
			completion(`{"role":"assistant","content":null,"tool_calls":[`+call("call_2", "read_file", `{"path": "a.go"}`)+`]}`, "tool_calls", used, ""),
			completion(`{"role":"assistant","content":"a.go is read."}`, "stop", used, ""),
		},
		content: "a.go is read.", finish: "stop", prompt: 40,
	}, {
		name:    "a client that streams gets a stream asked",
		stream:  true,
		msgs:    history(),
		replies: []reply{streamReply(stream().Role().Content("Hi.").Finish("stop").Usage(20, 5, nil).Done())},
		content: "Hi.", finish: "stop", prompt: 20, sentStream: true,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, tc.replies...)
			g := protocol.NewTwoStage(protocol.TwoStageConfig{WholeAnswers: true}, nil)
			extra := ""
			if tc.stream {
				extra = `"stream_options":{"include_usage":true}`
			}
			a := read(t, run(t, g, exchange(newRequest(t, tc.stream, tc.msgs, extra), up, protocol.Limits{})))
			// The duplicate's notice is shown to the client before the answer.
			if got := a.content; !strings.HasSuffix(got, tc.content) {
				t.Errorf("content = %q, want it to end with %q", got, tc.content)
			}
			if got := a.finish(); got != tc.finish {
				t.Errorf("finish = %q, want %q", got, tc.finish)
			}
			if tc.call != "" && (len(a.calls) != 1 || a.calls[0].Function.Name != tc.call || a.calls[0].ID != "call_a") {
				t.Errorf("calls = %+v, want call_a, %s, alone", a.calls, tc.call)
			}
			if len(a.usage) != 1 {
				t.Fatalf("usage chunks = %d, want 1", len(a.usage))
			}
			u := usageMap(t, a.usage[0])
			if u["prompt_tokens"] != tc.prompt {
				t.Errorf("usage = %v, want prompt_tokens %v, as the upstream reported", u, tc.prompt)
			}
			if last := a.chunks[len(a.chunks)-1]; last.Ext == nil || last.Ext.UsageEstimated {
				t.Errorf("usage chunk's metadata = %+v, want usage reported, not estimated", last.Ext)
			}
			for i, req := range up.sent() {
				if req.Stream != tc.sentStream || req.IncludeUsage != tc.sentStream {
					t.Errorf("upstream call %d: stream %v, include_usage %v; want %v", i, req.Stream, req.IncludeUsage, tc.sentStream)
				}
			}
		})
	}
}

// A whole answer that is no completion with a choice is an invalid
// response.
func TestTwoStageWholeAnswerInvalid(t *testing.T) {
	for _, body := range []string{`{"error":{"message":"overloaded"}}`, `<html>busy</html>`, `{"id":"x","choices":[]}`} {
		t.Run(body, func(t *testing.T) {
			up := newUpstream(t, reply{body: []byte(body)})
			g := protocol.NewTwoStage(protocol.TwoStageConfig{WholeAnswers: true}, nil)
			res := run(t, g, exchange(newRequest(t, false, history(), ""), up, protocol.Limits{}))
			var ie *protocol.InvalidResponseError
			if !errors.As(res.err, &ie) {
				t.Fatalf("err = %v, want an invalid response", res.err)
			}
		})
	}
}
