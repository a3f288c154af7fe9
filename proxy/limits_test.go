package proxy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// TestRequestLimits: a request over a shape limit gets a clear 400 or 413
// in OpenAI's shape naming what is over, and reaches no upstream; one at
// the limit passes. The defaults are those the README documents: one over
// each is refused.
func TestRequestLimits(t *testing.T) {
	limits := proxy.Limits{MaxDepth: 8, MaxMessages: 4, MaxTools: 2, MaxToolSchemaBytes: 200, MaxArgumentsBytes: 100}
	msgs := func(n int) string {
		var m []string
		for range n {
			m = append(m, `{"role":"user","content":"hi"}`)
		}
		return strings.Join(m, ",")
	}
	tool := func(name string, schemaBytes int) string { // parameters of schemaBytes-26 bytes
		pad := strings.Repeat("x", max(schemaBytes-60, 0))
		return `{"type":"function","function":{"name":"` + name + `","parameters":{"type":"object","description":"` + pad + `"}}}`
	}
	call := func(argBytes int) string {
		args, _ := json.Marshal(`{"p":"` + strings.Repeat("a", argBytes-8) + `"}`)
		return `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read_file","arguments":` + string(args) + `}}]},` +
			`{"role":"tool","tool_call_id":"c1","content":"ok"}`
	}
	body := func(messages, tools string) string {
		b := `{"model":"gpt-test","messages":[` + messages + `]`
		if tools != "" {
			b += `,"tools":[` + tools + `]`
		}
		return b + `}`
	}
	nested := func(depth int) string { // a body depth deep, the content's arrays included
		return body(`{"role":"user","content":`+strings.Repeat("[", depth-3)+`"deep"`+strings.Repeat("]", depth-3)+`}`, "")
	}
	tests := []struct {
		name     string
		body     string
		status   int
		param    string
		defaults bool // served with the default limits
	}{
		{"at every limit", body(msgs(2)+","+call(100), tool("a", 190)+","+tool("b", 100)), http.StatusOK, "", false},
		{"nested too deep", body(`{"role":"user","content":[[[[[[[["deep"]]]]]]]]}`, ""), http.StatusBadRequest, "", false},
		{"too many messages", body(msgs(5), ""), http.StatusBadRequest, "messages", false},
		{"too many tools", body(msgs(1), tool("a", 60)+","+tool("b", 60)+","+tool("c", 60)), http.StatusBadRequest, "tools", false},
		{"a schema too large", body(msgs(1), tool("a", 260)), http.StatusRequestEntityTooLarge, "tools[0].function.parameters", false},
		{"arguments too large", body(msgs(1)+","+call(101), ""), http.StatusRequestEntityTooLarge, "messages[1].tool_calls[0].function.arguments", false},
		{"default: nested 65 deep", nested(65), http.StatusBadRequest, "", true},
		{"default: 10,001 messages", body(msgs(10_001), ""), http.StatusBadRequest, "messages", true},
		{"default: 513 tools", body(msgs(1), strings.TrimSuffix(strings.Repeat(tool("t", 60)+",", 513), ",")), http.StatusBadRequest, "tools", true},
		{"default: a schema of 256 KiB and a byte", body(msgs(1), tool("a", 256<<10+1+26)), http.StatusRequestEntityTooLarge, "tools[0].function.parameters", true},
		{"default: arguments of 4 MiB and a byte", body(msgs(1)+","+call(4<<20+1), ""), http.StatusRequestEntityTooLarge, "messages[1].tool_calls[0].function.arguments", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, usrv := proxytest.NewServer(t, proxytest.Script(sim.Completion("gpt-test", map[string]any{"content": "ok"}, "stop", nil)))
			cfg := config(usrv)
			if !tt.defaults {
				cfg.Limits = limits
			}
			gw := serveGateway(t, cfg, proxy.Options{})
			resp := post(t, testContext(t), gw, "/v1/chat/completions", tt.body, nil)
			got := readAll(t, resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, got)
			}
			if tt.status == http.StatusOK {
				return
			}
			var e struct {
				Error struct {
					Message string `json:"message"`
					Param   any    `json:"param"`
				} `json:"error"`
			}
			if err := json.Unmarshal(got, &e); err != nil || e.Error.Message == "" {
				t.Fatalf("not an OpenAI-style error: %s", got)
			}
			if tt.param != "" && fmt.Sprint(e.Error.Param) != tt.param {
				t.Errorf("param %v, want %s", e.Error.Param, tt.param)
			}
			if n := len(up.Received()); n != 0 {
				t.Errorf("%d requests reached the upstream", n)
			}
		})
	}
}

// TestHeaderLimit: header fields over the limit get a 431 in OpenAI's
// shape before anything else looks at the request.
func TestHeaderLimit(t *testing.T) {
	up, usrv := proxytest.NewServer(t, proxytest.Script())
	cfg := config(usrv)
	cfg.Limits = proxy.Limits{MaxHeaderBytes: 1024}
	gw := serveGateway(t, cfg, proxy.Options{})
	resp := post(t, testContext(t), gw, "/v1/chat/completions", `{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`,
		http.Header{"X-Padding": {strings.Repeat("p", 2000)}})
	got := readAll(t, resp.Body)
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || !strings.Contains(string(got), `"code":"headers_too_large"`) {
		t.Errorf("got %d %s, want a 431 headers_too_large", resp.StatusCode, got)
	}
	if n := len(up.Received()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
}
