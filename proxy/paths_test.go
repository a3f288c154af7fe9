package proxy_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/sim"
)

// hit is what reached the recording upstream: the request line as it
// came on the wire, the body's size and the headers.
type hit struct {
	method, uri string
	bodyBytes   int64
	header      http.Header
}

// recordingUpstream answers chat completions as the simulated model and
// any other path with an empty list, and records exactly what reached it.
type recordingUpstream struct {
	mu   sync.Mutex
	hits []hit
}

func (u *recordingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.hits = append(u.hits, hit{method: r.Method, uri: r.RequestURI, bodyBytes: int64(len(body)), header: r.Header.Clone()})
	u.mu.Unlock()
	if strings.HasSuffix(r.URL.Path, "/chat/completions") {
		sim.Answer(http.MethodPost, "/v1/chat/completions", body).Serve(r.Context(), w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"object":"list","data":[]}`))
}

func (u *recordingUpstream) received() []hit {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]hit(nil), u.hits...)
}

// recordedGateway starts a recording upstream and a gateway in front of
// it with cfg, its provider "openai" holding key (empty: the client's own
// key is passed on).
func recordedGateway(t *testing.T, key proxy.Secret, cfg proxy.Config) (*recordingUpstream, *httptest.Server) {
	t.Helper()
	up := &recordingUpstream{}
	usrv := httptest.NewServer(up)
	t.Cleanup(usrv.Close)
	cfg.Providers = []proxy.Provider{{Name: "openai", BaseURL: usrv.URL + "/v1", APIKey: key}}
	return up, newGateway(t, cfg)
}

// exchange writes a hand-written request on a new connection, so that the
// path goes out byte for byte as written, and returns the answer and its
// body.
func exchange(t *testing.T, gw *httptest.Server, request string) (*http.Response, []byte) {
	t.Helper()
	return exchangeWith(t, gw.Listener.Addr().String(), request)
}

// exchangeWith writes request on a new connection to addr and returns the
// answer and its body.
func exchangeWith(t *testing.T, addr, request string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	if _, err := conn.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// rawHTTP is a request with method and target as written, and body.
func rawHTTP(method, target, contentType, body, extra string) string {
	return method + " " + target + " HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nAuthorization: Bearer sk-client-0123456789\r\n" +
		"Content-Type: " + contentType + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n" + extra + "\r\n" + body
}

func errorCode(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Errorf("body %s is not an OpenAI error", body)
	}
	return e.Error.Code
}

// TestPathsNormalisedBeforeRouting sends paths with dot segments, encoded
// dots, encoded slashes and doubled slashes, as written on the wire. The
// gateway routes on the normalised path (RFC 3986 §5.2.4), so a chat
// completion reached by a detour is served by the chat route (with its
// guard, fit and limits), an endpoint reached by one is judged by the
// allowlist as itself, and the upstream only ever sees the normalised
// path; an encoded slash is a 400 that reaches no upstream.
func TestPathsNormalisedBeforeRouting(t *testing.T) {
	chatBody := `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name   string
		key    proxy.Secret // the gateway's own key, or none
		method string
		target string
		body   string
		status int
		code   string // the error code, when refused
		// upstream is the request line the upstream must see ("" for none);
		// chat that the chat route served it.
		upstream string
		chat     bool
	}{
		{name: "dot segments into the chat route", key: "sk-server-0123456789", method: "POST", target: "/v1/models/../chat/completions", body: chatBody,
			status: 200, upstream: "POST /v1/chat/completions", chat: true},
		{name: "encoded dots into the chat route", key: "sk-server-0123456789", method: "POST", target: "/v1/models/%2e%2E/chat/completions", body: chatBody,
			status: 200, upstream: "POST /v1/chat/completions", chat: true},
		{name: "dot segments to an endpoint not allowed", key: "sk-server-0123456789", method: "GET", target: "/v1/models/../files",
			status: 404, code: "unknown_url"},
		{name: "encoded slashes", key: "sk-server-0123456789", method: "GET", target: "/v1/models/%2f..%2ffiles",
			status: 400, code: "invalid_path"},
		{name: "an encoded backslash", method: "GET", target: "/v1/models/..%5cfiles", status: 400, code: "invalid_path"},
		{name: "climbing above /v1 with the client's key", method: "GET", target: "/v1/../admin/keys", status: 404, code: "unknown_url"},
		{name: "doubled slashes into the chat route with the client's key", method: "POST", target: "/v1//chat//completions", body: chatBody,
			status: 200, upstream: "POST /v1/chat/completions", chat: true},
		{name: "a model's details through a dot segment", key: "sk-server-0123456789", method: "GET", target: "/v1/embeddings/../models/./gpt-x",
			status: 200, upstream: "GET /v1/models/gpt-x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, gw := recordedGateway(t, tt.key, proxy.Config{})
			resp, body := exchange(t, gw, rawHTTP(tt.method, tt.target, "application/json", tt.body, ""))
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d (%s)", resp.StatusCode, tt.status, body)
			}
			if tt.code != "" {
				if got := errorCode(t, body); got != tt.code {
					t.Errorf("code = %q, want %q", got, tt.code)
				}
			}
			if got := resp.Header.Get("X-Phasegate-Protocol") != ""; got != tt.chat {
				t.Errorf("served by the chat route = %v, want %v", got, tt.chat)
			}
			var lines []string
			for _, h := range up.received() {
				lines = append(lines, h.method+" "+h.uri)
			}
			want := []string(nil)
			if tt.upstream != "" {
				want = []string{tt.upstream}
			}
			if strings.Join(lines, "|") != strings.Join(want, "|") {
				t.Errorf("upstream got %q, want %q", lines, want)
			}
		})
	}
}

