package proxy_test

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phasegate/phasegate/proxy"
)

// wire writes request on a new connection to srv (which it asks to close)
// and returns every byte the gateway answered, headers, body and trailers.
func wire(t *testing.T, srv *httptest.Server, request string) []byte {
	t.Helper()
	conn, err := net.DialTimeout("tcp", srv.Listener.Addr().String(), wait)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	if _, err := conn.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	return b
}

// TestUpstreamTrailersNotRelayed: an upstream that echoes the gateway's
// key in a trailer, announced or not, on a success or an error of a
// pass-through endpoint, gets no byte of it to the client. No trailer of
// an upstream's is relayed: none is in the response allowlist.
func TestUpstreamTrailersNotRelayed(t *testing.T) {
	t.Parallel()
	const key = "gsk_trailer0123456789abcdefXYZ"
	for _, status := range []int{http.StatusOK, http.StatusInternalServerError} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			usrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Trailer", "X-Echo")
				w.WriteHeader(status)
				_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
				w.Header().Set("X-Echo", r.Header.Get("Authorization"))
				w.Header().Set(http.TrailerPrefix+"X-Late", r.Header.Get("Authorization"))
			}))
			t.Cleanup(usrv.Close)
			cfg := config(usrv)
			cfg.Providers[0].APIKey = key
			gw := newGateway(t, cfg)
			body := `{"model":"m","input":"x"}`
			got := wire(t, gw, "POST /v1/embeddings HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nContent-Type: application/json\r\n"+
				"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
			if !bytes.HasPrefix(got, []byte("HTTP/1.1 "+strconv.Itoa(status))) {
				t.Fatalf("answer %q, want status %d", got, status)
			}
			if bytes.Contains(got, []byte("trailer0123456789")) || bytes.Contains(bytes.ToLower(got), []byte("x-late")) {
				t.Errorf("the upstream's trailer reached the client:\n%s", got)
			}
		})
	}
}

