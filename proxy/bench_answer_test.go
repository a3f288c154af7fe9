package proxy_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
)

// BenchmarkSmallAnswerInterleaved serves BenchmarkSmallAnswer's answer
// through /standard/v1, the guard, and the guard with whole answers, in
// turn, request by request, so that all see the same machine (a shared
// one's load included), and reports the CPU time of the whole process per
// request of each and each guard's ratio to /standard:
//
//	go test ./proxy -run '^$' -bench '^BenchmarkSmallAnswerInterleaved$' -benchtime 3000x -benchmem
func BenchmarkSmallAnswerInterleaved(b *testing.B) {
	body, usrv := smallAnswerBody, smallAnswerUpstream(b)
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
