package proxy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// patternTool is a tool whose parameters schema has n string properties
// of the given pattern.
func patternTool(n int, pattern string) string {
	props := make([]string, n)
	for i := range props {
		props[i] = fmt.Sprintf(`"p%d":{"type":"string","pattern":%q}`, i, pattern)
	}
	return `{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{` + strings.Join(props, ",") + `}}}}`
}

// openAIError is the error body of a refused request.
type openAIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func decodeError(tb testing.TB, body []byte) openAIError {
	tb.Helper()
	var e openAIError
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
		tb.Fatalf("not an OpenAI-style error: %s", body)
	}
	return e
}

// TestCostlySchemaRefused: a tool schema whose patterns would compile to
// more than the budget (bounded repetitions are expanded, nested ones
// multiply) is refused with a 400 that names the schema and says why,
// before any upstream call; several at once are refused alike. The guard
// compiles schemas only to judge a call, so the upstream here answers
// with text: without the bound these requests are served.
func TestCostlySchemaRefused(t *testing.T) {
	ordinary := patternTool(100, `^[a-z0-9_-]{1,64}$`)
	tests := []struct {
		name    string
		tool    string
		status  int
		message string
	}{
		{"ordinary patterns", ordinary, http.StatusOK, ""},
		{"thirty x{0,1000}", patternTool(30, `x{0,1000}`), http.StatusBadRequest, "compile to about"},
		{"one long literal repeated", patternTool(1, `(abcdefghijklmnop){1,1000}`), http.StatusBadRequest, "/properties/p0/pattern"},
		{"200 KiB of x{0,1000}", patternTool(4000, `x{0,1000}`), http.StatusBadRequest, "compile to about"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, gw := tsGateway(t, proxytest.Simulated(),
				protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), false)
			body := `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"tools":[` + tt.tool + `]}`
			const clients = 4
			var wg sync.WaitGroup
			got := make([][]byte, clients)
			status := make([]int, clients)
			ctx := testContext(t)
			for i := range clients {
				wg.Go(func() {
					resp := post(t, ctx, gw, "/v1/chat/completions", body, nil)
					status[i], got[i] = resp.StatusCode, readAll(t, resp.Body)
				})
			}
			wg.Wait()
			for i := range clients {
				if status[i] != tt.status {
					t.Fatalf("client %d: status %d, want %d: %.300s", i, status[i], tt.status, got[i])
				}
				if tt.status == http.StatusOK {
					continue
				}
				e := decodeError(t, got[i])
				if e.Error.Param == nil || *e.Error.Param != "tools[0].function.parameters" || !strings.Contains(e.Error.Message, tt.message) ||
					!strings.Contains(e.Error.Message, "regular-expression instructions") {
					t.Errorf("client %d: got %s, want param tools[0].function.parameters and a message saying why (%q)", i, got[i], tt.message)
				}
			}
			if n := len(up.Received()); tt.status != http.StatusOK && n != 0 {
				t.Errorf("%d requests reached the upstream", n)
			}
		})
	}
}

// tinyMessages is a body of n tiny messages, then tail (a message, or "").
func tinyMessages(key string, n int, tail string) string {
	var b strings.Builder
	b.WriteString(`{"model":"` + testModel + `","` + key + `":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"role":"user","content":"x"}`)
	}
	if tail != "" {
		b.WriteString("," + tail)
	}
	b.WriteString(`]}`)
	return b.String()
}

