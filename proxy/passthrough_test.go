package proxy_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	openai "github.com/sashabaranov/go-openai"

	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// modelList is a /models answer with the given ids, each carrying a
// vendor field.
func modelList(ids ...string) sim.Reply {
	data := []any{}
	for _, id := range ids {
		data = append(data, map[string]any{"id": id, "object": "model", "created": 1, "owned_by": "test", "x_context_window": 1000000})
	}
	b, _ := json.Marshal(map[string]any{"object": "list", "data": data})
	return sim.Reply{Body: b}
}

// twoProviders starts a "deepseek" and an "openai" upstream and a gateway
// in front of both.
func twoProviders(t *testing.T, deepseek, openaiUp proxytest.Responder, routes ...proxy.Route) (ds, oa *proxytest.Upstream, gw string) {
	t.Helper()
	ds, dsrv := proxytest.NewServer(t, deepseek)
	oa, osrv := proxytest.NewServer(t, openaiUp)
	g := newGateway(t, proxy.Config{
		Providers: []proxy.Provider{{Name: "deepseek", BaseURL: dsrv.URL + "/v1"}, {Name: "openai", BaseURL: osrv.URL + "/v1"}},
		Routes:    routes,
	})
	return ds, oa, g.URL
}

func TestModelsMerged(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		deepseek    sim.Reply
		openai      sim.Reply
		status      int
		wantIDs     []string
		wantMissing string
	}{
		{name: "both answer", deepseek: modelList("deepseek-v4-flash", "deepseek-v4-pro"), openai: modelList("gpt-5"), status: 200,
			wantIDs: []string{"deepseek-v4-flash", "deepseek-v4-pro", "gpt-5"}},
		{name: "one fails", deepseek: sim.Error(500, "down", "server_error", ""), openai: modelList("gpt-5"), status: 200,
			wantIDs: []string{"gpt-5"}, wantMissing: "deepseek"},
		{name: "one has none", deepseek: modelList(), openai: modelList("gpt-5"), status: 200, wantIDs: []string{"gpt-5"}},
		{name: "one answers garbage", deepseek: modelList("deepseek-v4-flash"), openai: sim.Reply{Body: []byte("<html>")}, status: 200,
			wantIDs: []string{"deepseek-v4-flash"}, wantMissing: "openai"},
		{name: "both fail: the first failure is relayed", deepseek: sim.Error(401, "bad key", "invalid_request_error", "invalid_api_key"),
			openai: sim.Error(500, "down", "server_error", ""), status: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ds, oa, gw := twoProviders(t, proxytest.Script(tt.deepseek), proxytest.Script(tt.openai))
			resp, err := http.Get(gw + "/v1/models")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body := readAll(t, resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d (body %s)", resp.StatusCode, tt.status, body)
			}
			if got := resp.Header.Get("X-Phasegate-Models-Missing"); got != tt.wantMissing {
				t.Errorf("X-Phasegate-Models-Missing = %q, want %q", got, tt.wantMissing)
			}
			for _, up := range []*proxytest.Upstream{ds, oa} {
				rec := up.Received()
				if len(rec) != 1 || rec[0].Method != http.MethodGet || rec[0].Path != "/v1/models" {
					t.Fatalf("upstream got %v, want one GET /v1/models", rec)
				}
				if got, want := rec[0].Header.Get("X-Request-Id"), resp.Header.Get("X-Request-Id"); got == "" || got != want {
					t.Errorf("upstream X-Request-Id = %q, want the echoed %q", got, want)
				}
			}
			if tt.status != 200 {
				if string(body) != string(tt.deepseek.Body) {
					t.Errorf("body = %s, want the first failure %s", body, tt.deepseek.Body)
				}
				return
			}
			var list struct {
				Object string           `json:"object"`
				Data   []map[string]any `json:"data"`
			}
			if err := json.Unmarshal(body, &list); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			ids := []string{}
			for _, m := range list.Data {
				ids = append(ids, m["id"].(string))
				if m["x_context_window"] != float64(1000000) {
					t.Errorf("model %v lost its vendor field", m)
				}
			}
			if list.Object != "list" {
				t.Errorf("object = %q, want list", list.Object)
			}
			if diff := cmp.Diff(tt.wantIDs, ids); diff != "" {
				t.Errorf("model ids (-want +got):\n%s", diff)
			}
		})
	}
}

