package proxy_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// BenchmarkSmallAnswerInterleaved serves BenchmarkSmallAnswer's answer
// through /standard/v1, the guard, and the guard with whole answers, in
// turn, request by request, so that all see the same machine (a shared
// one's load included), and reports the CPU time of the whole process per
// request of each and each guard's ratio to /standard:
//
//	go test ./proxy -run '^$' -bench '^BenchmarkSmallAnswerInterleaved$' -benchtime 3000x -benchmem
func BenchmarkSmallAnswerInterleaved(b *testing.B) {
	words := []string{"The ", "handler ", "closes ", "the ", "stream ", "early, ", "so ", "tests ", "fail."}
	stream := sim.NewStream(testModel).Role().Content(words...).Finish("stop").
		Usage(24, 9, nil).Done().Reply()
	whole := sim.Completion(testModel, map[string]any{"content": strings.Join(words, "")}, "stop",
		map[string]any{"prompt_tokens": 24, "completion_tokens": 9, "total_tokens": 33})
	body := `{"model":"` + testModel + `","messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Why does the test fail?"}],` +
		`"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}]}`
	_, usrv := proxytest.NewServer(b, func(r proxytest.Received) sim.Reply {
		if strings.Contains(string(r.Body), `"stream":true`) {
			return stream
		}
		return whole
	})
	gateway := func(cfg protocol.TwoStageConfig) string {
		return serveGateway(b, config(usrv), proxy.Options{TwoStage: protocol.NewTwoStage(cfg, nil)}).URL
	}
	gw := gateway(protocol.TwoStageConfig{})
	names := []string{"standard", "guard", "whole"}
	urls := []string{gw + "/standard/v1/chat/completions", gw + "/two-stage/v1/chat/completions",
		gateway(protocol.TwoStageConfig{WholeAnswers: true}) + "/two-stage/v1/chat/completions"}
	pairs := make([]*benchPair, len(names))
	for i := range names {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		b.Cleanup(tr.CloseIdleConnections)
		pairs[i] = &benchPair{client: &http.Client{Transport: tr}}
		pairs[i].roundTrip(b, urls[i], body)
	}
	cpu := make([]time.Duration, len(names))
	b.ReportAllocs()
	b.ResetTimer()
	for n := range b.N {
		for k := range names {
			i := (n + k) % len(names) // each route first in turn
			t0 := cpuTime(b)
			pairs[i].roundTrip(b, urls[i], body)
			cpu[i] += cpuTime(b) - t0
		}
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(b.N) }
	for i, name := range names {
		b.ReportMetric(per(cpu[i]), name+"-cpu-µs/req")
		if i > 0 {
			b.ReportMetric(per(cpu[i])/per(cpu[0]), name+"/standard")
		}
	}
}
