package protocol

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/phasegate/phasegate/chat"
)

// FuzzWalkCompletion checks that the chunks walked from a completion are
// read as the chunks decoded from it: each chunk decodes to the same
// chat.Chunk (or fails to, alike), and the completion assembled from them
// is the same, byte for byte.
func FuzzWalkCompletion(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","object":"chat.completion","created":1,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"message":{"role":"assistant","content":"Hi \u003cb\u003e \"x\" é","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":3},"service_tier":"default"}`,
		`{"id":"c","choices":[{"message":{"content":null,"reasoning_content":"think","tool_calls":[]},"finish_reason":"length"},{"message":{"content":"two"}}]}`,
		`{"id":"c","choices":[{"message":{"role":"","content":""},"finish_reason":null}],"usage":null}`,
		`{"id":"c","choices":[{"message":{"content":"a","content":"b"}}]}`,
		`{"id":"c","id":"d","choices":[{"message":{"content":"a"}}]}`,
		`{"id":"x","ID":"y","choices":[{"message":{"content":"a"}}]}`,
		`{"Model":"y","model":"x","choices":[{"message":{"content":"a"}}]}`,
		`{"Choices":[],"choices":[{"message":{"content":"a"}}]}`,
		`{"choices":[{"message":{"content":["a"]}}]}`,
		`{"choices":[{"message":{"content":"a","tool_calls":[{"id":"x","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}`,
		`{"choices":[]}`, `{"choices":null}`, `{}`, `null`, `[1]`, `{"choices":[{"message":{"role":1}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := walkCompletion(body)
		if !ok {
			return
		}
		want, ok := decodeCompletion(body)
		if !ok {
			t.Fatalf("walked %s, which the decoder refuses", body)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: walked %d chunks, decoded %d:\n%s\n%s", body, len(got), len(want), bytes.Join(got, []byte("\n")), bytes.Join(want, []byte("\n")))
		}
		var ga, wa chat.Assembler
		for i := range got {
			gc, gerr := chat.DecodeChunk(got[i])
			wc, werr := chat.DecodeChunk(want[i])
			if (gerr == nil) != (werr == nil) || !reflect.DeepEqual(gc, wc) {
				t.Fatalf("%s: chunk %d walked %s (%v), decoded %s (%v)", body, i, got[i], gerr, want[i], werr)
			}
			if (ga.Add(got[i]) == nil) != (wa.Add(want[i]) == nil) {
				t.Fatalf("%s: chunk %d assembled from one and not the other", body, i)
			}
		}
		gb, _ := ga.Completion()
		wb, _ := wa.Completion()
		if !bytes.Equal(gb, wb) {
			t.Fatalf("%s: assembled\n%s\nfrom the walk, and\n%s\nfrom the decoder", body, gb, wb)
		}
	})
}