// TestModelsMergedWithOpenAIClient lists merged models with go-openai.
func TestModelsMergedWithOpenAIClient(t *testing.T) {
	t.Parallel()
	// The gateway holds both providers' keys: a client's own key would go
	// to one provider only (TestModelsOwnKeyToOneProvider).
	_, dsrv := proxytest.NewServer(t, proxytest.Script(modelList("deepseek-v4-flash")))
	_, osrv := proxytest.NewServer(t, proxytest.Script(modelList("gpt-5")))
	gw := newGateway(t, proxy.Config{Providers: []proxy.Provider{
		{Name: "deepseek", BaseURL: dsrv.URL + "/v1", APIKey: "sk-gateway-deepseek-0123"},
		{Name: "openai", BaseURL: osrv.URL + "/v1", APIKey: "sk-gateway-openai-0123"},
	}})
	c := openai.DefaultConfig("sk-client")
	c.BaseURL = gw.URL + "/v1"
	list, err := openai.NewClientWithConfig(c).ListModels(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Models {
		ids = append(ids, m.ID)
	}
	if diff := cmp.Diff([]string{"deepseek-v4-flash", "gpt-5"}, ids); diff != "" {
		t.Errorf("model ids (-want +got):\n%s", diff)
	}
}

// TestPassThroughRouting checks other /v1/* requests are relayed to the
// provider their model names, or to the first one, path, query, body and
// answer intact.
func TestPassThroughRouting(t *testing.T) {
	t.Parallel()
	answer := sim.Reply{Status: 200, Header: http.Header{"X-Ratelimit-Remaining-Tokens": {"99"}},
		Body: []byte(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,-1]}],"model":"m","usage":{"prompt_tokens":1,"total_tokens":1}}`)}
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		routes     []proxy.Route
		wantTo     string // "deepseek" or "openai"
		wantPath   string
		wantStatus int
	}{
		{name: "deepseek model", path: "/v1/embeddings", body: `{"model":"deepseek-embed","input":["a","b"],"x_extra":  1}`, wantTo: "deepseek", wantPath: "/v1/embeddings"},
		{name: "other model", path: "/v1/embeddings", body: `{"input":"a","model":"text-embedding-3-small"}`, wantTo: "openai", wantPath: "/v1/embeddings"},
		{name: "configured route", path: "/v1/embeddings", body: `{"model":"bge-m3","input":"a"}`, routes: []proxy.Route{{Pattern: "bge-*", Provider: "deepseek"}}, wantTo: "deepseek", wantPath: "/v1/embeddings"},
		{name: "no model: first provider", method: http.MethodGet, path: "/v1/files?purpose=batch", wantTo: "deepseek", wantPath: "/v1/files"},
		{name: "nested path", method: http.MethodDelete, path: "/v1/files/file-123", wantTo: "deepseek", wantPath: "/v1/files/file-123"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ds, oa, gw := twoProviders(t, proxytest.Script(answer), proxytest.Script(answer), tt.routes...)
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			req, err := http.NewRequestWithContext(testContext(t), method, gw+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.body != "" {
				req, _ = http.NewRequestWithContext(testContext(t), method, gw+tt.path, strings.NewReader(tt.body))
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body := readAll(t, resp.Body)
			if resp.StatusCode != 200 || string(body) != string(answer.Body) {
				t.Errorf("answer = %d %s, want 200 %s", resp.StatusCode, body, answer.Body)
			}
			if got := resp.Header.Get("X-Ratelimit-Remaining-Tokens"); got != "99" {
				t.Errorf("X-Ratelimit-Remaining-Tokens = %q, want 99", got)
			}
			if got := resp.Header.Get("X-Phasegate-Provider"); got != tt.wantTo {
				t.Errorf("X-Phasegate-Provider = %q, want %q", got, tt.wantTo)
			}
			to, other := ds, oa
			if tt.wantTo == "openai" {
				to, other = oa, ds
			}
			if n := len(other.Received()); n != 0 {
				t.Errorf("the other provider got %d requests, want none", n)
			}
			rec := to.Received()
			if len(rec) != 1 {
				t.Fatalf("%s got %d requests, want 1", tt.wantTo, len(rec))
			}
			if rec[0].Method != method || rec[0].Path != tt.wantPath || string(rec[0].Body) != tt.body {
				t.Errorf("%s got %s %s %q, want %s %s %q", tt.wantTo, rec[0].Method, rec[0].Path, rec[0].Body, method, tt.wantPath, tt.body)
			}
		})
	}
}

// TestPassThroughWithOpenAIClient creates embeddings with go-openai.
func TestPassThroughWithOpenAIClient(t *testing.T) {
	t.Parallel()
	answer := sim.Reply{Body: []byte(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.25,0.5]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":1,"total_tokens":1}}`)}
	_, oa, gw := twoProviders(t, proxytest.Script(), proxytest.Script(answer))
	c := openai.DefaultConfig("sk-client")
	c.BaseURL = gw + "/v1"
	resp, err := openai.NewClientWithConfig(c).CreateEmbeddings(testContext(t), openai.EmbeddingRequest{Input: []string{"hi"}, Model: openai.SmallEmbedding3})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Data) != 1 || !cmp.Equal(resp.Data[0].Embedding, []float32{0.25, 0.5}) {
		t.Errorf("embeddings = %v, want one [0.25 0.5]", resp.Data)
	}
	if n := len(oa.Received()); n != 1 {
		t.Errorf("openai got %d requests, want 1", n)
	}
}

