// Package deepseek holds what the gateway does for DeepSeek's models in
// particular, where a reader looking for DeepSeek finds it:
//
//   - LeakScanner recovers the tool calls DeepSeek models write into their
//     content as text (the V3 and R1 token markup, V3.1's bare form, the
//     DSML tags of V3.2 and V4 and their variants), holding back at most a
//     marker's prefix, so the guard can judge them like native calls.
//   - The thinking-mode repairs: DeepSeek answers 400 when an assistant
//     tool-call message comes back without its reasoning_content, which
//     many clients drop; ReasoningMemory remembers it by tool call id and
//     RepairThinking puts it back.
//
// It is pure code but for ReasoningMemory, which is safe for concurrent
// use. The proxy decides which requests go to DeepSeek; the guard feeds
// the scanner.
package deepseek
