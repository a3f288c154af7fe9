package proxy_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// errorBody decodes an OpenAI-style error body and checks its shape.
func errorBody(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	if got := resp.Header.Get("Content-Type"); !strings.HasPrefix(got, "application/json") {
		t.Errorf("Content-Type = %q, want application/json", got)
	}
	b := readAll(t, resp.Body)
	var e struct {
		Error map[string]any `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("body %s is not an OpenAI-style error: %v", b, err)
	}
	checkErrorObject(t, e.Error)
	return e.Error
}

// TestGatewayErrors checks every error the gateway produces itself is an
// OpenAI-style body with the right status, and that such requests never
// reach the upstream.
func TestGatewayErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		method    string
		path      string
		body      string
		cfg       func(*proxy.Config)
		status    int
		wantType  string
		wantCode  any // nil: JSON null
		wantParam any
	}{
		{name: "invalid JSON", path: "/v1/chat/completions", body: `not json`, status: 400, wantType: "invalid_request_error"},
		{name: "invalid JSON in messages", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user",}]}`, status: 400, wantType: "invalid_request_error"},
		{name: "messages a string", path: "/v1/chat/completions", body: `{"model":"m","messages":"hi"}`, status: 400, wantType: "invalid_request_error", wantParam: "messages"},
		{name: "not an object", path: "/v1/chat/completions", body: `[1,2]`, status: 400, wantType: "invalid_request_error"},
		{name: "trailing data", path: "/v1/chat/completions", body: chatBody(false) + `{}`, status: 400, wantType: "invalid_request_error"},
		{name: "empty body", path: "/v1/chat/completions", body: ``, status: 400, wantType: "invalid_request_error", wantParam: "model"},
		{name: "missing model", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"hi"}]}`, status: 400, wantType: "invalid_request_error", wantParam: "model"},
		{name: "empty model", path: "/v1/chat/completions", body: `{"model":"","messages":[{"role":"user","content":"hi"}]}`, status: 400, wantType: "invalid_request_error", wantParam: "model"},
		{name: "model not a string", path: "/v1/chat/completions", body: `{"model":7,"messages":[{"role":"user","content":"hi"}]}`, status: 400, wantType: "invalid_request_error", wantParam: "model"},
		{name: "missing messages", path: "/v1/chat/completions", body: `{"model":"m"}`, status: 400, wantType: "invalid_request_error", wantParam: "messages"},
		{name: "null messages", path: "/v1/chat/completions", body: `{"model":"m","messages":null}`, status: 400, wantType: "invalid_request_error", wantParam: "messages"},
		{name: "empty messages", path: "/v1/chat/completions", body: `{"model":"m","messages":[]}`, status: 400, wantType: "invalid_request_error", wantParam: "messages"},
		{name: "message without role", path: "/standard/v1/chat/completions", body: `{"model":"m","messages":[{"content":"hi"}]}`, status: 400, wantType: "invalid_request_error", wantParam: "messages[0].role"},
		{
			name: "body over the configured limit", path: "/v1/chat/completions",
			body: `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2048) + `"}]}`,
			cfg:  func(c *proxy.Config) { c.MaxBodyBytes = 1024 }, status: 413, wantType: "invalid_request_error", wantCode: "request_too_large",
		},
		{
			name: "pass-through body over the limit", path: "/v1/embeddings",
			body: `{"model":"m","input":"` + strings.Repeat("x", 2048) + `"}`,
			cfg:  func(c *proxy.Config) { c.MaxBodyBytes = 1024 }, status: 413, wantType: "invalid_request_error", wantCode: "request_too_large",
		},
		{name: "unknown route", method: http.MethodGet, path: "/nope", status: 404, wantType: "invalid_request_error", wantCode: "unknown_url"},
		{name: "unknown route outside v1", path: "/v2/chat/completions", body: chatBody(false), status: 404, wantType: "invalid_request_error", wantCode: "unknown_url"},
		{name: "wrong method", method: http.MethodGet, path: "/v1/chat/completions", status: 405, wantType: "invalid_request_error", wantCode: "method_not_allowed"},
		{name: "two-stage not enabled", path: "/two-stage/v1/chat/completions", body: chatBody(false), status: 501, wantType: "invalid_request_error", wantCode: "two_stage_disabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up, usrv := proxytest.NewServer(t, proxytest.Script())
			cfg := config(usrv)
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			gw := newGateway(t, cfg)
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			req, err := http.NewRequestWithContext(testContext(t), method, gw.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := gw.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			e := errorBody(t, resp)
			if e["type"] != tt.wantType {
				t.Errorf("type = %v, want %v", e["type"], tt.wantType)
			}
			if e["code"] != tt.wantCode {
				t.Errorf("code = %v, want %v", e["code"], tt.wantCode)
			}
			if e["param"] != tt.wantParam {
				t.Errorf("param = %v, want %v", e["param"], tt.wantParam)
			}
			if n := len(up.Received()); n != 0 {
				t.Errorf("upstream got %d requests, want none", n)
			}
		})
	}
}