// TestPassThroughFailures checks a pass-through that cannot reach its
// upstream answers 502 in OpenAI's shape, and an upstream error is relayed.
func TestPassThroughFailures(t *testing.T) {
	t.Parallel()
	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		gw := newGateway(t, proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: closedURL(t)}}})
		resp := post(t, testContext(t), gw, "/v1/embeddings", `{"model":"m","input":"x"}`, nil)
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("status = %d, want 502", resp.StatusCode)
		}
		if e := errorBody(t, resp); e["code"] != "upstream_unreachable" {
			t.Errorf("code = %v, want upstream_unreachable", e["code"])
		}
	})
	for _, path := range []string{"/v1/embeddings", "/v1/models"} {
		t.Run("request timeout on "+path, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			_, usrv := proxytest.NewServer(t, func(proxytest.Received) sim.Reply {
				<-release
				return sim.Reply{Body: []byte(`{}`)}
			})
			t.Cleanup(func() { close(release) }) // before the double's Close
			cfg := config(usrv)
			cfg.Timeouts = proxy.Timeouts{Request: 200 * time.Millisecond}
			gw := newGateway(t, cfg)
			req, _ := http.NewRequestWithContext(testContext(t), http.MethodGet, gw.URL+path, nil)
			if path == "/v1/embeddings" {
				req, _ = http.NewRequestWithContext(testContext(t), http.MethodPost, gw.URL+path, strings.NewReader(`{"model":"m","input":"x"}`))
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := gw.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusGatewayTimeout {
				t.Errorf("status = %d, want 504", resp.StatusCode)
			}
			if e := errorBody(t, resp); e["code"] != "request_timeout" {
				t.Errorf("code = %v, want request_timeout", e["code"])
			}
		})
	}
	t.Run("upstream error relayed", func(t *testing.T) {
		t.Parallel()
		reply := sim.Error(404, "Unknown request URL: POST /v1/nope", "invalid_request_error", "unknown_url")
		_, gw := startUpstream(t, proxytest.Script(reply))
		resp := post(t, testContext(t), gw, "/v1/nope", `{}`, nil)
		body := readAll(t, resp.Body)
		if resp.StatusCode != 404 || string(body) != string(reply.Body) {
			t.Errorf("answer = %d %s, want 404 %s", resp.StatusCode, body, reply.Body)
		}
	})
}

