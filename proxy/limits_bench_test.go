package proxy

import (
	"strings"
	"testing"

	"github.com/phasegate/phasegate/chat"
)

// agentBody is an ordinary agent request: a system prompt, 40 turns of
// tool calls and results, and 12 tools.
func agentBody() []byte {
	var b strings.Builder
	b.WriteString(`{"model":"deepseek-v4-flash","stream":true,"messages":[{"role":"system","content":"You are a coding agent. ` + strings.Repeat("Be careful. ", 40) + `"}`)
	for i := range 40 {
		b.WriteString(`,{"role":"user","content":"step ` + strings.Repeat("please fix the failing test ", 4) + `"}`)
		b.WriteString(`,{"role":"assistant","content":null,"tool_calls":[{"id":"c` + string(rune('a'+i%26)) + `","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"src/main.go\"}"}}]}`)
		b.WriteString(`,{"role":"tool","tool_call_id":"c` + string(rune('a'+i%26)) + `","content":"` + strings.Repeat(`package main\nfunc main() {}\n`, 20) + `"}`)
	}
	b.WriteString(`],"tools":[`)
	for i := range 12 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"type":"function","function":{"name":"tool_` + string(rune('a'+i)) + `","description":"Does a thing","parameters":{"type":"object","properties":{"path":{"type":"string"},"n":{"type":"integer"}},"required":["path"]}}}`)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkCheckBody is what the scan before decoding costs an ordinary
// request, beside the decoding itself (go test -bench CheckBody ./proxy).
func BenchmarkCheckBody(b *testing.B) {
	body := agentBody()
	l := DefaultLimits()
	b.Run("scan", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if err := checkBody(body, l); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("scan+parse", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if err := checkBody(body, l); err != nil {
				b.Fatal(err)
			}
			if _, err := chat.ParseRequest(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