// TestMessageCountBeforeDecoding: 500,000 tiny messages (about 16 times
// their bytes once decoded) are refused by their count before any is
// decoded: a broken last message, which decoding would have reported
// first, is never looked at. An escaped spelling of the key counts the
// same.
func TestMessageCountBeforeDecoding(t *testing.T) {
	const broken = `{"role":7,"content":"x"}`
	tools := `{"model":"` + testModel + `","messages":[{"role":"user","content":"hi"}],"tools":[` +
		strings.Repeat(`{"type":"function","function":{"name":"t"}},`, 600) + `{"type":"function","function":{"name":7}}]}`
	tests := []struct {
		name, body, param, message string
	}{
		{"500,000 messages", tinyMessages("messages", 500_000, broken), "messages", "the request has 500001 messages; this gateway accepts at most 10000"},
		{"an escaped key", tinyMessages(`messag\u0065s`, 20_000, broken), "messages", "the request has 20001 messages"},
		{"601 tools", tools, "tools", "the request has 601 tools; this gateway accepts at most 512"},
	}
	up, gw := startUpstream(t, proxytest.Simulated())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, testContext(t), gw, "/v1/chat/completions", tt.body, nil)
			got := readAll(t, resp.Body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %.300s", resp.StatusCode, got)
			}
			e := decodeError(t, got)
			if e.Error.Param == nil || *e.Error.Param != tt.param || !strings.Contains(e.Error.Message, tt.message) {
				t.Errorf("got %s, want param %s and a message with %q", got, tt.param, tt.message)
			}
		})
	}
	if n := len(up.Received()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
}

// rawPost writes the head of a POST to path on the gateway over a
// connection of its own, closed when the test ends, and returns it.
func rawPost(t *testing.T, gw *httptest.Server, path string, header string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", gw.Listener.Addr().String(), wait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "POST "+path+" HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"+header+"\r\n"); err != nil {
		t.Fatal(err)
	}
	return conn
}

// readResponse reads the response the gateway wrote on conn.
func readResponse(t *testing.T, conn net.Conn) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read the response: %v", err)
	}
	defer resp.Body.Close()
	return resp, readAll(t, resp.Body)
}

// TestTricklingBody: a body that trickles in a byte at a time is answered
// 408 in OpenAI's shape once BODY_READ_TIMEOUT (or REQUEST_TIMEOUT, when
// that is shorter) has passed since its first byte, and counted; without
// the bound its handler waits as long as the client trickles.
func TestTricklingBody(t *testing.T) {
	tests := []struct {
		name     string
		timeouts proxy.Timeouts
		within   string
	}{
		{"body read timeout", proxy.Timeouts{Body: 300 * time.Millisecond}, "300ms"},
		{"request timeout shorter", proxy.Timeouts{Body: time.Hour, Request: 300 * time.Millisecond}, "300ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, usrv := proxytest.NewServer(t, proxytest.Simulated())
			cfg := config(usrv)
			cfg.Timeouts = tt.timeouts
			gw := newGateway(t, cfg)
			body := chatBody(false)
			conn := rawPost(t, gw, "/v1/chat/completions", fmt.Sprintf("Content-Length: %d\r\n", len(body)))
			trickled := make(chan struct{})
			go func() { // a byte every 50 ms, until the gateway answers or the body is sent
				defer close(trickled)
				for i := range len(body) {
					if _, err := conn.Write([]byte{body[i]}); err != nil {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}()
			t0 := time.Now()
			resp, got := readResponse(t, conn)
			t.Logf("answered after %v", time.Since(t0))
			conn.Close()
			<-trickled
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("status %d, want 408: %s", resp.StatusCode, got)
			}
			e := decodeError(t, got)
			if e.Error.Code == nil || *e.Error.Code != "request_body_timeout" || !strings.Contains(e.Error.Message, "within "+tt.within) {
				t.Errorf("got %s, want code request_body_timeout and a message naming %s", got, tt.within)
			}
			if n := len(up.Received()); n != 0 {
				t.Errorf("%d requests reached the upstream", n)
			}
			metricsHave(t, gw, `phasegate_requests_bounded_total{bound="body_read_timeout"} 1`)
		})
	}
}

