package responses

import "testing"

// BenchmarkScanChunk reads the chunks of a stream as the translation
// does, the head learned from the first:
//
//	go test ./responses -run '^$' -bench '^BenchmarkScanChunk$' -count 6
func BenchmarkScanChunk(b *testing.B) {
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
	for range b.N {
		var head []byte
		for _, c := range chunks {
			if _, err := scanChunk(c, &head); err != nil {
				b.Fatal(err)
			}
		}
	}
}
