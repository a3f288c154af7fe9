package chunkscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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
	if len(s.head) == 0 {
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

// The scan reads what encoding/json reads, or leaves the chunk to it.
func FuzzRead(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi \"x\" \u00e9"},"finish_reason":null}]}`,
		`{"choices":[{"delta":{"reasoning_content":"r","tool_calls":[{"index":1,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls","stop_reason":"x"}],"phasegate":{"usage_estimated":true,"phase":"x"}}`,
		`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}}`,
		`{"error":{"message":"m","type":"t","param":null,"code":"c"}}`,
		`{"choices":[{"delta":{"content":null},"matched_stop":1}],"choices":[], "x":[1,2.5e3,true,false,null,{}]}`,
		`{"choices":[{"delta":{"tool_calls":[]},"delta":{"tool_calls":[{"index":0}]}}]}`,
		`{"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `,"choices":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { check(t, &Scanner{}, data) })
}

// A chunk read with the head another chunk taught reads as
// encoding/json reads it, whatever the two chunks are.
func FuzzReadHead(f *testing.F) {
	a := `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}`
	for _, b := range []string{
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"there"},"finish_reason":null}]}`,
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1},"id":"d"}`,
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":{}}`,
		`{"id":"d","choices":[]}`,
	} {
		f.Add([]byte(a), []byte(b))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var s Scanner
		_, _ = s.Read(a)
		check(t, &s, b)
	})
}
