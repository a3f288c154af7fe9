package proxy

import "testing"

// scanChunk is a chunk of a resumable guarded stream: the upstream's
// bytes with the phase metadata spliced in last.
var scanChunk = []byte(`{"id":"chatcmpl-8f1c2d","object":"chat.completion.chunk","created":1732000000,"model":"deepseek-v4-flash","choices":[{"index":0,"delta":{"content":"Let me look at the failing test first, then"},"logprobs":null,"finish_reason":null}],"phasegate":{"phase":"tools","phase_index":2}}`)

// BenchmarkPhaseIndex is the resumable stream's look at every chunk.
func BenchmarkPhaseIndex(b *testing.B) {
	for b.Loop() {
		_, _ = phaseIndex(scanChunk)
	}
}

// BenchmarkFinishReasons is the trace's look at every chunk written.
func BenchmarkFinishReasons(b *testing.B) {
	for b.Loop() {
		_ = finishReasons(nil, scanChunk)
	}
}
