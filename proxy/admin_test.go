package proxy_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// TestRecentRequests: a refused call's events are readable at
// /debug/requests/{id} with the admin key as a bearer token, and the route
// answers 404 to anyone else, and on a gateway without an admin key.
func TestRecentRequests(t *testing.T) {
	const args = `{"city":"Paris"}`
	script := func() proxytest.Responder {
		return proxytest.Script(
			sim.NewStream("m").Role().ToolCall(0, "call_2", "get_weather", args).Finish(chat.FinishToolCalls).Done().Reply(),
			sim.NewStream("m").Role().ToolCall(0, "call_3", "get_time", `{}`).Finish(chat.FinishToolCalls).Done().Reply())
	}
	body := `{"model":"deepseek-v4-flash","stream":true,
	  "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}},
	           {"type":"function","function":{"name":"get_time","parameters":{"type":"object"}}}],
	  "messages":[{"role":"user","content":"Weather and time?"},
	    {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
	    {"role":"tool","tool_call_id":"call_1","content":"sunny"}]}`
	gateway := func(adminKey proxy.Secret) (*http.Client, string) {
		_, usrv := proxytest.NewServer(t, script())
		recent := metrics.NewRecent(10, 20)
		cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}, AdminAPIKey: adminKey}
		gw := serveGateway(t, cfg, proxy.Options{Recent: recent, Tracer: recent, DefaultProtocol: proxy.ProtocolTwoStage,
			TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, recent)})
		req, _ := http.NewRequestWithContext(tsContext(t), http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("X-Request-Id", "req-42")
		resp, err := gw.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return gw.Client(), gw.URL
	}
	get := func(client *http.Client, url, auth string) (int, []byte) {
		req, _ := http.NewRequestWithContext(tsContext(t), http.MethodGet, url, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}

	client, base := gateway("admin-secret")
	for _, tc := range []struct {
		name, path, auth string
		want             int
	}{
		{"no key", "/debug/requests/req-42", "", http.StatusNotFound},
		{"wrong key", "/debug/requests/req-42", "Bearer admin-secreT", http.StatusNotFound},
		{"key, not as a bearer token", "/debug/requests/req-42", "admin-secret", http.StatusNotFound},
		{"unknown request", "/debug/requests/req-43", "Bearer admin-secret", http.StatusNotFound},
		{"the admin key", "/debug/requests/req-42", "Bearer admin-secret", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, b := get(client, base+tc.path, tc.auth)
			if status != tc.want {
				t.Fatalf("status %d, want %d: %s", status, tc.want, b)
			}
			if status != http.StatusOK {
				return
			}
			var got metrics.RecentRequest
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("decode %s: %v", b, err)
			}
			var verdicts []string
			for _, ev := range got.Events {
				if ev.Verdict != "" {
					verdicts = append(verdicts, string(ev.Event)+":"+ev.Verdict)
				}
			}
			if got.RequestID != "req-42" || strings.Join(verdicts, " ") != "tool_call:duplicate duplicate_tool_call:duplicate tool_call:forward" {
				t.Errorf("request %q, verdicts %v: want req-42's refusal and forward", got.RequestID, verdicts)
			}
			if strings.Contains(string(b), "Paris") {
				t.Errorf("the events carry the call's arguments: %s", b)
			}
		})
	}

	t.Run("no admin key configured", func(t *testing.T) {
		client, base := gateway("")
		if status, b := get(client, base+"/debug/requests/req-42", "Bearer "); status != http.StatusNotFound {
			t.Errorf("status %d, want 404: %s", status, b)
		}
	})
}

// TestSeparateAdmin: with SeparateAdmin, /metrics and /debug/ are served
// by Admin only and the client routes answer 404 for them; with
// MetricsNeedAdminKey, /metrics wants the admin key.
func TestSeparateAdmin(t *testing.T) {
	tests := []struct {
		name                  string
		separate, needKey     bool
		auth                  string
		mainStatus, admStatus int
	}{
		{name: "one listener, metrics open", mainStatus: http.StatusOK, admStatus: http.StatusOK},
		{name: "a listener of its own", separate: true, mainStatus: http.StatusNotFound, admStatus: http.StatusOK},
		{name: "metrics behind the key, none given", needKey: true, mainStatus: http.StatusUnauthorized, admStatus: http.StatusUnauthorized},
		{name: "metrics behind the key, given", needKey: true, auth: "Bearer adm-key-0123456789", mainStatus: http.StatusOK, admStatus: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: "http://127.0.0.1:9/v1"}},
				AdminAPIKey: "adm-key-0123456789", SeparateAdmin: tt.separate, MetricsNeedAdminKey: tt.needKey}
			h, err := proxy.New(cfg, proxy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				name    string
				handler http.Handler
				want    int
			}{{"client routes", h, tt.mainStatus}, {"admin routes", h.Admin(), tt.admStatus}} {
				req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
				if tt.auth != "" {
					req.Header.Set("Authorization", tt.auth)
				}
				rec := httptest.NewRecorder()
				c.handler.ServeHTTP(rec, req)
				if rec.Code != c.want {
					t.Errorf("%s: GET /metrics = %d, want %d", c.name, rec.Code, c.want)
				}
				if rec.Code == http.StatusOK && !strings.Contains(rec.Body.String(), "phasegate_requests_total") {
					t.Errorf("%s: /metrics without the gateway's metrics", c.name)
				}
			}
			rec := httptest.NewRecorder()
			h.Admin().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if rec.Code != http.StatusOK {
				t.Errorf("admin /readyz = %d, want 200", rec.Code)
			}
		})
	}
}
