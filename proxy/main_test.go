package proxy_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/goleak"

	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

func TestMain(m *testing.M) {
	proxy.ReleaseMode()
	goleak.VerifyTestMain(m)
}

// wait bounds every wait of these tests: long enough for a loaded CI
// machine under -race (a 16 MiB body through the gateway took over 10 s
// on two cores busy with other builds), short enough that a hang fails
// instead of blocking.
const wait = 30 * time.Second

// heavyWait bounds a request of megabytes (see heavyContext).
const heavyWait = 3 * time.Minute

// testModel is routed to the "openai" provider by the default rules.
const testModel = "gpt-test"

// config returns a gateway config with one provider, "openai", at up.
func config(up *httptest.Server) proxy.Config {
	return proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: up.URL + "/v1"}}}
}

// newGateway serves a gateway with cfg through its real router on a
// loopback httptest server, closed when the test ends.
func newGateway(tb testing.TB, cfg proxy.Config) *httptest.Server {
	tb.Helper()
	return serveGateway(tb, cfg, proxy.Options{})
}

// serveGateway serves a gateway built from cfg and opts, as newGateway.
func serveGateway(tb testing.TB, cfg proxy.Config, opts proxy.Options) *httptest.Server {
	tb.Helper()
	h, err := proxy.New(cfg, opts)
	if err != nil {
		tb.Fatalf("proxy.New: %v", err)
	}
	return newTestServer(tb, h)
}

// startUpstream starts a scripted upstream and a gateway in front of it.
func startUpstream(tb testing.TB, respond proxytest.Responder) (*proxytest.Upstream, *httptest.Server) {
	tb.Helper()
	up, usrv := proxytest.NewServer(tb, respond)
	return up, newGateway(tb, config(usrv))
}

// newClient returns a go-openai client of the gateway. Its empty-message
// limit is raised: the gateway forwards keep-alive comments, and the
// client counts each comment and blank line against that limit.
func newClient(gw *httptest.Server) *openai.Client {
	c := openai.DefaultConfig("sk-client")
	c.BaseURL = gw.URL + "/v1"
	c.HTTPClient = gw.Client()
	c.EmptyMessagesLimit = 1 << 20
	return openai.NewClientWithConfig(c)
}

// testContext is a context that ends with the test or after wait.
func testContext(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	tb.Cleanup(cancel)
	return ctx
}

// heavyContext is a context that ends with the test or after heavyWait: for
// a request whose body or history is megabytes, which the race detector on
// a loaded machine makes many times slower.
func heavyContext(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), heavyWait)
	tb.Cleanup(cancel)
	return ctx
}

// waitCancelled waits, bounded, until up saw a client abandon a reply.
func waitCancelled(tb testing.TB, up *proxytest.Upstream) {
	tb.Helper()
	select {
	case <-up.Cancelled():
	case <-time.After(wait):
		tb.Fatalf("the upstream never saw the request cancelled")
	}
}

// chatBody is a minimal chat completion request body.
func chatBody(stream bool) string {
	if stream {
		return `{"model":"` + testModel + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	}
	return `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}]}`
}

// post sends body to path on the gateway with the given extra headers.
func post(tb testing.TB, ctx context.Context, gw *httptest.Server, path, body string, header http.Header) *http.Response {
	tb.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := gw.Client().Do(req)
	if err != nil {
		tb.Fatalf("POST %s: %v", path, err)
	}
	tb.Cleanup(func() { resp.Body.Close() })
	return resp
}

// readAll reads a body; the request's context bounds it.
func readAll(tb testing.TB, r io.Reader) []byte {
	tb.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		tb.Fatalf("read body: %v", err)
	}
	return b
}

// sseItem is one thing read off a text/event-stream: the data of an
// event, or a comment line.
type sseItem struct {
	Data    string
	Comment string
}

// sseReader reads an event stream one item at a time.
type sseReader struct {
	sc *bufio.Scanner
}

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 32<<20)
	return &sseReader{sc: sc}
}

// next returns the next event or comment; ok is false at the end.
func (s *sseReader) next() (item sseItem, ok bool, err error) {
	var data []string
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if data != nil {
				return sseItem{Data: strings.Join(data, "\n")}, true, nil
			}
		case strings.HasPrefix(line, ":"):
			if data == nil {
				return sseItem{Comment: line}, true, nil
			}
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(line, "data:"))
		}
	}
	if data != nil {
		return sseItem{Data: strings.Join(data, "\n")}, true, nil
	}
	return sseItem{}, false, s.sc.Err()
}

// readSSE reads a whole event stream.
func readSSE(tb testing.TB, r io.Reader) []sseItem {
	tb.Helper()
	var items []sseItem
	sr := newSSEReader(r)
	for {
		it, ok, err := sr.next()
		if err != nil {
			tb.Fatalf("read event stream: %v (after %d items)", err, len(items))
		}
		if !ok {
			return items
		}
		items = append(items, it)
	}
}

// dataOf returns the data of the events, comments left out.
func dataOf(items []sseItem) []string {
	var out []string
	for _, it := range items {
		if it.Comment == "" {
			out = append(out, it.Data)
		}
	}
	return out
}

// dataEvents returns the data of the events a scripted stream sends.
func dataEvents(evs []sim.Event) []string {
	var out []string
	for _, ev := range evs {
		if ev.Data != "" {
			out = append(out, ev.Data)
		}
	}
	return out
}

// closedURL returns a loopback base URL nothing listens on.
func closedURL(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/v1"
}

// closedServer returns a started-and-closed server: its URL refuses
// connections, for gateways whose upstream must never be reached.
func closedServer(tb testing.TB) *httptest.Server {
	tb.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	return srv
}

// newTestServer serves h on a loopback httptest server closed at the end.
func newTestServer(tb testing.TB, h http.Handler) *httptest.Server {
	tb.Helper()
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return srv
}
