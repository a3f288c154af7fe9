package proxy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// lockedBuffer is a log sink safe for the handler's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestClientKeys: with client keys set, a request without a valid one
// gets a 401 in OpenAI's shape on every client route and reaches no
// upstream; a valid one is taken off the request (the upstream sees the
// gateway's own key), and a key's project replaces the client's
// X-Project-Id. Neither key reaches the log.
func TestClientKeys(t *testing.T) {
	const (
		upstreamKey = "sk-upstream-0123456789abcdef"
		clientKey   = "pg-client-key-alpha"
		projectKey  = "pg-client-key-beta"
	)
	answer := func(r proxytest.Received) sim.Reply {
		if strings.HasSuffix(r.Path, "/chat/completions") {
			return sim.NewStream(tsModel).Role().Content("ok").Finish("stop").Done().Reply()
		}
		return sim.Reply{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"object":"list","data":[]}`)}
	}
	up, usrv := proxytest.NewServer(t, answer)
	logs := &lockedBuffer{}
	cfg := proxy.Config{
		Providers:  []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1", APIKey: upstreamKey}},
		ClientKeys: []proxy.ClientKey{{Key: clientKey}, {Key: projectKey, Project: "proj-beta"}},
	}
	gw := serveGateway(t, cfg, proxy.Options{Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})

	refused := []struct {
		name, method, path, auth string
	}{
		{"no key", http.MethodPost, "/v1/chat/completions", ""},
		{"a wrong key", http.MethodPost, "/v1/chat/completions", "Bearer pg-client-key-gamma"},
		{"the upstream's key", http.MethodPost, "/standard/v1/chat/completions", "Bearer " + upstreamKey},
		{"not a bearer token", http.MethodPost, "/two-stage/v1/chat/completions", "Basic " + clientKey},
		{"models", http.MethodGet, "/v1/models", ""},
		{"another /v1 endpoint", http.MethodPost, "/v1/embeddings", "Bearer nope"},
	}
	for _, tt := range refused {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			before := len(up.Received())
			resp, body := authRequest(t, gw.URL, tt.method, tt.path, tt.auth, nil)
			var e struct {
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			if resp.StatusCode != http.StatusUnauthorized || json.Unmarshal(body, &e) != nil || e.Error.Code != "invalid_api_key" {
				t.Errorf("got %d %s, want 401 invalid_api_key", resp.StatusCode, body)
			}
			if n := len(up.Received()) - before; n != 0 {
				t.Errorf("%d requests reached the upstream", n)
			}
		})
	}
	t.Run("health is open", func(t *testing.T) {
		if resp, _ := authRequest(t, gw.URL, http.MethodGet, "/healthz", "", nil); resp.StatusCode != http.StatusOK {
			t.Errorf("/healthz = %d, want 200", resp.StatusCode)
		}
	})
	accepted := []struct {
		name, key, project, wantProject string
	}{
		{"a key without a project is a project of its own", clientKey, "proj-beta", "key-1"},
		{"a key's project cannot be forged", projectKey, "proj-alpha", "proj-beta"},
	}
	for _, tt := range accepted {
		t.Run("accepted: "+tt.name, func(t *testing.T) {
			before := len(up.Received())
			resp, body := authRequest(t, gw.URL, http.MethodPost, "/v1/chat/completions", "bearer "+tt.key, http.Header{"X-Project-Id": {tt.project}})
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if got := resp.Header.Get("X-Phasegate-Project-Id"); got != tt.wantProject {
				t.Errorf("project = %q, want %q", got, tt.wantProject)
			}
			got := up.Received()[before:]
			if len(got) != 1 {
				t.Fatalf("upstream calls = %d, want 1", len(got))
			}
			if a := got[0].Header.Get("Authorization"); a != "Bearer "+upstreamKey {
				t.Errorf("upstream Authorization = %q, want the gateway's own key", a)
			}
			for name, vs := range got[0].Header {
				if strings.Contains(strings.Join(vs, " "), tt.key) {
					t.Errorf("the client key reached the upstream in %s", name)
				}
			}
		})
	}
	for _, secret := range []string{upstreamKey, clientKey, projectKey} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("a key reached the log: %s…", secret[:6])
		}
	}
}

// TestClientKeysNeedProviderKeys: client keys with a provider that has no
// key of its own is a configuration error naming the setting.
func TestClientKeysNeedProviderKeys(t *testing.T) {
	_, err := proxy.New(proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: "https://api.openai.com/v1"}},
		ClientKeys: []proxy.ClientKey{{Key: "k1"}}}, proxy.Options{})
	if !errors.Is(err, proxy.ErrInvalidConfig) || !strings.Contains(err.Error(), "ClientKeys: ") {
		t.Errorf("error = %v, want an invalid configuration naming the ClientKeys field", err)
	}
}

func authRequest(t *testing.T, base, method, path, auth string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	var body *strings.Reader
	if method == http.MethodPost {
		body = strings.NewReader(tsBody(true, ""))
	} else {
		body = strings.NewReader("")
	}
	req, err := http.NewRequestWithContext(tsContext(t), method, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp, b.Bytes()
}

// TestBearerSchemeAnyCase: the client routes and the admin route read the
// Authorization header alike: the scheme in any case, the token after it
// (RFC 9110 §11.1). Sent by a raw client, as a header line as written.
func TestBearerSchemeAnyCase(t *testing.T) {
	t.Parallel()
	const client, admin = "sk-client-0123456789", "sk-admin-0123456789"
	text := sim.NewStream(tsModel).Role().Content("hi").Finish("stop").Done().Reply()
	_, usrv := proxytest.NewServer(t, func(proxytest.Received) sim.Reply { return text })
	gw := newGateway(t, proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: usrv.URL + "/v1", APIKey: "sk-upstream-0123456789"}},
		ClientKeys: []proxy.ClientKey{{Key: client}}, AdminAPIKey: admin})
	addr := strings.TrimPrefix(gw.URL, "http://")
	body := `{"model":"gpt-test","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for _, scheme := range []string{"Bearer", "bearer", "BEARER", "bEaReR"} {
		chat := "POST /standard/v1/chat/completions HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nauthorization: " + scheme + " " + client +
			"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		if resp, got := exchangeWith(t, addr, chat); resp.StatusCode != http.StatusOK {
			t.Errorf("chat route, scheme %q: %d %s, want 200", scheme, resp.StatusCode, got)
		}
		metrics := "GET /metrics HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nauthorization: " + scheme + " " + admin + "\r\n\r\n"
		if resp, got := exchangeWith(t, addr, metrics); resp.StatusCode != http.StatusOK {
			t.Errorf("admin route, scheme %q: %d %.200s, want 200", scheme, resp.StatusCode, got)
		}
		wrong := "GET /metrics HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nauthorization: " + scheme + " " + client + "\r\n\r\n"
		if resp, got := exchangeWith(t, addr, wrong); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("admin route, client key, scheme %q: %d %.200s, want 401", scheme, resp.StatusCode, got)
		}
	}
}
