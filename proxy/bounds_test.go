package proxy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy/proxytest"
)

// patternTool is a tool whose parameters schema has n string properties
// of the given pattern.
func patternTool(n int, pattern string) string {
	props := make([]string, n)
	for i := range props {
		props[i] = fmt.Sprintf(`"p%d":{"type":"string","pattern":%q}`, i, pattern)
	}
	return `{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{` + strings.Join(props, ",") + `}}}}`
}

// openAIError is the error body of a refused request.
type openAIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func decodeError(tb testing.TB, body []byte) openAIError {
	tb.Helper()
	var e openAIError
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
		tb.Fatalf("not an OpenAI-style error: %s", body)
	}
	return e
}

// TestCostlySchemaRefused: a tool schema whose patterns would compile to
// more than the budget (bounded repetitions are expanded, nested ones
// multiply) is refused with a 400 that names the schema and says why,
// before any upstream call; several at once are refused alike. The guard
// compiles schemas only to judge a call, so the upstream here answers
// with text: without the bound these requests are served.
func TestCostlySchemaRefused(t *testing.T) {
	ordinary := patternTool(100, `^[a-z0-9_-]{1,64}$`)
	tests := []struct {
		name    string
		tool    string
		status  int
		message string
	}{
		{"ordinary patterns", ordinary, http.StatusOK, ""},
		{"thirty x{0,1000}", patternTool(30, `x{0,1000}`), http.StatusBadRequest, "compile to about"},
		{"one long literal repeated", patternTool(1, `(abcdefghijklmnop){1,1000}`), http.StatusBadRequest, "/properties/p0/pattern"},
		{"200 KiB of x{0,1000}", patternTool(4000, `x{0,1000}`), http.StatusBadRequest, "compile to about"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, gw := tsGateway(t, proxytest.Simulated(),
				protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), false)
			body := `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"tools":[` + tt.tool + `]}`
			const clients = 4
			var wg sync.WaitGroup
			got := make([][]byte, clients)
			status := make([]int, clients)
			ctx := testContext(t)
			for i := range clients {
				wg.Go(func() {
					resp := post(t, ctx, gw, "/v1/chat/completions", body, nil)
					status[i], got[i] = resp.StatusCode, readAll(t, resp.Body)
				})
			}
			wg.Wait()
			for i := range clients {
				if status[i] != tt.status {
					t.Fatalf("client %d: status %d, want %d: %.300s", i, status[i], tt.status, got[i])
				}
				if tt.status == http.StatusOK {
					continue
				}
				e := decodeError(t, got[i])
				if e.Error.Param == nil || *e.Error.Param != "tools[0].function.parameters" || !strings.Contains(e.Error.Message, tt.message) ||
					!strings.Contains(e.Error.Message, "regular-expression instructions") {
					t.Errorf("client %d: got %s, want param tools[0].function.parameters and a message saying why (%q)", i, got[i], tt.message)
				}
			}
			if n := len(up.Received()); tt.status != http.StatusOK && n != 0 {
				t.Errorf("%d requests reached the upstream", n)
			}
		})
	}
}

// tinyMessages is a body of n tiny messages, then tail (a message, or "").
func tinyMessages(key string, n int, tail string) string {
	var b strings.Builder
	b.WriteString(`{"model":"` + testModel + `","` + key + `":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"role":"user","content":"x"}`)
	}
	if tail != "" {
		b.WriteString("," + tail)
	}
	b.WriteString(`]}`)
	return b.String()
}

// TestMessageCountBeforeDecoding: 500,000 tiny messages (about 16 times
// their bytes once decoded) are refused by their count before any is
// decoded: a broken last message, which decoding would have reported
// first, is never looked at. An escaped spelling of the key counts the
// same.
func TestMessageCountBeforeDecoding(t *testing.T) {
	const broken = `{"role":7,"content":"x"}`
	tools := `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"tools":[` +
		strings.Repeat(`{"type":"function","function":{"name":"t"}},`, 600) + `{"type":"function","function":{"name":7}}]}`
	tests := []struct {
		name, body, param, message string
	}{
		{"500,000 messages", tinyMessages("messages", 500_000, broken), "messages", "the request has 500001 messages; this gateway accepts at most 10000"},
		{"an escaped key", tinyMessages(`messag\u0065s`, 20_000, broken), "messages", "the request has 20001 messages"},
		{"601 tools", tools, "tools", "the request declares 601 tools; this gateway accepts at most 512"},
	}
	up, gw := startUpstream(t, proxytest.Simulated())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, testContext(t), gw, "/v1/chat/completions", tt.body, nil)
			got := readAll(t, resp.Body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %.300s", resp.StatusCode, got)
			}
			e := decodeError(t, got)
			if e.Error.Param == nil || *e.Error.Param != tt.param || !strings.Contains(e.Error.Message, tt.message) {
				t.Errorf("got %s, want param %s and a message with %q", got, tt.param, tt.message)
			}
		})
	}
	if n := len(up.Received()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
}
