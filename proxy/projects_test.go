package proxy_test

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/proxy"
)

const (
	keyAlpha = "pg-client-key-alpha-0123456789"
	keyBeta  = "pg-client-key-beta-0123456789"
)

// keyedGateway is a gateway with client keys alpha (bound to no project)
// and beta (bound to proj-beta) in front of a recording upstream.
func keyedGateway(t *testing.T, cfg proxy.Config) (*recordingUpstream, string) {
	t.Helper()
	cfg.ClientKeys = []proxy.ClientKey{{Key: keyAlpha}, {Key: keyBeta, Project: "proj-beta"}}
	up, gw := recordedGateway(t, "sk-server-0123456789", cfg)
	return up, gw.URL
}

// send makes one request with the given headers and returns the answer
// and its body.
func send(t *testing.T, base, method, path, body string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(testContext(t), method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp, readAll(t, resp.Body)
}

// TestProjectComesFromKey: with client keys, a request's project is its
// key's. A key bound to no project cannot spend another key's project by
// naming it in X-Project-Id, nor escape its own project limit by rotating
// X-Project-Id: it is a project of its own.
func TestProjectComesFromKey(t *testing.T) {
	_, gw := keyedGateway(t, proxy.Config{RateLimits: proxy.RateLimits{ProjectRequests: 2}})
	as := func(key, project string) int {
		resp, body := send(t, gw, http.MethodPost, "/v1/chat/completions", chatBody(false),
			http.Header{"Authorization": {"Bearer " + key}, "X-Project-Id": {project}})
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		return resp.StatusCode
	}
	got := []int{
		as(keyAlpha, "proj-beta"), as(keyAlpha, "proj-beta"), // alpha names beta's project
		as(keyBeta, "proj-beta"),              // beta's budget is whole
		as(keyAlpha, "rotated-"+randomHex(t)), // alpha's own project is spent
		as(keyAlpha, "rotated-"+randomHex(t)),
	}
	if want := []int{200, 200, 200, 429, 429}; !slices.Equal(got, want) {
		t.Errorf("statuses = %v, want %v", got, want)
	}
	t.Run("a key bound to a name kept for keys bound to none is refused at start", func(t *testing.T) {
		cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: "http://127.0.0.1:1/v1", APIKey: "sk-server-0123456789"}},
			ClientKeys: []proxy.ClientKey{{Key: keyAlpha}, {Key: keyBeta, Project: "key-1"}}}
		if _, err := proxy.New(cfg, proxy.Options{}); err == nil || !strings.Contains(err.Error(), "ClientKeys: ") {
			t.Errorf("New = %v, want an error naming the ClientKeys field", err)
		}
	})
}

func randomHex(t *testing.T) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// TestAddressLimits: an open gateway (no client keys) limits by client
// address, which a fresh bearer token per request does not escape.
// X-Forwarded-For names the client only when it comes from a trusted
// proxy; an IPv6 client counts as its /64.
func TestAddressLimits(t *testing.T) {
	tests := []struct {
		name    string
		trusted []string
		// forwarded are the X-Forwarded-For of the requests, in order.
		forwarded []string
		want      []int
	}{
		{name: "fresh bearer tokens", forwarded: []string{"", "", ""}, want: []int{200, 200, 429}},
		{name: "X-Forwarded-For from an untrusted peer", forwarded: []string{"203.0.113.1", "203.0.113.2", "203.0.113.3"},
			want: []int{200, 200, 429}},
		{name: "X-Forwarded-For from a trusted proxy", trusted: []string{"127.0.0.1/32"},
			forwarded: []string{"203.0.113.1", "203.0.113.2", "203.0.113.1", "203.0.113.1"}, want: []int{200, 200, 200, 429}},
		{name: "only the hop the trusted proxy saw counts", trusted: []string{"127.0.0.1"},
			forwarded: []string{"198.51.100.7, 203.0.113.1", "198.51.100.8, 203.0.113.1", "198.51.100.9, 203.0.113.1"}, want: []int{200, 200, 429}},
		{name: "an IPv6 client is its /64", trusted: []string{"127.0.0.1"},
			forwarded: []string{"2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::3", "2001:db8:1:3::1"}, want: []int{200, 200, 429, 200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, gw := recordedGateway(t, "", proxy.Config{TrustedProxies: tt.trusted, RateLimits: proxy.RateLimits{AddressRequests: 2, KeyRequests: 2}})
			var got []int
			for _, xff := range tt.forwarded {
				h := http.Header{"Authorization": {"Bearer sk-fresh-" + randomHex(t)}}
				if xff != "" {
					h.Set("X-Forwarded-For", xff)
				}
				resp, body := send(t, gw.URL, http.MethodPost, "/v1/chat/completions", chatBody(false), h)
				if resp.StatusCode == http.StatusTooManyRequests && !strings.Contains(string(body), "client address") {
					t.Errorf("429 %s, want the address limit named", body)
				}
				got = append(got, resp.StatusCode)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("statuses = %v, want %v", got, tt.want)
			}
			if n, want := len(up.received()), count(tt.want, 200); n != want {
				t.Errorf("upstream requests = %d, want %d", n, want)
			}
		})
	}
	t.Run("a trusted proxy that is not an address is refused at start", func(t *testing.T) {
		cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: "http://127.0.0.1:1/v1"}}, TrustedProxies: []string{"10.0.0.0/33"}}
		if _, err := proxy.New(cfg, proxy.Options{}); err == nil || !strings.Contains(err.Error(), "TrustedProxies: ") {
			t.Errorf("New = %v, want an error naming the TrustedProxies field", err)
		}
	})
}

