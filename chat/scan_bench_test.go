package chat

import "testing"

// BenchmarkHasToken reads an opening chunk (no token) and a text chunk.
func BenchmarkHasToken(b *testing.B) {
	chunks := [][]byte{
		[]byte(`{"id":"chatcmpl-8f1c2d","object":"chat.completion.chunk","created":1732000000,"model":"deepseek-v4-flash","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`),
		[]byte(`{"id":"chatcmpl-8f1c2d","object":"chat.completion.chunk","created":1732000000,"model":"deepseek-v4-flash","choices":[{"index":0,"delta":{"content":"Let me look"},"logprobs":null,"finish_reason":null}]}`),
	}
	for b.Loop() {
		for _, c := range chunks {
			_ = HasToken(c)
		}
	}
}
