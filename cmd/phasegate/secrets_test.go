package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// TestNoSecretLeaks runs a whole session through the real gateway with
// known keys — the upstream key, client keys, the admin key, and a bearer
// token an upstream quotes back in its error body — at the debug log level
// with spans written to the console, and looks for them in every log line and span,
// every response body and header the clients got, and /metrics: none may
// be found.
func TestNoSecretLeaks(t *testing.T) {
	const (
		upstreamKey = "sk-upstream-secret-0123456789"
		clientKey   = "pg-client-secret-abcdef"
		adminKey    = "pg-admin-secret-ghijkl"
		quoted      = "tok-quoted-secret-mnopqr"
	)
	secrets := []string{upstreamKey, clientKey, adminKey, quoted}
	_, usrv := proxytest.NewServer(t, func(r proxytest.Received) sim.Reply {
		if strings.Contains(string(r.Body), "make-it-fail") {
			return sim.Error(http.StatusUnauthorized, "Incorrect API key provided: "+upstreamKey+" (sent as Authorization: Bearer "+quoted+")",
				"invalid_request_error", "invalid_api_key")
		}
		return sim.NewStream("deepseek-v4-flash").Role().Content("fine").Finish("stop").Usage(10, 2, nil).Done().Reply()
	})
	g := start(t, nil, map[string]string{
		"DEEPSEEK_BASE_URL": usrv.URL, "DEEPSEEK_API_KEY": upstreamKey, "PROVIDERS": "deepseek",
		"PHASEGATE_API_KEYS": clientKey + ":proj-a", "ADMIN_API_KEY": adminKey,
		"LOG_LEVEL": "debug", "OTEL_TRACES_EXPORTER": "console",
	})
	var seen strings.Builder
	call := func(method, path, auth, body string) {
		req, err := http.NewRequest(method, g.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", "req-secret-test")
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for k, vs := range resp.Header {
			seen.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
		}
		seen.Write(b)
		seen.WriteString("\n")
	}
	chat := func(stream bool, text string) string {
		s := "false"
		if stream {
			s = "true"
		}
		return `{"model":"deepseek-v4-flash","stream":` + s + `,"messages":[{"role":"user","content":"` + text + `"}]}`
	}
	call(http.MethodPost, "/v1/chat/completions", clientKey, chat(true, "hello"))
	call(http.MethodPost, "/standard/v1/chat/completions", clientKey, chat(false, "hello"))
	call(http.MethodPost, "/v1/chat/completions", clientKey, chat(false, "make-it-fail"))
	call(http.MethodPost, "/standard/v1/chat/completions", clientKey, chat(true, "make-it-fail"))
	call(http.MethodPost, "/v1/chat/completions", "sk-wrong-key-000000", chat(false, "hello"))
	call(http.MethodGet, "/debug/requests/req-secret-test", adminKey, "")
	call(http.MethodGet, "/metrics", "", "")
	if !strings.Contains(seen.String(), "[redacted]") {
		t.Errorf("the upstream's error body was not relayed with its credentials redacted:\n%s", seen.String())
	}
	if err := g.stop(t); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(g.log.String(), "gen_ai.operation.name") {
		t.Errorf("the log holds no spans: the test would look at less than it says")
	}
	for where, text := range map[string]string{"responses": seen.String(), "log and spans": g.log.String()} {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s hold the secret %s…", where, s[:8])
			}
		}
	}
}
