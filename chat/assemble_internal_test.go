package chat

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzAssemblerTemplate checks that reading chunks by their learned shape
// assembles exactly what decoding every chunk does: base is a chunk with
// TEXT where a string body goes, texts the bodies (split at '|'), other a
// chunk added after every second one (another shape, a finish, usage,
// other fields: what the template must not undo or repeat).
func FuzzAssemblerTemplate(f *testing.F) {
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	f.Add(head+`{"content":"TEXT"},"logprobs":null,"finish_reason":null}]}`, "Hello| wor|ld|\\n|\"|é|", head+`{},"finish_reason":"stop"}],"x":1}`)
	f.Add(head+`{"role":"assistant","content":"TEXT","reasoning_content":"r"},"finish_reason":null}],"phasegate":{"p":1}}`, "a|b|c", `{"choices":[],"usage":{"prompt_tokens":1},"phasegate":{"p":2}}`)
	f.Add(head+`{"content":"TEXT"},"logprobs":{"content":"TEXT"},"finish_reason":null}]}`, "a|a|b", head+`{"content":"TEXT"}}]}`)
	f.Add(`{"choices":[{"index":0,"delta":{"content":"\u0041TEXT"}}],"choices":[{"index":0,"delta":{"content":"TEXT"}}]}`, "x|y", `{"id":"c2","choices":[]}`)
	f.Add(head+`{"content":"TEXT","tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`, "q|r", head+`{"content":"TEXT"}}]}`)
	f.Add(head+`{"content":"TEXT"}}],"x":1,"x":{"a": [1, 2]}}`, "a|b", `{"choices":[], "x" : 2 ,"\u0079":3,"usage":null}`)
	f.Fuzz(func(t *testing.T, base, texts, other string) {
		if len(base)+len(texts)+len(other) > 4096 {
			return
		}
		fast, ref := Assembler{}, Assembler{decodeAll: true}
		for i, text := range strings.Split(texts, "|") {
			chunks := [][]byte{[]byte(strings.ReplaceAll(base, "TEXT", text))}
			if i%2 == 1 {
				chunks = append(chunks, []byte(other))
			}
			for _, c := range chunks {
				if (fast.Add(c) == nil) != (ref.Add(c) == nil) {
					t.Fatalf("%q: one assembler took it, the other not", c)
				}
			}
		}
		got, err1 := fast.Completion()
		want, err2 := ref.Completion()
		if (err1 == nil) != (err2 == nil) || !bytes.Equal(got, want) {
			t.Fatalf("read by shape:\n%s\ndecoded:\n%s", got, want)
		}
	})
}