// TestKeyInUpstreamHeaderName: an upstream that writes the gateway's key
// into the name of a header the allowlist admits by prefix
// (X-Ratelimit-…) gets none of it to the client, on the chat route and a
// pass-through, on success and failure. A DeepSeek key (sk- and 32
// lower-case hex digits) survives Go's canonical spelling of header names
// whole, and header names are not redacted; rate-limit header names are
// words.
func TestKeyInUpstreamHeaderName(t *testing.T) {
	t.Parallel()
	const key = "sk-0123456789abcdef0123456789abcdef"
	for _, tt := range []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}]}`},
		{"pass-through", "/v1/embeddings", `{"model":"m","input":"x"}`},
		{"chat failure", "/v1/chat/completions", `{"model":"` + testModel + `","messages":[{"role":"user","content":"fail"}]}`},
		{"pass-through failure", "/v1/embeddings", `{"model":"m","input":"fail"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			usrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Ratelimit-Remaining-Requests", "99")
				w.Header().Set("X-Ratelimit-Remaining-Tokens_usage_based", "98")
				w.Header()["X-Ratelimit-"+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")] = []string{"1"}
				if bytes.Contains(body, []byte("fail")) {
					w.WriteHeader(http.StatusBadRequest)
					_, _ = io.WriteString(w, `{"error":{"message":"no","type":"invalid_request_error","param":null,"code":null}}`)
					return
				}
				if strings.HasSuffix(r.URL.Path, "/embeddings") {
					_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
					return
				}
				_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"fine"},"finish_reason":"stop"}]}`)
			}))
			t.Cleanup(usrv.Close)
			cfg := config(usrv)
			cfg.Providers[0].APIKey = key
			gw := newGateway(t, cfg)
			got := wire(t, gw, "POST "+tt.path+" HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nContent-Type: application/json\r\n"+
				"Content-Length: "+strconv.Itoa(len(tt.body))+"\r\n\r\n"+tt.body)
			if !bytes.Contains(got, []byte("X-Ratelimit-Remaining-Requests: 99")) || !bytes.Contains(got, []byte("X-Ratelimit-Remaining-Tokens_usage_based: 98")) {
				t.Fatalf("the upstream's rate-limit header did not reach the client:\n%s", got)
			}
			if bytes.Contains(bytes.ToLower(got), []byte("0123456789abcdef")) {
				t.Errorf("the key in a header name reached the client:\n%s", got)
			}
		})
	}
}

// TestClientTrailersNotForwarded: a client that sends, as trailers of a
// chunked body, the headers the gateway does not forward with its own key
// (OpenAI-Organization, Cookie, Api-Key) gets none of them to the
// upstream: a pass-through sends the body it read, with its length and no
// trailers.
func TestClientTrailersNotForwarded(t *testing.T) {
	t.Parallel()
	type got struct {
		trailer  http.Header
		chunked  bool
		announce string
	}
	seen := make(chan got, 1)
	usrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		announce := r.Header.Get("Trailer")
		_, _ = io.Copy(io.Discard, r.Body)
		seen <- got{trailer: r.Trailer, chunked: len(r.TransferEncoding) > 0, announce: announce}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	t.Cleanup(usrv.Close)
	gw := operatorKeyGateway(t, usrv)
	body := `{"model":"m","input":"x"}`
	answer := wire(t, gw, "POST /v1/embeddings HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nContent-Type: application/json\r\n"+
		"Transfer-Encoding: chunked\r\nTrailer: Openai-Organization, Cookie, Api-Key\r\n\r\n"+
		strconv.FormatInt(int64(len(body)), 16)+"\r\n"+body+"\r\n0\r\nOpenai-Organization: org-elsewhere\r\nCookie: session=1\r\nApi-Key: other-key\r\n\r\n")
	if !bytes.HasPrefix(answer, []byte("HTTP/1.1 200")) {
		t.Fatalf("answer %q, want 200", answer)
	}
	select {
	case g := <-seen:
		if len(g.trailer) > 0 || g.announce != "" || g.chunked {
			t.Errorf("upstream got trailers %v (announced %q, chunked %v); want none, the body sent with its length", g.trailer, g.announce, g.chunked)
		}
	default:
		t.Fatal("the upstream got no request")
	}
}

// TestPassThroughSuccessWithErrorRedacted: some OpenAI-compatible
// upstreams answer a failure with a 200 and an error object, quoting the
// key; on a pass-through endpoint that body reaches the client redacted,
// as on the chat route, while a long success body is relayed byte for
// byte.
func TestPassThroughSuccessWithErrorRedacted(t *testing.T) {
	t.Parallel()
	const key = "gsk_passok0123456789abcdefXYZ"
	long := `{"object":"list","data":[{"embedding":[` + strings.Repeat("0.125,", 20000) + `0.5]}]}`
	usrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		if bytes.Contains(body, []byte("long")) {
			_, _ = io.WriteString(w, long)
			return
		}
		_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided: `+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")+`","type":"invalid_request_error","code":"invalid_api_key"}}`)
	}))
	t.Cleanup(usrv.Close)
	cfg := config(usrv)
	cfg.Providers[0].APIKey = key
	gw := newGateway(t, cfg)
	send := func(input string) []byte {
		body := `{"model":"m","input":"` + input + `"}`
		return wire(t, gw, "POST /v1/embeddings HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nContent-Type: application/json\r\n"+
			"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	}
	got := send("short")
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 200")) || !bytes.Contains(got, []byte("Incorrect API key provided: [redacted]")) {
		t.Errorf("answer %q, want a 200 with the key redacted", got)
	}
	if bytes.Contains(got, []byte("0123456789abcdef")) {
		t.Errorf("the key reached the client:\n%s", got)
	}
	// A body past the bound of what is read whole is relayed as it came.
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(send("long"))), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != long {
		t.Errorf("the long success body was not relayed byte for byte (%d bytes, %v)", len(b), err)
	}
}

// TestUpstreamInformationalNotRelayed: an upstream that answers a
// pass-through with a 1xx (103 Early Hints) before its answer gets none of
// that response's headers past the allowlist (its OpenAI-Organization is
// the operator's account, a Set-Cookie its own), and the answer keeps the
// gateway's own headers.
func TestUpstreamInformationalNotRelayed(t *testing.T) {
	t.Parallel()
	usrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Openai-Organization", "org-operator-account")
		w.Header().Set("Set-Cookie", "upstream-session=1")
		w.Header().Set("Link", "</internal>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Openai-Organization")
		w.Header().Del("Set-Cookie")
		w.Header().Del("Link")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	t.Cleanup(usrv.Close)
	gw := operatorKeyGateway(t, usrv)
	body := `{"model":"m","input":"x"}`
	got := wire(t, gw, "POST /v1/embeddings HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nX-Request-Id: client-id-7\r\nContent-Type: application/json\r\n"+
		"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	for _, leak := range []string{"org-operator-account", "upstream-session", "/internal", "HTTP/1.1 103"} {
		if bytes.Contains(got, []byte(leak)) {
			t.Errorf("the client got %q:\n%s", leak, got)
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Request-Id") != "client-id-7" || resp.Header.Get("X-Phasegate-Provider") != "openai" {
		t.Errorf("answer %d with X-Request-Id %q, X-Phasegate-Provider %q; want 200, client-id-7, openai",
			resp.StatusCode, resp.Header.Get("X-Request-Id"), resp.Header.Get("X-Phasegate-Provider"))
	}
}

// panickyTransport panics with a value that is neither an error nor a
// string, holding the headers of the request it was given (the key
// among them): the shape of a library's panic that quotes its input.
type panickyTransport struct{}

func (panickyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	panic(struct{ Header http.Header }{r.Header})
}

// TestPanicLogRedacted: a panic while serving a request is a 500 in
// OpenAI's shape, and the log line of the panic holds no key, whatever
// the type of the panic's value.
func TestPanicLogRedacted(t *testing.T) {
	t.Parallel()
	const key = "gsk_Panic5Rt8Yu1Io4Pa7Sd"
	logs := &logBuffer{wrote: make(chan struct{}, 1)}
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: "http://127.0.0.1:1/v1", APIKey: key}}}
	gw := serveGateway(t, cfg, proxy.Options{Transport: panickyTransport{}, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	body := `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}]}`
	got := wire(t, gw, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nContent-Type: application/json\r\n"+
		"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 500")) {
		t.Errorf("answer %q, want a 500", got)
	}
	logs.waitFor(t, "panic serving request")
	if s := logs.String(); strings.Contains(s, "Panic5Rt8Yu1Io4Pa7Sd") {
		t.Errorf("the key reached the log:\n%s", s)
	}
}

// TestPercentEncodedKeyRedacted: a key holding characters a URL escapes
// ('+', '/', '=', as base64 keys do), quoted back by an upstream in a URL
// as a path escapes it, or with lower-case hex digits, does not reach the
// client in the error body.
func TestPercentEncodedKeyRedacted(t *testing.T) {
	t.Parallel()
	const key = "ak+Qw7Er9Ty/Ui3Op5As=="
	usrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		q := url.QueryEscape(k)
		lower := regexp.MustCompile(`%[0-9A-F]{2}`).ReplaceAllStringFunc(q, strings.ToLower)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"message":"key rejected, see https://up.example/keys/`+url.PathEscape(k)+` or ?key=`+lower+`","type":"invalid_request_error","code":"invalid_api_key"}}`)
	}))
	t.Cleanup(usrv.Close)
	cfg := config(usrv)
	cfg.Providers[0].APIKey = key
	gw := newGateway(t, cfg)
	for _, path := range []string{"/v1/embeddings", "/v1/chat/completions"} {
		body := `{"model":"` + testModel + `","input":"x","messages":[{"role":"user","content":"hi"}]}`
		got := wire(t, gw, "POST "+path+" HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nContent-Type: application/json\r\n"+
			"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		if !bytes.HasPrefix(got, []byte("HTTP/1.1 401")) {
			t.Errorf("%s: answer %q, want the upstream's 401", path, got)
		}
		if bytes.Contains(got, []byte("Qw7Er9Ty")) || bytes.Contains(got, []byte("Ui3Op5As")) {
			t.Errorf("%s: the key reached the client:\n%s", path, got)
		}
	}
}
