package responses_test

import (
	"testing"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/benchdata"
	"github.com/phasegate/phasegate/responses"
)

// benchRequest is a Responses client's request of the proxy's door
// benchmarks: one input, one function tool, streamed.
const benchRequest = `{"model":"deepseek-v4-pro","stream":true,"input":"Read a.go.","tools":[{"type":"function","name":"read_file",` +
	`"parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}]}`

// BenchmarkRequest is what the door does with a request before the chat
// route has it: read and checked, translated into a chat body, and the
// chat body read as the chat route reads it.
//
//	go test ./responses -run '^$' -bench '^BenchmarkRequest$' -count 6
func BenchmarkRequest(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		r, err := responses.ParseRequest([]byte(benchRequest))
		if err != nil {
			b.Fatal(err)
		}
		body, err := responses.ChatBody(r, r.Items(), responses.Target{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := chat.ParseRequest(body); err != nil {
			b.Fatal(err)
		}
		_ = responses.NewResponse(r)
	}
}

// BenchmarkStream translates the answer of the Messages door's
// BenchmarkStream (200 text chunks, a tool call, the finish with usage)
// into Responses events, as the chunks come, the events told apart as a
// writer takes them (per answer):
//
//	go test ./responses ./messages -run '^$' -bench '^BenchmarkStream$' -count 6
func BenchmarkStream(b *testing.B) {
	chunks := benchdata.AnswerChunks()
	req, err := responses.ParseRequest([]byte(benchRequest))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(benchdata.Size(chunks))
	b.ReportAllocs()
	out := make([]byte, 0, 4096)
	var events int
	for b.Loop() {
		s := responses.NewStream(responses.NewResponse(req))
		out = s.Start(out[:0])
		for _, c := range chunks {
			if out, err = s.Chunk(out[:0], c, nil); err != nil {
				b.Fatal(err)
			}
			for range s.Events(out) {
				events++
			}
		}
		out = s.End(out[:0])
		for range s.Events(out) {
			events++
		}
		if !s.Ended() {
			b.Fatal("the stream did not end")
		}
	}
	if events == 0 {
		b.Fatal("no event was made")
	}
}