func count(xs []int, x int) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

// TestRequestIDOfAnotherKey: request ids are the clients' to choose, so
// each client key has ids of its own. A client that sends the
// X-Request-Id of another key's resumable stream gets a resumable stream
// as with any fresh id (nothing tells it the id was taken), resumes its
// own stream by it, and the other key still resumes its own.
func TestRequestIDOfAnotherKey(t *testing.T) {
	_, gw := keyedGateway(t, proxy.Config{})
	const id = "req-shared-1"
	live := map[string][]byte{}
	for _, key := range []string{keyAlpha, keyBeta} {
		resp, body := send(t, gw, http.MethodPost, "/v1/chat/completions", chatBody(true),
			http.Header{"Authorization": {"Bearer " + key}, "X-Request-Id": {id}, "X-Phasegate-Resumable": {"true"}})
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Phasegate-Resumable") != "true" {
			t.Fatalf("status %d, X-Phasegate-Resumable %q; want 200 and true as for any fresh id", resp.StatusCode, resp.Header.Get("X-Phasegate-Resumable"))
		}
		live[key] = body
	}
	if string(live[keyAlpha]) == string(live[keyBeta]) {
		t.Fatal("the two streams are alike; the test cannot tell them apart")
	}
	for _, key := range []string{keyAlpha, keyBeta} {
		resp, body := send(t, gw, http.MethodGet, "/v1/phasegate/requests/"+id+"/events", "", http.Header{"Authorization": {"Bearer " + key}})
		if resp.StatusCode != http.StatusOK || string(body) != string(live[key]) {
			t.Errorf("resume: %d %s; want 200 and the key's own stream %s", resp.StatusCode, body, live[key])
		}
	}
}

// TestMetricsWithClientKeys: with client keys, /metrics beside the client
// routes asks for the admin key (a client key is not enough), unless the
// operator opts out; on a listener of its own, or with no client keys,
// it is open as Prometheus expects.
func TestMetricsWithClientKeys(t *testing.T) {
	const admin = "pg-admin-key-0123456789"
	tests := []struct {
		name string
		cfg  proxy.Config
		// auth is the Authorization sent, and status what each gets.
		auth   []string
		status []int
	}{
		{name: "client keys", cfg: proxy.Config{AdminAPIKey: admin},
			auth: []string{"", "Bearer " + keyAlpha, "Bearer " + admin, "bearer " + admin}, status: []int{401, 401, 200, 200}},
		{name: "client keys, opted out", cfg: proxy.Config{AdminAPIKey: admin, MetricsOpen: true},
			auth: []string{""}, status: []int{200}},
		{name: "client keys, no admin key", cfg: proxy.Config{},
			auth: []string{"", "Bearer " + keyAlpha}, status: []int{401, 401}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, gw := keyedGateway(t, tt.cfg)
			for i, auth := range tt.auth {
				h := http.Header{}
				if auth != "" {
					h.Set("Authorization", auth)
				}
				resp, body := send(t, gw, http.MethodGet, "/metrics", "", h)
				if resp.StatusCode != tt.status[i] {
					t.Errorf("with %q: %d %.200s, want %d", auth, resp.StatusCode, body, tt.status[i])
				}
				if strings.Contains(string(body), "[redacted]") {
					t.Errorf("with %q: body %.300s is redacted, though it holds no secret", auth, body)
				}
				if resp.StatusCode == 200 && !strings.Contains(string(body), "phasegate_") {
					t.Errorf("with %q: body %.200s is not the metrics", auth, body)
				}
			}
		})
	}
	t.Run("client keys, metrics on a listener of their own", func(t *testing.T) {
		cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: "http://127.0.0.1:1/v1", APIKey: "sk-server-0123456789"}},
			ClientKeys: []proxy.ClientKey{{Key: keyAlpha}}, SeparateAdmin: true}
		h, err := proxy.New(cfg, proxy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		admin := newTestServer(t, h.Admin())
		if resp, _ := send(t, admin.URL, http.MethodGet, "/metrics", "", nil); resp.StatusCode != 200 {
			t.Errorf("status %d on the admin listener, want 200", resp.StatusCode)
		}
	})
	t.Run("no client keys", func(t *testing.T) {
		_, gw := recordedGateway(t, "", proxy.Config{})
		if resp, _ := send(t, gw.URL, http.MethodGet, "/metrics", "", nil); resp.StatusCode != 200 {
			t.Errorf("status %d, want 200", resp.StatusCode)
		}
	})
}
