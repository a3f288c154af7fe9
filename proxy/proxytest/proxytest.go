// Package proxytest provides a scriptable, recording OpenAI-compatible
// upstream for tests, after net/http/httptest. Its replies are sim.Reply
// values, built with sim.NewStream, sim.Completion and sim.Error; it is for
// tests only and never linked into the gateway.
package proxytest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/phasegate/phasegate/sim"
)

// Received is a request the upstream got.
type Received struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// Decode unmarshals the request body into v.
func (r Received) Decode(v any) error { return json.Unmarshal(r.Body, v) }

// Responder decides the reply to a request.
type Responder func(Received) sim.Reply

// Upstream is an http.Handler that answers with a Responder and records
// what it received. It is safe for concurrent use.
type Upstream struct {
	respond Responder

	mu       sync.Mutex
	received []Received
	// cancelled gets a value each time a client left before its reply was
	// fully written; up to cancelledBuffer unread values are kept.
	cancelled chan struct{}
}

// NewUpstream returns an upstream answering with respond.
func NewUpstream(respond Responder) *Upstream {
	return &Upstream{respond: respond, cancelled: make(chan struct{}, cancelledBuffer)}
}

// cancelledBuffer bounds the unread values of Cancelled: enough for a test
// that abandons hundreds of held streams at once and then counts them.
const cancelledBuffer = 4096

// NewServer starts an upstream on a loopback httptest.Server, closed when
// the test ends. Its base URL is srv.URL + "/v1".
func NewServer(tb testing.TB, respond Responder) (*Upstream, *httptest.Server) {
	tb.Helper()
	u := NewUpstream(respond)
	srv := httptest.NewServer(u)
	tb.Cleanup(srv.Close)
	return u, srv
}

// Received returns a copy of the requests so far.
func (u *Upstream) Received() []Received {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Received(nil), u.received...)
}

// Cancelled receives once for every reply a client abandoned (the first
// 4096 not yet received are kept; a handler never blocks on it).
func (u *Upstream) Cancelled() <-chan struct{} { return u.cancelled }

// ServeHTTP implements http.Handler.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
	}
	rec := Received{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	u.mu.Lock()
	u.received = append(u.received, rec)
	u.mu.Unlock()

	if !u.respond(rec).Serve(r.Context(), w) {
		select {
		case u.cancelled <- struct{}{}:
		default:
		}
	}
}

// Script answers with the replies in order; once they are used up it
// answers 500, so a test that makes one call too many fails loudly.
func Script(replies ...sim.Reply) Responder {
	var mu sync.Mutex
	next := 0
	return func(Received) sim.Reply {
		mu.Lock()
		defer mu.Unlock()
		if next >= len(replies) {
			return sim.Reply{Status: http.StatusInternalServerError, Body: []byte(`{"error":{"message":"proxytest: script exhausted","type":"server_error","param":null,"code":null}}`)}
		}
		next++
		return replies[next-1]
	}
}

// Simulated answers as the simulated models do (sim.Answer), so a
// recording upstream can play them.
func Simulated() Responder {
	return func(r Received) sim.Reply { return sim.Answer(r.Method, r.Path, r.Body) }
}
