package proxy_test

import (
	"testing"

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
	body := smallAnswerBody
	up, usrv := smallAnswerUpstream(b)
	gateway := func(cfg protocol.TwoStageConfig) string {
		return serveGateway(b, config(usrv), proxy.Options{TwoStage: protocol.NewTwoStage(cfg, nil)}).URL
	}
	gw := gateway(protocol.TwoStageConfig{})
	names := []string{"standard", "guard", "whole"}
	urls := []string{gw + "/standard/v1/chat/completions", gw + "/two-stage/v1/chat/completions",
		gateway(protocol.TwoStageConfig{WholeAnswers: true}) + "/two-stage/v1/chat/completions"}
	benchInterleaved(b, names, urls, []string{body, body, body})
	oneCallEach(b, up, len(names)*(b.N+1))
}