// paddedBody returns a valid chat request padded with trailing spaces to
// exactly n bytes.
func paddedBody(n int) []byte {
	b := []byte(chatBody(false))
	return append(b, bytes.Repeat([]byte(" "), n-len(b))...)
}

// TestDefaultBodyLimit checks the default limit is 16 MiB: a body of
// exactly 16 MiB is served, one byte more is 413.
func TestDefaultBodyLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		size   int
		status int
	}{
		{name: "at the limit", size: 16 << 20, status: 200},
		{name: "one byte over", size: 16<<20 + 1, status: 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, gw := startUpstream(t, proxytest.Script(sim.Completion(testModel, map[string]any{"content": "hi"}, "stop", nil)))
			resp := post(t, heavyContext(t), gw, "/v1/chat/completions", string(paddedBody(tt.size)), nil)
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.status == 413 {
				if e := errorBody(t, resp); e["code"] != "request_too_large" {
					t.Errorf("code = %v, want request_too_large", e["code"])
				}
			}
		})
	}
}

// TestUpstreamFailures checks failures to get an answer: an upstream that
// refuses connections is 502, one that is too slow is 504, each an
// OpenAI-style body with a real status, streaming or not.
func TestUpstreamFailures(t *testing.T) {
	t.Parallel()
	// silent holds the answer before any header until released.
	silent := func(release <-chan struct{}) proxytest.Responder {
		return func(proxytest.Received) sim.Reply {
			<-release
			return sim.Reply{Status: http.StatusServiceUnavailable}
		}
	}
	tests := []struct {
		name     string
		stream   bool
		closed   bool
		respond  func(release <-chan struct{}) proxytest.Responder
		timeouts proxy.Timeouts
		// maxResponse sets MaxResponseBytes when not 0.
		maxResponse int64
		// maxEvent sets MaxEventBytes when not 0.
		maxEvent int
		status   int
		wantCode string
	}{
		{name: "unreachable", closed: true, status: 502, wantCode: "upstream_unreachable"},
		{name: "unreachable stream", stream: true, closed: true, status: 502, wantCode: "upstream_unreachable"},
		{name: "no headers before the first-byte timeout", respond: silent, timeouts: proxy.Timeouts{FirstByte: 200 * time.Millisecond}, status: 504, wantCode: "upstream_timeout"},
		{name: "no headers before the first-byte timeout, stream", stream: true, respond: silent, timeouts: proxy.Timeouts{FirstByte: 200 * time.Millisecond}, status: 504, wantCode: "upstream_timeout"},
		{name: "no body before the request timeout", respond: func(<-chan struct{}) proxytest.Responder { return proxytest.Script(sim.Reply{Hang: true}) },
			timeouts: proxy.Timeouts{Request: 200 * time.Millisecond}, status: 504, wantCode: "request_timeout"},
		{name: "no headers before the request timeout, stream", stream: true, respond: silent, timeouts: proxy.Timeouts{Request: 200 * time.Millisecond}, status: 504, wantCode: "request_timeout"},
		{name: "headers but no event before the first-byte timeout, stream", stream: true,
			respond: func(<-chan struct{}) proxytest.Responder {
				return proxytest.Script(sim.Reply{Events: []sim.Event{}, Hang: true})
			},
			timeouts: proxy.Timeouts{FirstByte: 200 * time.Millisecond}, status: 504, wantCode: "upstream_timeout"},
		{name: "first event over the event limit, stream", stream: true, respond: func(<-chan struct{}) proxytest.Responder {
			return proxytest.Script(sim.NewStream(testModel).Content(strings.Repeat("x", 8192)).Finish("stop").Done().Reply())
		}, maxEvent: 4096, status: 502, wantCode: "upstream_event_too_large"},
		{name: "answer over the response limit", respond: func(<-chan struct{}) proxytest.Responder {
			return proxytest.Script(sim.Completion(testModel, map[string]any{"content": strings.Repeat("x", 4096)}, "stop", nil))
		}, maxResponse: 1024, status: 502, wantCode: "upstream_response_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: closedURL(t)}}, Timeouts: tt.timeouts}
			if !tt.closed {
				release := make(chan struct{})
				_, usrv := proxytest.NewServer(t, tt.respond(release))
				// Runs before the server's Close, which waits for handlers.
				t.Cleanup(func() { close(release) })
				cfg = config(usrv)
				cfg.Timeouts = tt.timeouts
				cfg.MaxResponseBytes = tt.maxResponse
				cfg.MaxEventBytes = tt.maxEvent
			}
			gw := newGateway(t, cfg)
			resp := post(t, testContext(t), gw, "/v1/chat/completions", chatBody(tt.stream), nil)
			if resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			if e := errorBody(t, resp); e["code"] != tt.wantCode {
				t.Errorf("code = %v, want %v", e["code"], tt.wantCode)
			}
		})
	}
}