// TestPassThroughAllowlist: with the gateway's own key, only the allowed
// endpoints are passed through (by default the read-only and inference
// ones); anything else is a 404 in OpenAI's shape that reaches no
// upstream. A client calling with its own key reaches any endpoint.
func TestPassThroughAllowlist(t *testing.T) {
	tests := []struct {
		name    string
		key     proxy.Secret
		allowed []string
		path    string
		pass    bool
	}{
		{"embeddings with the server key", "sk-server-0123456789", nil, "/v1/embeddings", true},
		{"a model's details", "sk-server-0123456789", nil, "GET /v1/models/gpt-test", true},
		{"files with the server key", "sk-server-0123456789", nil, "/v1/files", false},
		{"fine-tunes with the server key", "sk-server-0123456789", nil, "/v1/fine_tuning/jobs", false},
		{"a prefix is a whole segment", "sk-server-0123456789", nil, "/v1/embeddingsX", false},
		{"files allowed by configuration", "sk-server-0123456789", []string{"files"}, "/v1/files", true},
		{"anything allowed", "sk-server-0123456789", []string{"*"}, "/v1/batches", true},
		{"files with the client's own key", "", nil, "/v1/files", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, usrv := proxytest.NewServer(t, proxytest.Script(sim.Reply{Status: http.StatusOK,
				Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"object":"list","data":[]}`)}))
			cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: usrv.URL + "/v1", APIKey: tt.key}}, PassThrough: tt.allowed}
			gw := serveGateway(t, cfg, proxy.Options{})
			method, path, ok := strings.Cut(tt.path, " ")
			if !ok {
				method, path = http.MethodPost, tt.path
			}
			req, err := http.NewRequestWithContext(testContext(t), method, gw.URL+path, strings.NewReader(`{"input":"hi"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer sk-client-0123456789")
			resp, err := gw.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body := readAll(t, resp.Body)
			if got := len(up.Received()) == 1; got != tt.pass {
				t.Fatalf("passed through = %v, want %v (status %d: %s)", got, tt.pass, resp.StatusCode, body)
			}
			if !tt.pass && (resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"code":"unknown_url"`)) {
				t.Errorf("refused endpoint: %d %s, want a 404 unknown_url", resp.StatusCode, body)
			}
		})
	}
}

// TestModelsOwnKeyToOneProvider: a client's own key, passed through when
// the gateway holds none, goes to one provider only (the first the gateway
// holds no key for); the others are not asked with it and are named
// missing. (With a key for the first provider, the client's goes to the
// second: cmd/phasegate TestRunUpstreams.)
func TestModelsOwnKeyToOneProvider(t *testing.T) {
	t.Parallel()
	ds, oa, gw := twoProviders(t, proxytest.Script(modelList("deepseek-v4-flash")), proxytest.Script(modelList("gpt-5")))
	req, err := http.NewRequestWithContext(testContext(t), http.MethodGet, gw+"/v1/models", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk-client-own-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Phasegate-Models-Missing") != "openai" {
		t.Errorf("status %d, X-Phasegate-Models-Missing %q (body %s); want 200 and openai", resp.StatusCode, resp.Header.Get("X-Phasegate-Models-Missing"), body)
	}
	if rec := ds.Received(); len(rec) != 1 || rec[0].Header.Get("Authorization") != "Bearer sk-client-own-0123456789" {
		t.Errorf("first provider got %v, want one request with the client's key", rec)
	}
	if rec := oa.Received(); len(rec) != 0 {
		t.Errorf("second provider got %d requests, want none: the client's key is not its", len(rec))
	}
}
