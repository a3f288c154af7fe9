package messages_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/benchdata"
	"github.com/phasegate/phasegate/messages"
)

// agentRequest is a request shaped as a coding agent's late in a
// session: a long cached system prompt, 20 tools, and turns of
// thinking, a tool call and its result of about 2 KB.
func agentRequest(turns int) []byte {
	var msgs []string
	msgs = append(msgs, `{"role":"user","content":[{"type":"text","text":"fix the failing test","cache_control":{"type":"ephemeral"}}]}`)
	result, _ := json.Marshal(strings.Repeat("line of tool output with \"quotes\" and\ttabs\n", 45))
	for i := range turns {
		msgs = append(msgs,
			fmt.Sprintf(`{"role":"assistant","content":[{"type":"thinking","thinking":"Step %d: read the next file.","signature":"c2ln"},{"type":"text","text":"Reading."},{"type":"tool_use","id":"toolu_%03d","name":"Read","input":{"file_path":"/src/file%d.go"}}]}`, i, i, i),
			fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%03d","content":%s}]}`, i, result))
	}
	var tools []string
	for i := range 20 {
		tools = append(tools, fmt.Sprintf(`{"name":"Tool%d","description":"%s","input_schema":{"type":"object","properties":{"path":{"type":"string","description":"where"}},"required":["path"]}}`, i, strings.Repeat("does things. ", 30)))
	}
	return []byte(`{"model":"deepseek-v4-pro","max_tokens":32000,"stream":true,"thinking":{"type":"enabled","budget_tokens":4000},` +
		`"system":[{"type":"text","text":` + fmt.Sprintf("%q", strings.Repeat("You are a careful coding agent. ", 300)) + `,"cache_control":{"type":"ephemeral"}}],` +
		`"messages":[` + strings.Join(msgs, ",") + `],"tools":[` + strings.Join(tools, ",") + `]}`)
}

// BenchmarkTranslate translates a 100-turn agent request (about 270 KB):
//
//	go test ./messages -run '^$' -bench '^BenchmarkTranslate$' -count 6
func BenchmarkTranslate(b *testing.B) {
	body := agentRequest(100)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := messages.Translate(body, messages.Config{DeepSeek: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStream translates a streamed answer of 200 text chunks and a
// tool call, as the chunks come (per answer):
//
//	go test ./messages -run '^$' -bench '^BenchmarkStream$' -count 6
func BenchmarkStream(b *testing.B) {
	chunks := benchdata.AnswerChunks()
	b.SetBytes(benchdata.Size(chunks))
	b.ReportAllocs()
	out := make([]byte, 0, 4096)
	for b.Loop() {
		s := messages.NewStream(messages.Reply{Model: "deepseek-v4-pro"})
		for _, c := range chunks {
			var err error
			if out, err = s.Chunk(out[:0], c, nil); err != nil {
				b.Fatal(err)
			}
		}
		out = s.End(out[:0])
	}
}

// BenchmarkChatParse is the chat route's parse of the translation of
// BenchmarkTranslate's request: the cost the chat door pays for the
// same conversation, to hold the translation's cost against.
//
//	go test ./messages -run '^$' -bench '^Benchmark(Translate|ChatParse)$' -count 6
func BenchmarkChatParse(b *testing.B) {
	tr, err := messages.Translate(agentRequest(100), messages.Config{DeepSeek: true})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(tr.Body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := chat.ParseRequest(tr.Body); err != nil {
			b.Fatal(err)
		}
	}
}
