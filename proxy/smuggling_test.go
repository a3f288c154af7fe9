package proxy_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// TestSmuggling sends hand-written requests to the real server: a body
// framed two ways, header values with CR or LF, and hop-by-hop headers
// named in Connection. Ambiguous framing is either refused or read one way
// only (Transfer-Encoding wins and Content-Length is dropped, as RFC 9112
// §6.3 asks of an intermediary), and the gateway frames the upstream
// request itself, so nothing can be smuggled past it; no header value reaching the upstream holds a
// CR or LF; hop-by-hop headers never reach it.
func TestSmuggling(t *testing.T) {
	up, usrv := proxytest.NewServer(t, func(proxytest.Received) sim.Reply {
		return sim.NewStream(testModel).Role().Content("ok").Finish("stop").Done().Reply()
	})
	gw := newGateway(t, config(usrv))
	body := `{"model":"` + testModel + `","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
	length := "Content-Length: " + strconv.Itoa(len(body)) + "\r\n"
	tests := []struct {
		name    string
		request string
		// refused: a 400 and nothing upstream; else one upstream request
		// carrying the body whole.
		refused bool
		absent  []string
	}{
		{name: "Content-Length and Transfer-Encoding together", request: head + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(body)},
		{name: "two different Content-Lengths", request: head + "Content-Length: 4\r\nContent-Length: 5\r\n\r\n" + body, refused: true},
		{name: "a CR inside a header value", request: head + "X-Project-Id: a\rX-Injected: b\r\n" + length + "\r\n" + body, refused: true},
		{name: "a bare LF ends a header line", request: head + "X-Project-Id: a\nX-Other: b\r\n" + length + "\r\n" + body},
		{name: "hop-by-hop headers named in Connection", request: head + "Connection: keep-alive, X-Secret-Hop\r\nX-Secret-Hop: do-not-forward\r\n" +
			"Keep-Alive: timeout=5\r\nProxy-Authorization: Basic c2VjcmV0\r\nTe: trailers\r\n" + length + "\r\n" + body,
			absent: []string{"X-Secret-Hop", "Keep-Alive", "Proxy-Authorization", "Te"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(up.Received())
			resp := rawRequest(t, gw.Listener.Addr().String(), tt.request)
			got := up.Received()[before:]
			if tt.refused {
				if resp.StatusCode != http.StatusBadRequest || len(got) != 0 {
					t.Errorf("status %d with %d upstream requests, want 400 and none", resp.StatusCode, len(got))
				}
				return
			}
			if resp.StatusCode != http.StatusOK || len(got) != 1 {
				t.Fatalf("status %d with %d upstream requests, want 200 and one", resp.StatusCode, len(got))
			}
			if !strings.Contains(string(got[0].Body), `"content":"hi"`) {
				t.Errorf("upstream body %s, want the client's whole request", got[0].Body)
			}
			for name, vs := range got[0].Header {
				for _, v := range vs {
					if strings.ContainsAny(v, "\r\n") {
						t.Errorf("header %s reached the upstream with a CR or LF: %q", name, v)
					}
				}
			}
			for _, h := range tt.absent {
				if v := got[0].Header.Get(h); v != "" {
					t.Errorf("hop-by-hop header %s reached the upstream: %q", h, v)
				}
			}
		})
	}
}

func chunked(s string) string {
	return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n0\r\n\r\n"
}

// rawRequest writes request on a new connection to addr and returns the
// answer, its body read.
func rawRequest(t *testing.T, addr, request string) *http.Response {
	t.Helper()
	resp, _ := exchangeWith(t, addr, request)
	return resp
}
