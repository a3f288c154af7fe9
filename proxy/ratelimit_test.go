package proxy_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// limitGateway returns a gateway of cfg with its limits in memory, or on a
// real Redis.
func limitGateway(t *testing.T, cfg proxy.Config, shared bool) *httptest.Server {
	t.Helper()
	if !shared {
		return newGateway(t, cfg)
	}
	a, _, _ := replicas(t, cfg)
	return a
}

var limitStores = map[string]bool{"memory": false, "redis": true}

// A request refused by one budget spends none of the others: neither the
// key's requests when the project's requests refuse, nor the requests
// when a tokens budget refuses.
func TestRateLimitRefusalSpendsNoOtherBudget(t *testing.T) {
	for name, shared := range limitStores {
		t.Run(name, func(t *testing.T) {
			_, usrv := proxytest.NewServer(t, proxytest.Simulated())
			cfg := config(usrv)
			cfg.RateLimits = proxy.RateLimits{KeyRequests: 10, ProjectRequests: 1, ProjectTokens: 200}
			gw := limitGateway(t, cfg, shared)
			ctx := testContext(t)
			key := "Bearer sk-" + name
			h := http.Header{"X-Project-Id": {"p1"}, "Authorization": {key}}
			// Over the project's 200 tokens: refused by a tokens budget.
			big := `{"model":"` + testModel + `","messages":[{"role":"user","content":"` + strings.Repeat("word ", 2000) + `"}]}`
			for range 3 {
				r := post(t, ctx, gw, "/v1/chat/completions", big, h)
				body := readAll(t, r.Body)
				if r.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `"type":"tokens"`) {
					t.Fatalf("a prompt over the project's tokens: %d %s; want 429 of type tokens", r.StatusCode, body)
				}
			}
			small := `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}]}`
			r := post(t, ctx, gw, "/v1/chat/completions", small, h)
			if body := readAll(t, r.Body); r.StatusCode != http.StatusOK {
				t.Fatalf("first request within every budget: %d %s", r.StatusCode, body)
			}
			// The project's one request a minute is spent: refused by it.
			for range 5 {
				r := post(t, ctx, gw, "/v1/chat/completions", small, h)
				body := readAll(t, r.Body)
				if r.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "this project") {
					t.Fatalf("second request of the project: %d %s; want the project's 429", r.StatusCode, body)
				}
			}
			r = post(t, ctx, gw, "/v1/chat/completions", small, http.Header{"Authorization": {key}})
			readAll(t, r.Body)
			if got, _ := strconv.Atoi(r.Header.Get("X-Ratelimit-Remaining-Requests")); r.StatusCode != http.StatusOK || got != 8 {
				t.Errorf("key's requests left after 1 served, 8 refused and this one: %d (status %d), want 8", got, r.StatusCode)
			}
		})
	}
}

// Completion tokens count against the tokens per minute in full: one
// answer of 20010 tokens under 1000 a minute puts the budget 19 minutes in
// debt, and the next request waits that long.
func TestRateLimitTokensChargeUsageInFull(t *testing.T) {
	for name, shared := range limitStores {
		t.Run(name, func(t *testing.T) {
			reply := sim.Completion(testModel, map[string]any{"content": "long"}, "stop",
				map[string]any{"prompt_tokens": 10, "completion_tokens": 20000, "total_tokens": 20010})
			_, usrv := proxytest.NewServer(t, func(proxytest.Received) sim.Reply { return reply })
			cfg := config(usrv)
			cfg.RateLimits = proxy.RateLimits{KeyTokens: 1000}
			gw := limitGateway(t, cfg, shared)
			ctx := testContext(t)
			first := post(t, ctx, gw, "/v1/chat/completions", chatBody(false), nil)
			if body := readAll(t, first.Body); first.StatusCode != http.StatusOK {
				t.Fatalf("first request: %d %s", first.StatusCode, body)
			}
			for range 3 {
				r := post(t, ctx, gw, "/v1/chat/completions", chatBody(false), nil)
				body := readAll(t, r.Body)
				wait, _ := strconv.Atoi(r.Header.Get("Retry-After"))
				if r.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `"type":"tokens"`) || wait < 18*60 || wait > 20*60 {
					t.Fatalf("after 20010 tokens under 1000/min: %d, Retry-After %q: %s; want 429 of type tokens, a wait of about 19 minutes", r.StatusCode, r.Header.Get("Retry-After"), body)
				}
			}
		})
	}
}
