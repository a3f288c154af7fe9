package proxy_test

// The guard's cost over pass-through, through the real router on loopback:
//
//	go test ./proxy -run '^$' -bench '^BenchmarkGuardStream$' -benchtime 2000x -count 3

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// benchCallStream is a stream of a role, 150 text chunks, then a
// read_file call in 48 argument fragments, for the caller to finish.
func benchCallStream() *sim.Stream {
	s := sim.NewStream(testModel).Role()
	for i := range 150 {
		s.Content("word" + strings.Repeat("y", i%5) + " ")
	}
	args := []string{`{"path":"`}
	for range 46 {
		args = append(args, `src/a`)
	}
	return s.ToolCall(0, "call_1", "read_file", append(args, `.go"}`)...)
}

// BenchmarkGuardStream serves the same 200-chunk streams through
// /standard/v1 and /two-stage/v1 of one gateway and reports the CPU time
// of the whole process per request and per chunk, and allocations per
// chunk: the difference between the routes is the guard's. "tool-call"
// streams 150 text chunks, then a call in 48 argument fragments and a
// second call the guard never forwards.
func BenchmarkGuardStream(b *testing.B) {
	text := benchText(sim.NewStream(testModel).Role(), benchChunks-2).Finish("stop").Done()
	call := benchCallStream().ToolCall(1, "call_2", "read_file", `{"path":"b.go"}`).Finish("tool_calls").Done()
	streams := map[string]sim.Reply{"text": text.Reply(), "tool-call": call.Reply()}
	body := `{"model":"` + testModel + `","stream":true,"messages":[{"role":"user","content":"Read a.go."}],` +
		`"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}]}`
	for _, kind := range []string{"text", "tool-call"} {
		for _, route := range []string{"standard", "two-stage"} {
			b.Run(kind+"/"+route, func(b *testing.B) {
				reply := streams[kind]
				up, usrv := proxytest.NewServer(b, func(proxytest.Received) sim.Reply { return reply })
				gw := serveGateway(b, config(usrv), proxy.Options{TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
				perReq := benchCPU(b, gw.URL+"/"+route+"/v1/chat/completions", body)
				oneCallEach(b, up, b.N+1)
				b.ReportMetric(perReq/benchChunks, "cpu-µs/chunk")
			})
		}
	}
}

// BenchmarkGuardProfiles serves one guarded request whose turn already
// holds 20 executed calls (reads, edits and test runs whose results
// change) and whose answer is a new call, under the strict rules with the
// agent profile's cycle ceiling and under the agent profile: the
// difference is what judging by progress costs a request.
//
//	go test ./proxy -run '^$' -bench '^BenchmarkGuardProfiles$' -benchtime 2000x -count 5
func BenchmarkGuardProfiles(b *testing.B) {
	reply := sim.NewStream(testModel).Role().Content("Reading the next file. ").
		ToolCall(0, "call_new", "read_file", `{"path":"`, `src/z.go"}`).Finish("tool_calls").Done().Reply()
	var msgs strings.Builder
	msgs.WriteString(`[{"role":"user","content":"Fix the failing test."}`)
	for i := range 20 {
		name, args, result := "read_file", `{"path":"src/f`+string(rune('a'+i))+`.go"}`, "package f // v"+string(rune('a'+i))
		if i%4 == 3 {
			name, args, result = "run_tests", `{"package":"./..."}`, "FAIL "+strings.Repeat("x", i)
		}
		id := "call_" + string(rune('a'+i))
		msgs.WriteString(`,{"role":"assistant","content":null,"tool_calls":[{"id":"` + id + `","type":"function","function":{"name":"` + name + `","arguments":` + strconv.Quote(args) + `}}]}`)
		msgs.WriteString(`,{"role":"tool","tool_call_id":"` + id + `","content":` + strconv.Quote(result) + `}`)
	}
	msgs.WriteString(`]`)
	body := `{"model":"` + testModel + `","stream":true,"messages":` + msgs.String() + `,"tools":[` +
		`{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}},` +
		`{"type":"function","function":{"name":"run_tests","parameters":{"type":"object","properties":{"package":{"type":"string"}}}}}]}`
	profiles := map[string]protocol.TwoStageConfig{
		"strict": {MaxPhaseCycles: protocol.DefaultAgentMaxPhaseCycles},
		"agent":  {Profile: protocol.ProfileAgent},
	}
	for _, name := range []string{"strict", "agent"} {
		b.Run(name, func(b *testing.B) {
			up, usrv := proxytest.NewServer(b, func(proxytest.Received) sim.Reply { return reply })
			gw := serveGateway(b, config(usrv), proxy.Options{TwoStage: protocol.NewTwoStage(profiles[name], nil)})
			benchCPU(b, gw.URL+"/two-stage/v1/chat/completions", body)
			oneCallEach(b, up, b.N+1)
		})
	}
}

// BenchmarkSmallAnswer serves an agent's final answer, a small
// non-streaming answer (nine words) to a request that declares a tool,
// through /standard/v1 (the upstream's whole answer passed on),
// /two-stage/v1 (the guard asks for a stream of 13 events and builds the
// answer) and /two-stage/v1 of a guard with whole answers (it asks for the
// whole answer and reads it as a stream of its chunks: usage, opening,
// content, finish), and reports the CPU time of the whole process per request: the
// difference between the routes is the guard's.
//
//	go test ./proxy -run '^$' -bench '^BenchmarkSmallAnswer$' -benchtime 3000x -benchmem -count 5
func BenchmarkSmallAnswer(b *testing.B) {
	body := smallAnswerBody
	for _, route := range []string{"standard", "two-stage", "two-stage-whole"} {
		b.Run(route, func(b *testing.B) {
			up, usrv := smallAnswerUpstream(b)
			cfg := protocol.TwoStageConfig{WholeAnswers: route == "two-stage-whole"}
			gw := serveGateway(b, config(usrv), proxy.Options{TwoStage: protocol.NewTwoStage(cfg, nil)})
			benchCPU(b, gw.URL+"/"+strings.TrimSuffix(route, "-whole")+"/v1/chat/completions", body)
			oneCallEach(b, up, b.N+1)
		})
	}
}

// smallAnswerBody is an agent's request that declares a tool.
const smallAnswerBody = `{"model":"` + testModel + `","messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Why does the test fail?"}],` +
	`"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}]}`

// smallAnswerUpstream answers every request with the same nine words: a
// stream of 13 events to a request that asks to stream, else the whole
// completion.
func smallAnswerUpstream(b *testing.B) (*proxytest.Upstream, *httptest.Server) {
	words := []string{"The ", "handler ", "closes ", "the ", "stream ", "early, ", "so ", "tests ", "fail."}
	stream := sim.NewStream(testModel).Role().Content(words...).Finish("stop").
		Usage(24, 9, nil).Done().Reply()
	whole := sim.Completion(testModel, map[string]any{"content": strings.Join(words, "")}, "stop",
		map[string]any{"prompt_tokens": 24, "completion_tokens": 9, "total_tokens": 33})
	return proxytest.NewServer(b, func(r proxytest.Received) sim.Reply {
		if strings.Contains(string(r.Body), `"stream":true`) {
			return stream
		}
		return whole
	})
}
