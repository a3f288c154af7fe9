// Package benchdata holds what the doors' benchmarks translate, so that
// the doors' figures are of the same input.
package benchdata

// AnswerChunks is a streamed answer as an upstream sends it, one chat
// completion chunk's data each: 200 text chunks, a tool call, and the
// finish with its usage.
func AnswerChunks() [][]byte {
	const pre = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"deepseek-v4-pro","system_fingerprint":"fp_1",`
	chunks := make([][]byte, 0, 202)
	for range 200 {
		chunks = append(chunks, []byte(pre+`"choices":[{"index":0,"delta":{"content":"word \"quoted\" "},"logprobs":null,"finish_reason":null}]}`))
	}
	return append(chunks,
		[]byte(pre+`"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"Read","arguments":"{\"path\":\"src/a.go\"}"}}]},"logprobs":null,"finish_reason":null}]}`),
		[]byte(pre+`"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":40,"completion_tokens":200,"total_tokens":240}}`))
}

// Size is the bytes of chunks, for testing.B.SetBytes.
func Size(chunks [][]byte) int64 {
	var n int64
	for _, c := range chunks {
		n += int64(len(c))
	}
	return n
}
