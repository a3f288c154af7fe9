package proxy_test

// The pass-through of a 1 MiB answer, which the gateway redacts as it
// relays it:
//
//	go test ./proxy -run '^$' -bench '^BenchmarkPassThroughLargeBody$' -benchtime 300x -count 3

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func BenchmarkPassThroughLargeBody(b *testing.B) {
	body := `{"object":"list","data":[{"embedding":[` + strings.Repeat("0.0123456,", 1<<20/10) + `0.5]}]}`
	usrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	b.Cleanup(usrv.Close)
	cfg := config(usrv)
	cfg.Providers[0].APIKey = "sk-gateway-0123456789abcdef"
	gw := newGateway(b, cfg)
	for _, target := range []struct{ name, url string }{{"direct", usrv.URL}, {"gateway", gw.URL}} {
		b.Run(target.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			cpu0 := cpuTime(b)
			for b.Loop() {
				resp, err := gw.Client().Post(target.url+"/v1/embeddings", "application/json", strings.NewReader(`{"model":"m","input":"x"}`))
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != int64(len(body)) || resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d, %d bytes, %v", resp.StatusCode, n, err)
				}
			}
			// The whole process: the double, the gateway and the client.
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
