package proxy_test

// What the Responses door costs over the chat route, through the real
// router on loopback:
//
//	go test ./proxy -run '^$' -bench '^BenchmarkResponsesStream$' -benchtime 2000x -count 5

import (
	"testing"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// BenchmarkResponsesStream serves the same guarded 200-chunk stream (150
// text chunks, then a call in 48 argument fragments) to a chat client on
// /v1/chat/completions and to a Responses client on /v1/responses, store
// on, and reports the CPU time of the whole process per request: the
// ratio of the two is what the translation costs.
func BenchmarkResponsesStream(b *testing.B) {
	reply := benchCallStream().Finish("tool_calls").Usage(40, 200, nil).Done().Reply()
	const params = `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`
	bodies := map[string]string{
		"chat": `{"model":"` + testModel + `","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Read a.go."}],` +
			`"tools":[{"type":"function","function":{"name":"read_file","parameters":` + params + `}}]}`,
		"responses": `{"model":"` + testModel + `","stream":true,"input":"Read a.go.","tools":[{"type":"function","name":"read_file","parameters":` + params + `}]}`,
	}
	paths := map[string]string{"chat": "/v1/chat/completions", "responses": "/v1/responses"}
	for _, door := range []string{"chat", "responses"} {
		b.Run(door, func(b *testing.B) {
			_, usrv := proxytest.NewServer(b, func(proxytest.Received) sim.Reply { return reply })
			gw := serveGateway(b, config(usrv), proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
			benchCPU(b, gw.URL+paths[door], bodies[door])
		})
	}
}

// BenchmarkMessagesStream serves the same guarded 200-chunk stream as
// BenchmarkResponsesStream to a chat client on /v1/chat/completions and
// to a Messages client on /v1/messages, and reports the CPU time of the
// whole process per request: the ratio of the two is what the Messages
// door's translation costs.
//
//	go test ./proxy -run '^$' -bench '^BenchmarkMessagesStream$' -benchtime 1500x -count 6
func BenchmarkMessagesStream(b *testing.B) {
	reply := benchCallStream().Finish("tool_calls").Usage(40, 200, nil).Done().Reply()
	const params = `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`
	bodies := map[string]string{
		"chat": `{"model":"` + testModel + `","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Read a.go."}],` +
			`"tools":[{"type":"function","function":{"name":"read_file","parameters":` + params + `}}]}`,
		"messages": `{"model":"` + testModel + `","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"Read a.go."}],` +
			`"tools":[{"name":"read_file","input_schema":` + params + `}]}`,
	}
	paths := map[string]string{"chat": "/v1/chat/completions", "messages": "/v1/messages"}
	for _, door := range []string{"chat", "messages"} {
		b.Run(door, func(b *testing.B) {
			_, usrv := proxytest.NewServer(b, func(proxytest.Received) sim.Reply { return reply })
			gw := serveGateway(b, config(usrv), proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
			benchCPU(b, gw.URL+paths[door], bodies[door])
		})
	}
}
