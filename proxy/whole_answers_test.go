package proxy_test

import (
	"bytes"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// With whole answers, a client that did not ask to stream gets from the
// guard's whole upstream answer the completion it gets from the guard's
// stream of the same answer, byte for byte but for its identity (each
// answer of the double has an id of its own), and the upstream is asked
// for no stream.
func TestWholeAnswersSameCompletion(t *testing.T) {
	words := []string{"The ", "handler ", "closes ", "<b>early</b>."}
	stream := sim.NewStream(testModel).Role().Content(words...).Finish("stop").Usage(24, 9, nil).Done().Reply()
	whole := sim.Completion(testModel, map[string]any{"content": strings.Join(words, "")}, "stop",
		map[string]any{"prompt_tokens": 24, "completion_tokens": 9, "total_tokens": 33})
	body := `{"model":"` + testModel + `","messages":[{"role":"user","content":"Why?"}],` +
		`"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}]}`
	var got [2][]byte
	for i, wholeAnswers := range []bool{false, true} {
		_, usrv := proxytest.NewServer(t, func(r proxytest.Received) sim.Reply {
			streamed := bytes.Contains(r.Body, []byte(`"stream":true`))
			if streamed == wholeAnswers {
				t.Errorf("whole answers %v: the upstream was asked %s", wholeAnswers, r.Body)
			}
			if streamed {
				return stream
			}
			return whole
		})
		g := protocol.NewTwoStage(protocol.TwoStageConfig{WholeAnswers: wholeAnswers}, nil)
		gw := serveGateway(t, config(usrv), proxy.Options{TwoStage: g})
		resp := post(t, testContext(t), gw, "/two-stage/v1/chat/completions", body, http.Header{"X-Request-Id": {"req-1"}})
		got[i] = identityOf.ReplaceAll(readAll(t, resp.Body), []byte(`"id":"ID","created":0`))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("whole answers %v: status %d: %s", wholeAnswers, resp.StatusCode, got[i])
		}
	}
	if !bytes.Equal(got[0], got[1]) || !bytes.Contains(got[0], []byte(`"id":"ID"`)) {
		t.Errorf("completion from a whole answer:\n%s\nfrom a stream:\n%s", got[1], got[0])
	}
}

// identityOf matches a completion's id and created time, which differ
// between two answers.
var identityOf = regexp.MustCompile(`"created":[0-9]+,"id":"chatcmpl-[A-Za-z0-9]+"`)
