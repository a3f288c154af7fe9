package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
)

// pacedUpstream streams an opening chunk, then five text chunks 5 ms
// apart, as a model's tokens come.
func pacedUpstream(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	sendEvents(w, pacedChunk("p1", `{"role":"assistant","content":""}`, "null"))
	for i := range 5 {
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
		sendEvents(w, pacedChunk("p1", fmt.Sprintf(`{"content":"word%d "}`, i), "null"))
	}
	sendEvents(w, pacedChunk("p1", `{}`, `"stop"`), "[DONE]")
}

// BenchmarkFirstEvent times the first event of a paced stream (its
// opening chunk, then a chunk every 5 ms) direct to the upstream and
// through /standard/v1 and the guard (a tool declared), the three
// interleaved request by request, and reports the p50 of each and what
// each route adds to direct's.
//
//	go test ./proxy -run '^$' -bench '^BenchmarkFirstEvent$' -benchtime 200x -count 3
func BenchmarkFirstEvent(b *testing.B) {
	usrv := httptest.NewServer(http.HandlerFunc(pacedUpstream))
	b.Cleanup(usrv.Close)
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}}
	gw := serveGateway(b, cfg, proxy.Options{TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
	targets := []struct{ name, url string }{
		{"direct", usrv.URL + "/v1/chat/completions"},
		{"standard", gw.URL + "/standard/v1/chat/completions"},
		{"guard", gw.URL + "/two-stage/v1/chat/completions"},
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	b.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	body := tsBody(true, "")
	first := make([][]time.Duration, len(targets))
	b.ResetTimer()
	for range b.N {
		for i, t := range targets {
			first[i] = append(first[i], firstEvent(b, client, t.url, body))
		}
	}
	b.StopTimer()
	direct := p50(first[0])
	for i, t := range targets {
		b.ReportMetric(float64(p50(first[i]))/1e6, t.name+"-ms")
		if i > 0 {
			b.ReportMetric(float64(p50(first[i])-direct)/1e6, t.name+"-added-ms")
		}
	}
}

// firstEvent posts body to url and returns the time to the answer's
// first event; it reads the answer to its end.
func firstEvent(b *testing.B, client *http.Client, url, body string) time.Duration {
	start := time.Now()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var d time.Duration
	for {
		line, err := br.ReadString('\n')
		if d == 0 && strings.HasPrefix(line, "data: ") {
			d = time.Since(start)
		}
		if err != nil {
			break
		}
	}
	if resp.StatusCode != http.StatusOK || d == 0 {
		b.Fatalf("status %d, no event", resp.StatusCode)
	}
	return d
}