// TestPassThroughMethods: the allowlist names methods as well as paths.
// With the gateway's key, DELETE /v1/models/{id} (which deletes a
// fine-tuned model upstream) is a 405 that reaches no upstream, while GET
// of the same path passes; a bare path allows GET, HEAD and POST, and a
// method must be named to allow any other.
func TestPassThroughMethods(t *testing.T) {
	tests := []struct {
		name    string
		allowed []string
		method  string
		path    string
		status  int
	}{
		{name: "delete a model by default", method: "DELETE", path: "/v1/models/ft:gpt-x:org:1", status: 405},
		{name: "a model's details by default", method: "GET", path: "/v1/models/ft:gpt-x:org:1", status: 200},
		{name: "embeddings by default", method: "POST", path: "/v1/embeddings", status: 200},
		{name: "moderations read by GET", method: "GET", path: "/v1/moderations", status: 405},
		{name: "a bare path does not allow DELETE", allowed: []string{"files"}, method: "DELETE", path: "/v1/files/file-1", status: 405},
		{name: "a bare path allows POST", allowed: []string{"files"}, method: "POST", path: "/v1/files", status: 200},
		{name: "DELETE named", allowed: []string{"GET /models", "DELETE /models"}, method: "DELETE", path: "/v1/models/ft:gpt-x:org:1", status: 200},
		{name: "any method", allowed: []string{"* /batches"}, method: "PUT", path: "/v1/batches/b1", status: 200},
		{name: "a path not listed", method: "DELETE", path: "/v1/files/file-1", status: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, gw := recordedGateway(t, "sk-server-0123456789", proxy.Config{PassThrough: tt.allowed})
			resp, body := exchange(t, gw, rawHTTP(tt.method, tt.path, "application/json", `{"input":"x"}`, ""))
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d (%s)", resp.StatusCode, tt.status, body)
			}
			got := up.received()
			if tt.status != 200 {
				errorCode(t, body)
				if len(got) != 0 {
					t.Errorf("a refused request reached the upstream: %+v", got)
				}
				return
			}
			if len(got) != 1 || got[0].method != tt.method || got[0].uri != tt.path {
				t.Errorf("upstream got %+v, want one %s %s", got, tt.method, tt.path)
			}
		})
	}
	t.Run("an unknown method is refused at start", func(t *testing.T) {
		cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: "http://127.0.0.1:1/v1"}}, PassThrough: []string{"FETCH /models"}}
		if _, err := proxy.New(cfg, proxy.Options{}); err == nil || !strings.Contains(err.Error(), "PassThrough: ") {
			t.Errorf("New = %v, want an error naming the PassThrough field", err)
		}
	})
}