// TestBodyDeadlineSparesStreams: the deadline bounds the body only; a
// response stream that lasts many times longer is written to its end.
// (net/http reads the connection in the background once the body is
// read; a deadline left on it would cancel the request mid-stream.)
func TestBodyDeadlineSparesStreams(t *testing.T) {
	slow := sim.NewStream(testModel).Role()
	for range 8 {
		slow = slow.Delay(50 * time.Millisecond).Content("tick ")
	}
	_, usrv := proxytest.NewServer(t, proxytest.Script(slow.Finish("stop").Done().Reply()))
	cfg := config(usrv)
	cfg.Timeouts = proxy.Timeouts{Body: 100 * time.Millisecond}
	gw := newGateway(t, cfg)
	resp := post(t, testContext(t), gw, "/v1/chat/completions", chatBody(true), nil)
	items := readSSE(t, resp.Body)
	data := dataOf(items)
	if resp.StatusCode != http.StatusOK || len(data) == 0 || data[len(data)-1] != "[DONE]" || strings.Count(strings.Join(data, ""), "tick") != 8 {
		t.Errorf("status %d, events %q; want the 8 ticks and [DONE]", resp.StatusCode, data)
	}
}

// metricsHave fails unless the gateway's /metrics has line.
func metricsHave(t *testing.T, gw *httptest.Server, line string) {
	t.Helper()
	if !metricsHas(t, gw, line) {
		t.Errorf("/metrics lacks %s", line)
	}
}

// metricsHas reports whether the gateway's /metrics has line.
func metricsHas(t *testing.T, gw *httptest.Server, line string) bool {
	t.Helper()
	resp := proxytest.Do(t, testContext(t), gw.Client(), http.MethodGet, gw.URL+"/metrics", "")
	defer resp.Body.Close()
	return strings.Contains(string(readAll(t, resp.Body)), line+"\n")
}

// TestInflightBytes: the bodies of requests in flight are bounded in
// memory together, charged as they arrive. While one request holds most
// of the bound with what it sent, another is answered 503 with
// Retry-After in OpenAI's shape, whether it sends its Content-Length or
// is chunked, and counted; once the first ends, requests are served
// again.
func TestInflightBytes(t *testing.T) {
	up, usrv := proxytest.NewServer(t, proxytest.Simulated())
	cfg := config(usrv)
	cfg.MaxBodyBytes = 64 << 10
	cfg.MaxInflightBytes = proxy.InflightFactor * cfg.MaxBodyBytes
	gw := newGateway(t, cfg)

	// The holder sends all of its 60 KiB body but the last 100 bytes.
	held := `{"model":"` + testModel + `","messages":[{"role":"user","content":"` + strings.Repeat("x", 60<<10) + `"}]}`
	holder := rawPost(t, gw, "/v1/chat/completions", fmt.Sprintf("Content-Length: %d\r\n", len(held)))
	sent := len(held) - 100
	if _, err := io.WriteString(holder, held[:sent]); err != nil {
		t.Fatal(err)
	}
	// Its charge shows once its handler has read it: a bounded number of
	// looks.
	charged := fmt.Sprintf("phasegate_inflight_body_bytes %d", proxy.InflightFactor*sent)
	for try := 0; !metricsHas(t, gw, charged); try++ {
		if try == 1000 {
			t.Fatalf("/metrics never showed %s", charged)
		}
		runtime.Gosched()
	}

	small := chatBody(false) + strings.Repeat(" ", 10<<10) // 80 KiB charged: over what is left
	chunked := func(conn net.Conn) {
		if _, err := fmt.Fprintf(conn, "%x\r\n%s\r\n0\r\n\r\n", len(small), small); err != nil {
			t.Fatal(err)
		}
	}
	sized := rawPost(t, gw, "/v1/chat/completions", fmt.Sprintf("Content-Length: %d\r\n", len(small)))
	if _, err := io.WriteString(sized, small); err != nil {
		t.Fatal(err)
	}
	unsized := rawPost(t, gw, "/v1/chat/completions", "Transfer-Encoding: chunked\r\n")
	chunked(unsized)
	for name, conn := range map[string]net.Conn{"with Content-Length": sized, "chunked": unsized} {
		resp, got := readResponse(t, conn)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s: status %d, Retry-After %q, want 503 and a Retry-After: %s", name, resp.StatusCode, resp.Header.Get("Retry-After"), got)
		}
		if e := decodeError(t, got); e.Error.Code == nil || *e.Error.Code != "server_busy" || !strings.Contains(e.Error.Message, "MAX_INFLIGHT_BYTES") {
			t.Errorf("%s: got %s, want code server_busy naming MAX_INFLIGHT_BYTES", name, got)
		}
	}
	metricsHave(t, gw, `phasegate_requests_bounded_total{bound="inflight_bytes"} 2`)
	if n := len(up.Received()); n != 0 {
		t.Fatalf("%d requests reached the upstream while the holder held the bound", n)
	}

	if _, err := io.WriteString(holder, held[sent:]); err != nil {
		t.Fatal(err)
	}
	if resp, got := readResponse(t, holder); resp.StatusCode != http.StatusOK {
		t.Fatalf("the holder: status %d: %s", resp.StatusCode, got)
	}
	// The holder's handler returns its bytes just after its answer: a
	// bounded number of tries.
	ctx := testContext(t)
	for try := 0; ; try++ {
		resp := post(t, ctx, gw, "/v1/chat/completions", small, nil)
		got := readAll(t, resp.Body)
		if resp.StatusCode == http.StatusOK {
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || try == 100 {
			t.Fatalf("after the holder ended: status %d: %s", resp.StatusCode, got)
		}
		runtime.Gosched()
	}
}

