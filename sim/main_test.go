package sim_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/phasegate/phasegate/proxy/proxytest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// wait bounds every wait of these tests.
const wait = 10 * time.Second

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func do(t *testing.T, ctx context.Context, client *http.Client, method, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func waitCancelled(t *testing.T, up *proxytest.Upstream) {
	t.Helper()
	select {
	case <-up.Cancelled():
	case <-time.After(wait):
		t.Fatal("the upstream never saw the client leave")
	}
}