// TestUpstreamErrorsRelayed checks an upstream's error answer reaches the
// client with its own status, body and headers, streaming or not, even
// when it is not JSON.
func TestUpstreamErrorsRelayed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		stream bool
		reply  sim.Reply
	}{
		{name: "400", reply: sim.Error(400, "The reasoning_content in the thinking mode must be passed back to the API.", "invalid_request_error", "invalid_request_error")},
		{name: "401 stream", stream: true, reply: sim.Error(401, "Incorrect API key provided", "invalid_request_error", "invalid_api_key")},
		{name: "429 with vendor fields", reply: sim.Reply{Status: 429, Header: http.Header{"Retry-After": {"20"}}, Body: []byte(`{"error":{"message":"Rate limit","type":"requests","param":null,"code":"rate_limit_exceeded","x_vendor":1}}`)}},
		{name: "500 stream", stream: true, reply: sim.Error(500, "The server had an error", "server_error", "")},
		{name: "503 HTML", reply: sim.Reply{Status: 503, Header: http.Header{"Content-Type": {"text/html"}}, Body: []byte("<html><body>Service Unavailable</body></html>")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, gw := startUpstream(t, proxytest.Script(tt.reply))
			resp := post(t, testContext(t), gw, "/v1/chat/completions", chatBody(tt.stream), nil)
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.reply.Status {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.reply.Status)
			}
			if !bytes.Equal(body, tt.reply.Body) {
				t.Errorf("body = %s, want %s", body, tt.reply.Body)
			}
			wantType := tt.reply.Header.Get("Content-Type")
			if wantType == "" {
				wantType = "application/json"
			}
			if got := resp.Header.Get("Content-Type"); got != wantType {
				t.Errorf("Content-Type = %q, want %q", got, wantType)
			}
			if got, want := resp.Header.Get("Retry-After"), tt.reply.Header.Get("Retry-After"); got != want {
				t.Errorf("Retry-After = %q, want %q", got, want)
			}
		})
	}
}

// TestHealthAndReadiness checks /healthz, and /readyz turning 503 once the
// gateway drains.
func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	h, err := proxy.New(config(closedServer(t)), proxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gw := newTestServer(t, h)
	get := func(path string) int {
		t.Helper()
		resp, err := gw.Client().Get(gw.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	steps := []struct {
		name  string
		drain bool
		path  string
		want  int
	}{
		{name: "healthy", path: "/healthz", want: 200},
		{name: "ready", path: "/readyz", want: 200},
		{name: "draining is not ready", drain: true, path: "/readyz", want: 503},
		{name: "draining is still healthy", path: "/healthz", want: 200},
	}
	for _, s := range steps {
		if s.drain {
			h.Drain()
		}
		if got := get(s.path); got != s.want {
			t.Errorf("%s: GET %s = %d, want %d", s.name, s.path, got, s.want)
		}
	}
}

// TestNewRejectsInvalidConfig checks proxy.New validates its config.
func TestNewRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	_, err := proxy.New(proxy.Config{}, proxy.Options{})
	if err == nil {
		t.Fatal("proxy.New with no provider: got nil error")
	}
}
