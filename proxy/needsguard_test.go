package proxy_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// TestDefaultRouteWithoutTools: a non-streaming request to /v1 that
// declares no tools is passed through as it came, not turned into a
// stream, and its answer reaches the client byte for byte, with the
// upstream's key order, nulls and fields the gateway does not know; the
// same request with a tool declared is guarded.
func TestDefaultRouteWithoutTools(t *testing.T) {
	t.Parallel()
	whole := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"deepseek-v4-flash",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"hi","refusal":null},"logprobs":null,"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4},"vendor_extension":{"x":1}}`)
	stream := sim.NewStream("deepseek-v4-flash").Role().Content("hi").Finish("stop").Done()
	respond := func(r proxytest.Received) sim.Reply {
		if bytes.Contains(r.Body, []byte(`"stream":true`)) {
			return stream.Reply()
		}
		return sim.Reply{Body: whole}
	}
	up, gw := tsGateway(t, respond, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), false)
	post := func(body string) (*http.Response, []byte) {
		t.Helper()
		resp, err := gw.Client().Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}

	resp, got := post(`{"model":"deepseek-v4-flash","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, whole) {
		t.Errorf("without tools: %d %s\nwant 200 and the upstream's body %s", resp.StatusCode, got, whole)
	}
	if p := resp.Header.Get("X-Phasegate-Protocol"); p != proxy.ProtocolStandard {
		t.Errorf("without tools: X-Phasegate-Protocol = %q, want %q", p, proxy.ProtocolStandard)
	}
	rec := up.Received()
	if len(rec) != 1 || bytes.Contains(rec[0].Body, []byte(`"stream"`)) {
		t.Fatalf("without tools: upstream got %d requests, first %s; want one, not made to stream", len(rec), rec[0].Body)
	}

	resp, got = post(`{"model":"deepseek-v4-flash","messages":[{"role":"user","content":"hi"}],` +
		`"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object"}}}]}`)
	if p := resp.Header.Get("X-Phasegate-Protocol"); resp.StatusCode != http.StatusOK || p != proxy.ProtocolTwoStage {
		t.Errorf("with tools: %d, X-Phasegate-Protocol = %q; want 200 and %q", resp.StatusCode, p, proxy.ProtocolTwoStage)
	}
	if !bytes.Contains(got, []byte(`"phasegate":`)) {
		t.Errorf("with tools: %s, want the phase metadata of the guard", got)
	}
}