// tinyItems is a Responses API body of n tiny input items under key, then
// tail (an item, or "").
func tinyItems(key string, n int, tail string) string {
	var b strings.Builder
	b.WriteString(`{"model":"` + testModel + `","` + key + `":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"role":"user","content":"x"}`)
	}
	if tail != "" {
		b.WriteString("," + tail)
	}
	b.WriteString(`]}`)
	return b.String()
}

// TestResponsesCountBeforeDecoding: the Responses API counts its input
// items and tools, and bounds the depth, while it scans the body, before
// any of it is decoded, with the chat route's limits and errors: 500,000
// tiny items (14 MiB, which took 6.2 s and 612 MiB to decode before the
// count applied) are refused without decoding the broken last one, and
// so are 200,000 tools; a key in another case or escaped counts the
// same, as encoding/json would decode it.
func TestResponsesCountBeforeDecoding(t *testing.T) {
	const broken = `{"role":7,"content":"x"}`
	tools := `{"model":"` + testModel + `","input":"hi","tools":[` + strings.Repeat(`{"type":"function","name":"t"},`, 200_000) + `{"type":"function","name":7}]}`
	deep := `{"model":"` + testModel + `","input":[{"role":"user","content":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}]}`
	tests := []struct {
		name, body, param, message string
	}{
		{"500,000 items", tinyItems("input", 500_000, broken), "input", "the request has 500001 input items; this gateway accepts at most 10000"},
		{"a key in another case", tinyItems("INPUT", 20_000, broken), "input", "the request has 20001 input items"},
		{"an escaped key", tinyItems(`inp\u0075t`, 20_000, broken), "input", "the request has 20001 input items"},
		{"200,001 tools", tools, "tools", "the request has 200001 tools; this gateway accepts at most 512"},
		{"nested 100 deep", deep, "", "more than 64 deep"},
	}
	cfg := config(closedServer(t))
	cfg.MaxBodyBytes = 32 << 20
	cfg.MaxInflightBytes = proxy.InflightFactor * cfg.MaxBodyBytes
	gw := newGateway(t, cfg)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			t0 := time.Now()
			resp := post(t, testContext(t), gw, "/v1/responses", tt.body, nil)
			got := readAll(t, resp.Body)
			took := time.Since(t0)
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d bytes refused in %v, %d MiB allocated", len(tt.body), took, alloc>>20)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %.300s", resp.StatusCode, got)
			}
			e := decodeError(t, got)
			if p := e.Error.Param; (p == nil) != (tt.param == "") || p != nil && *p != tt.param || !strings.Contains(e.Error.Message, tt.message) {
				t.Errorf("got %s, want param %q and a message with %q", got, tt.param, tt.message)
			}
			// Reading the body costs about twice its bytes; decoding the
			// items cost 40 times them.
			if limit := uint64(max(8*len(tt.body), 1<<20)); alloc > limit {
				t.Errorf("%d MiB allocated to refuse %d bytes, want less than %d MiB", alloc>>20, len(tt.body), limit>>20)
			}
		})
	}
}
