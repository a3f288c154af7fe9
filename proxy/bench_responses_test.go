package proxy_test

// What the Responses and Messages doors cost over the chat route, through
// the real router on loopback:
//
//	go test ./proxy -run '^$' -bench '^BenchmarkResponsesStream$' -benchtime 2000x -count 5
//	go test ./proxy -run '^$' -bench '^BenchmarkMessagesStream$' -benchtime 2000x -count 5
//	go test ./proxy -run '^$' -bench '^BenchmarkDoorsInterleaved$' -benchtime 1500x -count 3

import (
	"strings"
	"testing"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// doorBench is the same guarded 200-chunk stream (150 text chunks, then a
// call in 48 argument fragments) asked for by a chat client on
// /v1/chat/completions, by a Responses client on /v1/responses, store on,
// and by a Messages client on /v1/messages: the request body and path of
// each door.
func doorBench() (reply sim.Reply, bodies, paths map[string]string) {
	reply = benchCallStream().Finish("tool_calls").Usage(40, 200, nil).Done().Reply()
	const params = `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`
	bodies = map[string]string{
		"chat": `{"model":"` + testModel + `","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Read a.go."}],` +
			`"tools":[{"type":"function","function":{"name":"read_file","parameters":` + params + `}}]}`,
		"responses": `{"model":"` + testModel + `","stream":true,"input":"Read a.go.","tools":[{"type":"function","name":"read_file","parameters":` + params + `}]}`,
		"messages": `{"model":"` + testModel + `","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"Read a.go."}],` +
			`"tools":[{"name":"read_file","input_schema":` + params + `}]}`,
	}
	paths = map[string]string{"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
	return reply, bodies, paths
}

// BenchmarkResponsesStream serves doorBench's stream to the chat and
// Responses doors and reports the CPU time of the whole process per
// request: the ratio of the two is what the translation costs.
func BenchmarkResponsesStream(b *testing.B) { benchDoors(b, "chat", "responses") }

// BenchmarkMessagesStream is BenchmarkResponsesStream for the Messages
// door.
func BenchmarkMessagesStream(b *testing.B) { benchDoors(b, "chat", "messages") }

func benchDoors(b *testing.B, doors ...string) {
	reply, bodies, paths := doorBench()
	for _, door := range doors {
		b.Run(door, func(b *testing.B) {
			up, usrv := proxytest.NewServer(b, func(proxytest.Received) sim.Reply { return reply })
			gw := serveGateway(b, config(usrv), proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
			benchCPU(b, gw.URL+paths[door], bodies[door])
			oneCallEach(b, up, b.N+1)
		})
	}
}

// BenchmarkDoorsInterleaved serves doorBench's stream to the three doors
// in turn, request by request, through one gateway, so that all see the
// same machine (a shared one's load included), and reports the CPU time
// of the whole process per request of each, and each ratio to chat:
//
//	go test ./proxy -run '^$' -bench '^BenchmarkDoorsInterleaved$' -benchtime 1500x -count 3
func BenchmarkDoorsInterleaved(b *testing.B) {
	reply, bodies, paths := doorBench()
	up, usrv := proxytest.NewServer(b, func(proxytest.Received) sim.Reply { return reply })
	gw := serveGateway(b, config(usrv), proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
	doors := []string{"chat", "responses", "messages"}
	urls, doorBodies := make([]string, len(doors)), make([]string, len(doors))
	for i, door := range doors {
		urls[i], doorBodies[i] = gw.URL+paths[door], bodies[door]
	}
	benchInterleaved(b, doors, urls, doorBodies)
	oneCallEach(b, up, len(doors)*(b.N+1))
}

// BenchmarkResponsesStore is BenchmarkDoorsInterleaved's chat and
// Responses requests, and the Responses request with store off: what
// storing the response costs (its record, its items):
//
//	go test ./proxy -run '^$' -bench '^BenchmarkResponsesStore$' -benchtime 1500x -count 5
func BenchmarkResponsesStore(b *testing.B) {
	reply, bodies, paths := doorBench()
	up, usrv := proxytest.NewServer(b, func(proxytest.Received) sim.Reply { return reply })
	gw := serveGateway(b, config(usrv), proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
	unstored := strings.Replace(bodies["responses"], `"stream":true`, `"stream":true,"store":false`, 1)
	if unstored == bodies["responses"] {
		b.Fatal("the Responses request does not say stream: true")
	}
	names := []string{"chat", "stored", "unstored"}
	urls := []string{gw.URL + paths["chat"], gw.URL + paths["responses"], gw.URL + paths["responses"]}
	benchInterleaved(b, names, urls, []string{bodies["chat"], bodies["responses"], unstored})
	oneCallEach(b, up, len(names)*(b.N+1))
}
