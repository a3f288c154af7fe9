package chunkscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
)

var bytesEqual = cmp.Comparer(func(a, b []byte) bool { return bytes.Equal(a, b) })

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       Fields
	}{
		{"text", `{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi \"x\""},"finish_reason":null}]}`,
			Fields{ID: []byte(`"c1"`), Content: []byte(`"Hi \"x\""`), Finish: []byte("null")}},
		{"reasoning and a call", `{"choices":[{"delta":{"reasoning_content":"r","tool_calls":[{"index":1,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}]}`,
			Fields{Reasoning: []byte(`"r"`), Calls: []Call{{Index: 1, ID: []byte(`"call_1"`), Name: []byte(`"f"`), Arguments: []byte(`"{\"a\":1}"`)}}, Finish: []byte(`"tool_calls"`)}},
		{"second choice skipped", `{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]}`,
			Fields{Content: []byte(`"a"`)}},
		{"usage and estimate", `{"choices":[],"usage":{"prompt_tokens":1},"phasegate":{"usage_estimated":true}}`,
			Fields{Usage: []byte(`{"prompt_tokens":1}`), Estimated: true}},
		{"stop sequence, vLLM", `{"choices":[{"delta":{},"finish_reason":"stop","stop_reason":"END"}]}`,
			Fields{Finish: []byte(`"stop"`), StopReason: []byte(`"END"`)}},
		{"stop sequence, SGLang", `{"choices":[{"delta":{},"finish_reason":"stop","matched_stop":"END"}]}`,
			Fields{Finish: []byte(`"stop"`), StopReason: []byte(`"END"`)}},
		{"escaped key left to the decoder", `{"choices":[{"delta":{"cont\u0065nt":"e"}}]}`,
			Fields{Content: []byte(`"e"`)}},
		{"another case left to the decoder", `{"Choices":[{"delta":{"content":"e"}}]}`,
			Fields{Content: []byte(`"e"`)}},
		{"error", `{"error":{"message":"m"}}`, Fields{Error: []byte(`{"message":"m"}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Scanner
			got, err := s.Read([]byte(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got, bytesEqual); d != "" {
				t.Errorf("fields (-want +got):\n%s", d)
			}
		})
	}
}

// A chunk that repeats the head of the first is read from "choices" on,
// and still reports the id the head holds.
func TestReadHead(t *testing.T) {
	var s Scanner
	if _, err := s.Read([]byte(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"delta":{"content":"a"}}]}`)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Read([]byte(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"delta":{"content":"b"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(got.ID) != `"c1"` || string(got.Content) != `"b"` {
		t.Errorf("got id %s content %s, want \"c1\" \"b\"", got.ID, got.Content)
	}
	if s.head.Len() == 0 {
		t.Errorf("no head learned")
	}
}

func TestReadMalformed(t *testing.T) {
	for _, data := range []string{``, `{`, `{"choices":[{"delta":{"content":"a"}}]`, `{"choices":[{"delta":{"tool_calls":[{"index":"x"}]}}]}`, `[]`} {
		var s Scanner
		if _, err := s.Read([]byte(data)); err == nil {
			t.Errorf("Read(%q) = nil error, want one", data)
		}
	}
}

func check(t *testing.T, s *Scanner, data []byte) {
	t.Helper()
	want, werr := Decode(data)
	got, gerr := s.Read(data)
	if werr != nil {
		// A value of another type where the scan does not look (a second
		// choice, a member it skips) may pass it; malformed JSON never does.
		if gerr == nil && !json.Valid(data) {
			t.Fatalf("scan accepted malformed JSON (decode: %v)", werr)
		}
		return
	}
	if gerr != nil {
		t.Fatalf("scan err %v on what decode reads", gerr)
	}
	if d := cmp.Diff(want, got, bytesEqual); d != "" {
		t.Fatalf("scan differs from decode (-decode +scan):\n%s", d)
	}
}

// FuzzRead holds the Scanner to encoding/json: a chunk a, then a chunk b
// read with the head a taught, each read as Decode reads it (or left to
// it), and the gateway's extension ext read as the chunk b with ext added
// as its last phasegate member reads. It is the one fuzz target of the
// chunk reading every door does.
func FuzzRead(f *testing.F) {
	a := `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}`
	for _, tc := range [][3]string{
		{`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi \"x\" \u00e9"},"finish_reason":null}]}`, a, `{"phase":"action_phase"}`},
		{a, `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"r","tool_calls":[{"index":1,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls","stop_reason":"x"}],"phasegate":{"usage_estimated":true,"phase":"x"}}`, `{"usage_estimated":null}`},
		{a, `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}}`, `{"phase":"complete","usage_estimated":true}`},
		{`{"usage":{"prompt_tokens":1},"choices":[]}`, `{"usage":{"prompt_tokens":1},"choices":[]}`, `{"usage_est\u0069mated":true}`},
		{`{"error":{"message":"m","type":"t","param":null,"code":"c"}}`, `{"id":"d","choices":[]}`, `{"usage_estimated":1}`},
		{`{"choices":[{"delta":{"content":null},"matched_stop":1}],"choices":[], "x":[1,2.5e3,true,false,null,{}]}`, `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":{}}`, `{}`},
		{`{"choices":[{"delta":{"tool_calls":[]},"delta":{"tool_calls":[{"index":0}]}}]}`, `{"choices":[{"delta":{"cont\u0065nt":"escaped key"}}]}`, `{}`},
		{`{"choiceſ":[{"delta":{"content":"long s"}}],"USAGE":{"prompt_tokens":1},"Choices":[]}`, a, `{}`},
		{`{"0000":[],"usAge":{}}`, `{"ChoiCes":[{"00000":{"0000000":null}},false]}`, `{}`},
		{`{"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `,"choices":[]}`, a, `{}`},
	} {
		f.Add([]byte(tc[0]), []byte(tc[1]), []byte(tc[2]))
	}
	f.Fuzz(func(t *testing.T, a, b, ext []byte) {
		var s Scanner
		check(t, &s, a)
		check(t, &s, b)
		checkExtension(t, b, ext)
	})
}

// checkExtension holds Extension to Decode of the chunk with ext added.
func checkExtension(t *testing.T, data, ext []byte) {
	t.Helper()
	var probe map[string]json.RawMessage
	if json.Unmarshal(ext, &probe) != nil {
		return // the guard's extension is always an object
	}
	want, werr := Decode(chat.WithExtension(data, "phasegate", ext))
	got, gerr := Decode(data)
	if gerr == nil {
		got.Estimated, gerr = Extension(ext, got.Estimated)
	}
	if werr != nil || gerr != nil {
		return // check holds the scan and the decoder to the same errors
	}
	if want.Estimated != got.Estimated {
		t.Fatalf("estimated = %v, want %v as read from the chunk with its extension", got.Estimated, want.Estimated)
	}
}

// BenchmarkRead reads the chunks of a stream as a door does, the head
// learned from the first:
//
//	go test ./internal/chunkscan -run '^$' -bench '^BenchmarkRead$' -count 6
func BenchmarkRead(b *testing.B) {
	const pre = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"deepseek-chat","system_fingerprint":"fp_1",`
	chunks := [][]byte{
		[]byte(pre + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`),
		[]byte(pre + `"choices":[{"index":0,"delta":{"content":"word \"quoted\" text"},"logprobs":null,"finish_reason":null}]}`),
		[]byte(pre + `"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":\"src/a"}}]},"logprobs":null,"finish_reason":null}]}`),
		[]byte(pre + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":40,"completion_tokens":200,"total_tokens":240}}`),
	}
	var n int64
	for _, c := range chunks {
		n += int64(len(c))
	}
	b.SetBytes(n)
	b.ReportAllocs()
	for b.Loop() {
		var s Scanner
		for _, c := range chunks {
			if _, err := s.Read(c); err != nil {
				b.Fatal(err)
			}
		}
	}
}
