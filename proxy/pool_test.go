package proxy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// TestUpstreamConnectionReuse: 500 streams through the gateway to one TLS
// upstream, 100 at a time, open about as many upstream connections as run
// at once over HTTP/1.1, and a handful over HTTP/2 — not one TLS
// handshake per stream.
func TestUpstreamConnectionReuse(t *testing.T) {
	const streams, concurrent = 500, 100
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("http2=%v", h2), func(t *testing.T) {
			reply := sim.NewStream(testModel).Role().Content("pooled ", "answer").Finish("stop").Done().Reply()
			up := proxytest.NewUpstream(func(proxytest.Received) sim.Reply { return reply })
			usrv := httptest.NewUnstartedServer(up)
			var conns atomic.Int64
			usrv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			usrv.EnableHTTP2 = h2
			usrv.StartTLS()
			t.Cleanup(usrv.Close)

			tr := proxy.NewTransport(proxy.DefaultTimeouts())
			roots := x509.NewCertPool()
			roots.AddCert(usrv.Certificate())
			tr.TLSClientConfig = &tls.Config{RootCAs: roots}
			t.Cleanup(tr.CloseIdleConnections)
			gw := serveGateway(t, proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: usrv.URL + "/v1"}}}, proxy.Options{Transport: tr})

			client := gw.Client()
			client.Transport.(*http.Transport).MaxIdleConnsPerHost = concurrent
			ctx, cancel := context.WithTimeout(context.Background(), wait*3)
			defer cancel()
			// A first wave opens the connections that run at once; the
			// streams after it find them in the pool.
			round := func(perWorker int) {
				var wg sync.WaitGroup
				for w := range concurrent {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range perWorker {
							if err := poolStream(ctx, client, gw.URL); err != nil {
								t.Errorf("worker %d stream %d: %v", w, i, err)
								return
							}
						}
					}()
				}
				wg.Wait()
			}
			round(1)
			warm := conns.Load()
			round(streams/concurrent - 1)
			later := conns.Load() - warm
			t.Logf("%d streams, %d at a time: %d upstream connections for the first %d, %d for the next %d",
				streams, concurrent, warm, concurrent, later, streams-concurrent)
			// About as many connections as ever run at once: a pool that
			// let them go would open one per stream, 500. On a loaded
			// machine a connection still being read to its end for reuse
			// when the worker's next stream starts makes the next stream
			// open one more, so the bound is twice the concurrency, far
			// below one per stream.
			if total := warm + later; total > 2*concurrent {
				t.Errorf("upstream connections: %d (%d then %d), want at most %d of %d streams", total, warm, later, 2*concurrent, streams)
			}
		})
	}
}

func poolStream(ctx context.Context, client *http.Client, base string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/standard/v1/chat/completions",
		strings.NewReader(`{"model":"`+testModel+`","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "[DONE]") {
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
	}
	return nil
}
