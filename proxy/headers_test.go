package proxy_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

var generatedID = regexp.MustCompile(`^pg-[0-9a-f]{24}$`)

// upstreamHeader is what a provider such as OpenAI sends with an answer:
// its own request id and its rate-limit state.
func upstreamHeader() http.Header {
	return http.Header{
		"X-Request-Id":                   {"req_upstream_123"},
		"X-Ratelimit-Limit-Requests":     {"500"},
		"X-Ratelimit-Remaining-Requests": {"499"},
		"X-Ratelimit-Reset-Tokens":       {"6ms"},
		"Retry-After":                    {"1"},
		"Openai-Processing-Ms":           {"42"},
	}
}

var rateLimitHeaders = []string{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Tokens", "Retry-After", "Openai-Processing-Ms"}

// TestRequestID checks X-Request-Id: the client's is kept, a missing or
// absurd one is generated; either way the same id is echoed to the client
// and sent upstream, whatever id the upstream answers with.
func TestRequestID(t *testing.T) {
	t.Parallel()
	withHeader := func(r sim.Reply) sim.Reply { r.Header = upstreamHeader(); return r }
	stream := withHeader(sim.NewStream(testModel).Role().Content("hi").Finish("stop").Done().Reply())
	completion := withHeader(sim.Completion(testModel, map[string]any{"content": "hi"}, "stop", nil))
	failure := withHeader(sim.Error(http.StatusTooManyRequests, "slow down", "rate_limit_error", "rate_limit_exceeded"))
	tests := []struct {
		name   string
		sent   string // "" sends none
		path   string
		body   string
		reply  sim.Reply
		status int
		// generated means the gateway must make an id up.
		generated bool
	}{
		{name: "generated when absent, stream", path: "/v1/chat/completions", body: chatBody(true), reply: stream, status: 200, generated: true},
		{name: "kept, stream", sent: "client-id-1", path: "/v1/chat/completions", body: chatBody(true), reply: stream, status: 200},
		{name: "kept, non-streaming", sent: "client-id-2", path: "/v1/chat/completions", body: chatBody(false), reply: completion, status: 200},
		{name: "generated, non-streaming", path: "/standard/v1/chat/completions", body: chatBody(false), reply: completion, status: 200, generated: true},
		{name: "kept on a relayed upstream error", sent: "client-id-3", path: "/v1/chat/completions", body: chatBody(false), reply: failure, status: 429},
		{name: "replaced when longer than 200 bytes", sent: strings.Repeat("x", 201), path: "/v1/chat/completions", body: chatBody(false), reply: completion, status: 200, generated: true},
		{name: "kept on a pass-through", sent: "client-id-4", path: "/v1/embeddings", body: `{"model":"text-embedding-3-small","input":"hi"}`, reply: withHeader(sim.Reply{Body: []byte(`{"object":"list","data":[]}`)}), status: 200},
		{name: "generated on a gateway error", path: "/v1/chat/completions", body: `{`, status: 400, generated: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up, gw := startUpstream(t, proxytest.Script(tt.reply))
			var h http.Header
			if tt.sent != "" {
				h = http.Header{"X-Request-Id": {tt.sent}}
			}
			resp := post(t, testContext(t), gw, tt.path, tt.body, h)
			readAll(t, resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			echoed := resp.Header.Values("X-Request-Id")
			if len(echoed) != 1 {
				t.Fatalf("response X-Request-Id = %q, want exactly one", echoed)
			}
			if tt.generated {
				if !generatedID.MatchString(echoed[0]) {
					t.Errorf("response X-Request-Id = %q, want a generated id matching %s", echoed[0], generatedID)
				}
			} else if echoed[0] != tt.sent {
				t.Errorf("response X-Request-Id = %q, want the client's %q", echoed[0], tt.sent)
			}
			rec := up.Received()
			if tt.status == http.StatusBadRequest {
				if len(rec) != 0 {
					t.Errorf("upstream got %d requests, want none", len(rec))
				}
				return
			}
			if len(rec) != 1 {
				t.Fatalf("upstream got %d requests, want 1", len(rec))
			}
			if got := rec[0].Header.Values("X-Request-Id"); len(got) != 1 || got[0] != echoed[0] {
				t.Errorf("upstream X-Request-Id = %q, want the echoed %q", got, echoed[0])
			}
		})
	}
}

// TestRequestIDsAreUnique checks generated ids differ between requests.
func TestRequestIDsAreUnique(t *testing.T) {
	t.Parallel()
	gw := newGateway(t, config(closedServer(t)))
	seen := map[string]bool{}
	for range 20 {
		resp, err := gw.Client().Get(gw.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		id := resp.Header.Get("X-Request-Id")
		if !generatedID.MatchString(id) || seen[id] {
			t.Fatalf("X-Request-Id = %q: not a fresh generated id (seen %d)", id, len(seen))
		}
		seen[id] = true
	}
}

// TestHopByHopHeaders checks hop-by-hop headers, and those a Connection
// header names, are stripped in both directions, while end-to-end headers
// pass, on the chat route and on a pass-through.
func TestHopByHopHeaders(t *testing.T) {
	t.Parallel()
	hop := http.Header{
		"Connection":          {"X-Hop-Named"},
		"X-Hop-Named":         {"1"},
		"Keep-Alive":          {"timeout=5"},
		"Proxy-Authorization": {"Basic c2VjcmV0"},
		"Proxy-Connection":    {"keep-alive"},
		"X-Stainless-Lang":    {"kept"},
	}
	stripped := []string{"X-Hop-Named", "Keep-Alive", "Proxy-Authorization", "Proxy-Connection", "Proxy-Authenticate"}
	upHeader := http.Header{
		"Connection":         {"X-Hop-Up"},
		"X-Hop-Up":           {"1"},
		"Keep-Alive":         {"timeout=5"},
		"Proxy-Authenticate": {"Basic"},
		"Openai-Version":     {"kept"},
	}
	withHeader := func(r sim.Reply) sim.Reply { r.Header = upHeader; return r }
	tests := []struct {
		name  string
		path  string
		body  string
		reply sim.Reply
	}{
		{name: "stream", path: "/v1/chat/completions", body: chatBody(true), reply: withHeader(sim.NewStream(testModel).Role().Finish("stop").Done().Reply())},
		{name: "non-streaming", path: "/v1/chat/completions", body: chatBody(false), reply: withHeader(sim.Completion(testModel, map[string]any{"content": "hi"}, "stop", nil))},
		{name: "upstream error", path: "/v1/chat/completions", body: chatBody(false), reply: withHeader(sim.Error(http.StatusBadRequest, "bad", "invalid_request_error", "bad"))},
		{name: "pass-through", path: "/v1/embeddings", body: `{"model":"m","input":"x"}`, reply: withHeader(sim.Reply{Body: []byte(`{}`)})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up, gw := startUpstream(t, proxytest.Script(tt.reply))
			resp := post(t, testContext(t), gw, tt.path, tt.body, hop)
			readAll(t, resp.Body)
			rec := up.Received()
			if len(rec) != 1 {
				t.Fatalf("upstream got %d requests, want 1", len(rec))
			}
			for _, k := range stripped {
				if v := rec[0].Header.Values(k); len(v) > 0 {
					t.Errorf("upstream got hop-by-hop %s: %q", k, v)
				}
			}
			if got := rec[0].Header.Get("X-Stainless-Lang"); got != "kept" {
				t.Errorf("upstream X-Stainless-Lang = %q, want %q", got, "kept")
			}
			for _, k := range []string{"X-Hop-Up", "Keep-Alive", "Proxy-Authenticate"} {
				if v := resp.Header.Values(k); len(v) > 0 {
					t.Errorf("client got hop-by-hop %s: %q", k, v)
				}
			}
			if v := resp.Header.Values("Connection"); len(v) > 0 && !(len(v) == 1 && v[0] == "close") {
				t.Errorf("client got Connection %q from the upstream", v)
			}
			if got := resp.Header.Get("Openai-Version"); got != "kept" {
				t.Errorf("client Openai-Version = %q, want %q", got, "kept")
			}
		})
	}
}

// TestRateLimitHeadersPassedBack checks the upstream's rate-limit headers
// reach the client on every kind of answer.
func TestRateLimitHeadersPassedBack(t *testing.T) {
	t.Parallel()
	withHeader := func(r sim.Reply) sim.Reply { r.Header = upstreamHeader(); return r }
	tests := []struct {
		name   string
		body   string
		reply  sim.Reply
		status int
	}{
		{name: "stream", body: chatBody(true), reply: withHeader(sim.NewStream(testModel).Role().Content("hi").Finish("stop").Done().Reply()), status: 200},
		{name: "non-streaming", body: chatBody(false), reply: withHeader(sim.Completion(testModel, map[string]any{"content": "hi"}, "stop", nil)), status: 200},
		{name: "rate limited", body: chatBody(false), reply: withHeader(sim.Error(http.StatusTooManyRequests, "slow down", "rate_limit_error", "rate_limit_exceeded")), status: 429},
		{name: "rate limited stream", body: chatBody(true), reply: withHeader(sim.Error(http.StatusTooManyRequests, "slow down", "rate_limit_error", "rate_limit_exceeded")), status: 429},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, gw := startUpstream(t, proxytest.Script(tt.reply))
			resp := post(t, testContext(t), gw, "/v1/chat/completions", tt.body, nil)
			readAll(t, resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			for _, k := range rateLimitHeaders {
				if got, want := resp.Header.Get(k), tt.reply.Header.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

// TestAuthorization checks the client's own key reaches a provider for
// which the gateway holds none, and the gateway's key replaces it
// otherwise.
func TestAuthorization(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		key  proxy.Secret
		path string
		body string
		want string
	}{
		{name: "client key passed through", path: "/v1/chat/completions", body: chatBody(false), want: "Bearer sk-client"},
		{name: "gateway key replaces it", key: "sk-gateway", path: "/v1/chat/completions", body: chatBody(false), want: "Bearer sk-gateway"},
		{name: "client key on a pass-through", path: "/v1/embeddings", body: `{"model":"m","input":"x"}`, want: "Bearer sk-client"},
		{name: "gateway key on a pass-through", key: "sk-gateway", path: "/v1/embeddings", body: `{"model":"m","input":"x"}`, want: "Bearer sk-gateway"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up, usrv := proxytest.NewServer(t, proxytest.Script(sim.Completion(testModel, map[string]any{"content": "hi"}, "stop", nil)))
			cfg := config(usrv)
			cfg.Providers[0].APIKey = tt.key
			gw := newGateway(t, cfg)
			resp := post(t, testContext(t), gw, tt.path, tt.body, http.Header{"Authorization": {"Bearer sk-client"}})
			readAll(t, resp.Body)
			rec := up.Received()
			if len(rec) != 1 {
				t.Fatalf("upstream got %d requests, want 1", len(rec))
			}
			if got := rec[0].Header.Values("Authorization"); len(got) != 1 || got[0] != tt.want {
				t.Errorf("upstream Authorization = %q, want %q", got, tt.want)
			}
		})
	}
}