// TestBodyLimitEveryContentType: MAX_BODY_BYTES holds whatever the body's
// Content-Type and framing: a body over it, to a pass-through endpoint
// or to the chat route, is a 413 in OpenAI's shape and no byte of it
// reaches the upstream.
func TestBodyLimitEveryContentType(t *testing.T) {
	const limit = 64 << 10
	big := strings.Repeat("x", limit+1)
	tests := []struct {
		name, target, contentType string
		chunked                   bool
	}{
		{name: "octet-stream with a length", target: "/v1/embeddings", contentType: "application/octet-stream"},
		{name: "octet-stream chunked", target: "/v1/embeddings", contentType: "application/octet-stream", chunked: true},
		{name: "multipart chunked", target: "/v1/embeddings", contentType: "multipart/form-data; boundary=x", chunked: true},
		{name: "text to the chat route, chunked", target: "/v1/chat/completions", contentType: "text/plain", chunked: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, gw := recordedGateway(t, "sk-server-0123456789", proxy.Config{MaxBodyBytes: limit})
			req := rawHTTP("POST", tt.target, tt.contentType, big, "")
			if tt.chunked {
				req = "POST " + tt.target + " HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nContent-Type: " + tt.contentType +
					"\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(big)
			}
			resp, body := exchange(t, gw, req)
			if resp.StatusCode != http.StatusRequestEntityTooLarge || errorCode(t, body) != "request_too_large" {
				t.Errorf("answer = %d %s, want 413 request_too_large", resp.StatusCode, body)
			}
			if got := up.received(); len(got) != 0 {
				t.Errorf("the upstream got %d requests (first with %d body bytes), want none", len(got), got[0].bodyBytes)
			}
		})
	}
	t.Run("a body at the limit passes whole", func(t *testing.T) {
		up, gw := recordedGateway(t, "sk-server-0123456789", proxy.Config{MaxBodyBytes: limit})
		resp, body := exchange(t, gw, rawHTTP("POST", "/v1/embeddings", "application/octet-stream", big[:limit], ""))
		if got := up.received(); resp.StatusCode != 200 || len(got) != 1 || got[0].bodyBytes != limit {
			t.Errorf("answer %d %s, upstream %+v; want 200 and the %d bytes upstream", resp.StatusCode, body, got, limit)
		}
	})
}

// TestRateLimitsPassThrough: the rate limits hold for pass-through
// endpoints too, and a detour through a dot segment is limited as the
// endpoint it reaches.
func TestRateLimitsPassThrough(t *testing.T) {
	up, gw := recordedGateway(t, "sk-server-0123456789", proxy.Config{RateLimits: proxy.RateLimits{KeyRequests: 2}})
	statuses := []int{}
	for _, target := range []string{"/v1/models/gpt-x", "/v1/embeddings/../models/gpt-x", "/v1/models/gpt-y"} {
		resp, body := exchange(t, gw, rawHTTP("GET", target, "application/json", "", ""))
		statuses = append(statuses, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests && (errorCode(t, body) != "rate_limit_exceeded" || resp.Header.Get("Retry-After") == "") {
			t.Errorf("429 %s with Retry-After %q, want rate_limit_exceeded and a wait", body, resp.Header.Get("Retry-After"))
		}
	}
	if want := []int{200, 200, 429}; !slices.Equal(statuses, want) {
		t.Errorf("statuses = %v, want %v", statuses, want)
	}
	if n := len(up.received()); n != 2 {
		t.Errorf("upstream requests = %d, want 2", n)
	}
}
