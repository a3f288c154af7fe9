package proxy_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// operatorKeyGateway serves a gateway with a key of its own in front of usrv.
func operatorKeyGateway(t *testing.T, usrv *httptest.Server) *httptest.Server {
	t.Helper()
	cfg := config(usrv)
	cfg.Providers[0].APIKey = "sk-gateway-0123456789"
	return newGateway(t, cfg)
}

// forwardOnce sends a JSON request with header through gw and returns
// the one request up received: the gateway must answer 200, having asked
// the upstream once.
func forwardOnce(t *testing.T, gw *httptest.Server, up *proxytest.Upstream, method, path, body string, header http.Header) proxytest.Received {
	t.Helper()
	req, err := http.NewRequestWithContext(testContext(t), method, gw.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := gw.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp.Body)
	rec := up.Received()
	if resp.StatusCode != http.StatusOK || len(rec) != 1 {
		t.Fatalf("status %d, upstream got %d requests; want 200 and 1", resp.StatusCode, len(rec))
	}
	return rec[0]
}

// TestForwardedHeaders checks the client headers that reach an upstream,
// on every kind of route: those of the allowlist always; the client's
// credentials and billing selectors (Authorization, OpenAI-Organization,
// OpenAI-Project) only when its own key is passed through; cookies and
// other credential headers never.
func TestForwardedHeaders(t *testing.T) {
	t.Parallel()
	sent := http.Header{
		"Authorization": {"Bearer sk-client-0123456789"}, "Openai-Organization": {"org-client"}, "Openai-Project": {"proj-client"},
		"Cookie": {"session=1"}, "Api-Key": {"azure-key"}, "X-Api-Key": {"other-key"}, "X-Goog-Api-Key": {"g-key"},
		"X-Stainless-Lang": {"js"}, "User-Agent": {"OpenAI/JS 5.0"}, "Openai-Beta": {"assistants=v2"},
	}
	never := []string{"Cookie", "Api-Key", "X-Api-Key", "X-Goog-Api-Key"}
	kept := []string{"X-Stainless-Lang", "User-Agent", "Openai-Beta"}
	routes := []struct{ name, method, path, body string }{
		{"guarded chat", http.MethodPost, "/v1/chat/completions", chatBody(false)},
		{"standard chat stream", http.MethodPost, "/standard/v1/chat/completions", chatBody(true)},
		{"models", http.MethodGet, "/v1/models", ""},
		{"pass-through", http.MethodPost, "/v1/embeddings", `{"model":"m","input":"x"}`},
	}
	for _, rt := range routes {
		for _, key := range []proxy.Secret{"", "sk-gateway-0123456789"} {
			t.Run(rt.name+" gateway key "+map[bool]string{true: "set", false: "unset"}[key != ""], func(t *testing.T) {
				t.Parallel()
				up, usrv := proxytest.NewServer(t, func(r proxytest.Received) sim.Reply {
					if strings.HasSuffix(r.Path, "/models") {
						return sim.Reply{Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"object":"list","data":[]}`)}
					}
					if strings.Contains(string(r.Body), `"stream":true`) {
						return sim.NewStream(testModel).Role().Content("hi").Finish("stop").Done().Reply()
					}
					return sim.Completion(testModel, map[string]any{"content": "hi"}, "stop", nil)
				})
				cfg := config(usrv)
				cfg.Providers[0].APIKey = key
				gw := newGateway(t, cfg)
				got := forwardOnce(t, gw, up, rt.method, rt.path, rt.body, sent).Header
				for _, k := range never {
					if v := got.Values(k); len(v) > 0 {
						t.Errorf("upstream got %s: %q", k, v)
					}
				}
				for _, k := range kept {
					if got.Get(k) != sent.Get(k) {
						t.Errorf("upstream %s = %q, want %q", k, got.Get(k), sent.Get(k))
					}
				}
				wantAuth, wantOrg, wantProject := "Bearer sk-client-0123456789", "org-client", "proj-client"
				if key != "" {
					wantAuth, wantOrg, wantProject = "Bearer "+key.Reveal(), "", ""
				}
				if got.Get("Authorization") != wantAuth || got.Get("Openai-Organization") != wantOrg || got.Get("Openai-Project") != wantProject {
					t.Errorf("upstream Authorization %q, OpenAI-Organization %q, OpenAI-Project %q; want %q, %q, %q",
						got.Get("Authorization"), got.Get("Openai-Organization"), got.Get("Openai-Project"), wantAuth, wantOrg, wantProject)
				}
			})
		}
	}
}

// TestPassThroughKeepsBodyCoding: a pass-through body goes upstream as it
// came, so the header that says how it is coded goes with it; the chat
// routes decode the body themselves and send their own.
func TestPassThroughKeepsBodyCoding(t *testing.T) {
	t.Parallel()
	up, usrv := proxytest.NewServer(t, func(proxytest.Received) sim.Reply {
		return sim.Reply{Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"object":"list","data":[]}`)}
	})
	gw := operatorKeyGateway(t, usrv)
	rec := forwardOnce(t, gw, up, http.MethodPost, "/v1/embeddings", "\x1f\x8b coded", http.Header{"Content-Encoding": {"gzip"}})
	if got := rec.Header.Get("Content-Encoding"); got != "gzip" || string(rec.Body) != "\x1f\x8b coded" {
		t.Errorf("upstream got Content-Encoding %q and body %q; want gzip and the body as sent", got, rec.Body)
	}
}

// TestForwardHeadersSetting: FORWARD_HEADERS adds the operator's own
// headers to those passed upstream, and cannot add a credential.
func TestForwardHeadersSetting(t *testing.T) {
	t.Parallel()
	up, usrv := proxytest.NewServer(t, func(proxytest.Received) sim.Reply {
		return sim.Completion(testModel, map[string]any{"content": "hi"}, "stop", nil)
	})
	cfg := config(usrv)
	cfg.Providers[0].APIKey = "sk-gateway-0123456789"
	cfg.ForwardHeaders = []string{"x-test-scenario", "X-Route-"}
	gw := newGateway(t, cfg)
	got := forwardOnce(t, gw, up, http.MethodPost, "/standard/v1/chat/completions", chatBody(false),
		http.Header{"X-Test-Scenario": {"text"}, "X-Route-Zone": {"eu"}, "X-Other": {"no"}}).Header
	if got.Get("X-Test-Scenario") != "text" || got.Get("X-Route-Zone") != "eu" || got.Get("X-Other") != "" {
		t.Errorf("upstream X-Test-Scenario %q, X-Route-Zone %q, X-Other %q; want text, eu and none",
			got.Get("X-Test-Scenario"), got.Get("X-Route-Zone"), got.Get("X-Other"))
	}

	for _, name := range []string{"Authorization", "cookie", "X-Api-", "OpenAI-Project", "Content-Length", "bad name"} {
		bad := config(usrv)
		bad.ForwardHeaders = []string{name}
		if _, err := proxy.New(bad, proxy.Options{}); err == nil || !strings.Contains(err.Error(), "ForwardHeaders: ") {
			t.Errorf("FORWARD_HEADERS=%q: New = %v, want an error naming the ForwardHeaders field", name, err)
		}
	}
}

// TestHeaderRedactionSharesNothing: redacting the headers of a response
// never writes to a header list shared by other responses (gin sets
// Content-Type to one slice for every JSON answer): many JSON answers at
// once, under -race, race on nothing, and each keeps its Content-Type.
func TestHeaderRedactionSharesNothing(t *testing.T) {
	t.Parallel()
	_, usrv := proxytest.NewServer(t, proxytest.Script())
	gw := operatorKeyGateway(t, usrv)
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			req, err := http.NewRequestWithContext(testContext(t), http.MethodGet, gw.URL+"/healthz", nil)
			if err != nil {
				errs <- err
				return
			}
			resp, err := gw.Client().Do(req)
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				errs <- fmt.Errorf("Content-Type %q, want JSON", ct)
				return
			}
			errs <- nil
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
