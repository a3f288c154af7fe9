package proxy_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// A client that leaves a Responses stream that is not resumable cancels
// the upstream call at once, as on the chat route, on both protocols.
func TestResponsesClientLeavesCancelsUpstream(t *testing.T) {
	for _, path := range []string{"/v1/responses", "/standard/v1/responses"} {
		t.Run(path, func(t *testing.T) {
			up, gw := rsGateway(t, proxytest.Script(sim.Reply{Events: sim.NewStream(testModel).Role().Content("thinking...").Events(), Hang: true}))
			ctx, cancel := context.WithCancel(testContext(t))
			defer cancel()
			body := `{"model":"` + testModel + `","input":"hi","stream":true}`
			resp := post(t, ctx, gw, path, body, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			// Read up to the first text delta: the upstream is mid-answer.
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() && !strings.HasPrefix(sc.Text(), "event: response.output_text.delta") {
			}
			if sc.Err() != nil {
				t.Fatalf("reading the stream: %v", sc.Err())
			}
			cancel()
			waitCancelled(t, up)
		})
	}
}
