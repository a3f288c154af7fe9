package protocol

import "testing"

// scanChunks are chunks as upstreams write them: a text chunk, a
// reasoning chunk, a tool-call fragment, a finish with usage.
var scanChunks = [][]byte{
	[]byte(`{"id":"chatcmpl-8f1c2d","object":"chat.completion.chunk","created":1732000000,"model":"deepseek-v4-flash","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Let me look at the failing test first, then"},"logprobs":null,"finish_reason":null}]}`),
	[]byte(`{"id":"chatcmpl-8f1c2d","object":"chat.completion.chunk","created":1732000000,"model":"deepseek-v4-flash","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":null,"reasoning_content":" the user wants the test fixed"},"logprobs":null,"finish_reason":null}]}`),
	[]byte(`{"id":"chatcmpl-8f1c2d","object":"chat.completion.chunk","created":1732000000,"model":"deepseek-v4-flash","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\": \"src/"}}]},"finish_reason":null}]}`),
	[]byte(`{"id":"chatcmpl-8f1c2d","object":"chat.completion.chunk","created":1732000000,"model":"deepseek-v4-flash","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":1200,"completion_tokens":40,"total_tokens":1240}}`),
}

// BenchmarkScanKeys is the pass-through's look at every chunk.
func BenchmarkScanKeys(b *testing.B) {
	for b.Loop() {
		for _, c := range scanChunks {
			_ = scanKeys(c)
		}
	}
}

// BenchmarkTextSpans is the guard's look at a text chunk it decoded.
func BenchmarkTextSpans(b *testing.B) {
	for b.Loop() {
		for _, c := range scanChunks[:2] {
			_, _, _ = textSpans(c)
		}
	}
}
