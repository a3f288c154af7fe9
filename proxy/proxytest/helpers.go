package proxytest

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Wait bounds every wait of the tests that use the double: long enough for
// a loaded machine under -race, short enough that a hang fails.
const Wait = 10 * time.Second

// Context returns a context that ends after Wait or with the test.
func Context(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	tb.Cleanup(cancel)
	return ctx
}

// Do sends a request with body and returns the response, whose body is
// closed when the test ends.
func Do(tb testing.TB, ctx context.Context, client *http.Client, method, url, body string) *http.Response {
	tb.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, url, err)
	}
	tb.Cleanup(func() { resp.Body.Close() })
	return resp
}

// WaitCancelled fails the test unless a client abandons a reply within
// Wait.
func (u *Upstream) WaitCancelled(tb testing.TB) {
	tb.Helper()
	select {
	case <-u.Cancelled():
	case <-time.After(Wait):
		tb.Fatal("the upstream never saw the client leave")
	}
}
