package proxy_test

// The gateway's own cost of a small non-streaming request on /standard:
// the handler served in process, its upstream an in-memory transport, so
// that what is measured is the gateway's work alone (no client, no
// double, no sockets), its request line logged at the default level as
// the gateway's binary logs it (to nowhere):
//
//	go test ./proxy -run '^$' -bench '^BenchmarkStandardSmall$' -benchmem -count 6

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/proxy"
)

// smallUpstream answers every call with one small chat.completion, from
// memory.
type smallUpstream struct{ body []byte }

func (u smallUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close()
	h := http.Header{"Content-Type": {"application/json"}}
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: io.NopCloser(bytes.NewReader(u.body)),
		ContentLength: int64(len(u.body)), Request: r, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

func BenchmarkStandardSmall(b *testing.B) {
	completion := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1767225600,"model":"` + testModel + `","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21}}`)
	h, err := proxy.New(proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: "http://127.0.0.1:1/v1", APIKey: "sk-bench-key-0123456789"}}},
		proxy.Options{Transport: smallUpstream{completion}, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	body := `{"model":"` + testModel + `","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Hello!"}]}`
	serve := func() {
		r := httptest.NewRequest(http.MethodPost, "/standard/v1/chat/completions", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.RemoteAddr = "127.0.0.1:40000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	serve()
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	for b.Loop() {
		serve()
	}
	b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/req")
}
