package proxy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/sim"
)

// rsGated is an upstream that streams a text answer in two halves: the
// first at once, the rest once release is closed (or the gateway
// leaves). Every call answers the same.
func rsGated(t *testing.T, release <-chan struct{}) (*httptest.Server, *rsBodies) {
	t.Helper()
	evs := sim.NewStream(sim.Model).Role().Content("The weather ", "in Paris ").Content("is ", "sunny.").Finish("stop").Done().Events()
	calls := &rsBodies{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		calls.add(string(b))
		w.Header().Set("Content-Type", "text/event-stream")
		for i, ev := range evs {
			if i == 3 {
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
			}
			_, _ = io.WriteString(w, "data: "+ev.Data+"\n\n")
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, calls
}

// rsBodies are the request bodies an upstream received.
type rsBodies struct {
	mu  sync.Mutex
	all []string
}

func (b *rsBodies) add(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.all = append(b.all, s)
}

func (b *rsBodies) get() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.all...)
}

func rsResumeConfig(up *httptest.Server) proxy.Config {
	return proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: up.URL + "/v1", APIKey: "sk-upstream"}},
		ClientKeys: []proxy.ClientKey{{Key: "key-a"}, {Key: "key-b"}}}
}

// rsStreamRaw posts a streamed request over a raw connection and returns
// the response, its body reader and the connection (closed when the test
// ends; a test that cuts the client closes it sooner).
func rsStreamRaw(t *testing.T, gw *httptest.Server, key, body string, header string) (*http.Response, *bufio.Reader, net.Conn) {
	t.Helper()
	ctx := testContext(t)
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	req := "POST /v1/responses HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\nAuthorization: Bearer " + key + "\r\n" + header
	req += fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp, bufio.NewReader(resp.Body), conn
}

// rsReadEvents reads n whole events (comments skipped), as written.
func rsReadEvents(t *testing.T, r *bufio.Reader, n int) []byte {
	t.Helper()
	var out, block []byte
	for got := 0; got < n; {
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("after %d events: %v (%s)", got, err, out)
		}
		block = append(block, line...)
		if len(line) == 1 {
			if block[0] != ':' {
				out = append(out, block...)
				got++
			}
			block = block[:0]
		}
	}
	return out
}

// rsNoComments is a stream's bytes without its comments (keep-alives are
// the connection's own).
func rsNoComments(b []byte) string {
	var out strings.Builder
	for block := range strings.SplitSeq(string(b), "\n\n") {
		if block != "" && !strings.HasPrefix(block, ":") {
			out.WriteString(block + "\n\n")
		}
	}
	return out.String()
}

// rsShape is what two runs of the same answer share: each event's type,
// sequence number and text.
func rsShape(evs []rsEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = fmt.Sprint(ev.Name, ev.Data["sequence_number"], ev.Data["delta"], ev.Data["text"])
	}
	return out
}

// A resumable Responses stream outlives its client: cut after a few
// events, it is resumed with GET /v1/responses/{id}?stream=true and
// starting_after, on the same gateway or (on Redis) another replica. The
// joined events are the whole stream, byte for byte as a full replay
// gives them, shaped as an uncut run's, ending with response.completed;
// while it runs the response reads in_progress and cannot be continued;
// once it ended it is stored complete and previous_response_id works;
// another client key finds nothing.
func TestResponsesStreamResume(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		release := make(chan struct{})
		up, calls := rsGated(t, release)
		gw := serveGateway(t, rsResumeConfig(up), proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage,
			TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
		rsResume(t, gw, gw, release, calls)
	})
	t.Run("replicas", func(t *testing.T) {
		release := make(chan struct{})
		up, calls := rsGated(t, release)
		a, b, _ := replicas(t, rsResumeConfig(up))
		rsResume(t, a, b, release, calls)
	})
}

func rsResume(t *testing.T, a, b *httptest.Server, release chan struct{}, calls *rsBodies) {
	body := `{"model":"` + sim.Model + `","input":"Weather in Paris?","stream":true}`
	resp, r, conn := rsStreamRaw(t, a, "key-a", body, "X-Phasegate-Resumable: true\r\n")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Phasegate-Resumable") != "true" {
		t.Fatalf("stream: %d, X-Phasegate-Resumable %q", resp.StatusCode, resp.Header.Get("X-Phasegate-Resumable"))
	}
	const cut = 4
	head := rsReadEvents(t, r, cut)
	conn.Close() // the client leaves
	created := rsEvents(t, head)[0].Data["response"].(map[string]any)
	id := created["id"].(string)

	// Still running: in_progress, and not yet a previous response.
	status, _, got := rsRaw(t, b, http.MethodGet, "/v1/responses/"+id, "key-a", "")
	var running rsResponse
	if status != http.StatusOK || json.Unmarshal(got, &running) != nil || running.Status != "in_progress" {
		t.Errorf("GET while running: %d %s", status, got)
	}
	status, _, got = rsRaw(t, b, http.MethodPost, "/v1/responses", "key-a", `{"model":"`+sim.Model+`","input":"more","previous_response_id":"`+id+`"}`)
	if status != http.StatusBadRequest || rsError(t, got).Param != "previous_response_id" {
		t.Errorf("previous_response_id while running: %d %s", status, got)
	}
	close(release)

	if status, _, got := rsRaw(t, b, http.MethodGet, "/v1/responses/"+id+"?stream=true", "key-b", ""); status != http.StatusNotFound || rsError(t, got).Code != "not_found" {
		t.Errorf("another key's resume: %d %s", status, got)
	}
	status, hdr, rest := rsRaw(t, b, http.MethodGet, fmt.Sprintf("/v1/responses/%s?stream=true&starting_after=%d", id, cut-1), "key-a", "")
	if status != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("resume: %d %s", status, rest)
	}
	joined := append(head, rest...)
	evs := rsEvents(t, []byte(rsNoComments(joined)))
	name, final := rsFinal(t, evs)
	if name != "response.completed" || final.ID != id || final.text() != "The weather in Paris is sunny." {
		t.Errorf("joined stream ends with %s %+v", name, final)
	}
	_, _, all := rsRaw(t, b, http.MethodGet, "/v1/responses/"+id+"?stream=true", "key-a", "")
	if rsNoComments(all) != rsNoComments(joined) {
		t.Errorf("a full replay differs from the joined stream:\n%s\nwant\n%s", all, joined)
	}
	_, _, whole := rsRaw(t, a, http.MethodPost, "/v1/responses", "key-a", body)
	if u := rsShape(rsEvents(t, []byte(rsNoComments(whole)))); fmt.Sprint(u) != fmt.Sprint(rsShape(evs)) {
		t.Errorf("joined stream:\n%v\nan uncut run:\n%v", rsShape(evs), u)
	}

	status, _, got = rsRaw(t, b, http.MethodGet, "/v1/responses/"+id, "key-a", "")
	var stored rsResponse
	if status != http.StatusOK || json.Unmarshal(got, &stored) != nil || stored.Status != "completed" || stored.text() != final.text() {
		t.Errorf("stored response: %d %s", status, got)
	}
	n := len(calls.get())
	status, _, got = rsRaw(t, b, http.MethodPost, "/v1/responses", "key-a", `{"model":"`+sim.Model+`","input":"And tomorrow?","stream":true,"previous_response_id":"`+id+`"}`)
	if name, next := rsFinal(t, rsEvents(t, []byte(rsNoComments(got)))); status != http.StatusOK || name != "response.completed" || len(calls.get()) != n+1 {
		t.Fatalf("previous_response_id after the client left: %d %s %+v, %d upstream calls", status, name, next, len(calls.get())-n)
	}
	// The history the upstream got holds the answer the client left.
	if sent := calls.get()[n]; !strings.Contains(sent, `"content":"The weather in Paris is sunny."`) {
		t.Errorf("continued without the answer of the stream the client left: %s", sent)
	}
}

// A log cut short (RESUME_MAX_BYTES) ends its resume with a Responses
// error event naming why, numbered as the next event, not with the chat
// route's error body; the live stream is whole.
func TestResponsesStreamResumeTooLarge(t *testing.T) {
	release := make(chan struct{})
	close(release)
	up, _ := rsGated(t, release)
	cfg := rsResumeConfig(up)
	cfg.Resume.MaxBytes = 2000
	gw := serveGateway(t, cfg, proxy.Options{})
	resp, r, _ := rsStreamRaw(t, gw, "key-a", `{"model":"`+sim.Model+`","input":"Weather in Paris?","stream":true}`, "X-Phasegate-Resumable: true\r\n")
	live := rsEvents(t, []byte(rsNoComments(readAll(t, r))))
	if name, _ := rsFinal(t, live); resp.Header.Get("X-Phasegate-Resumable") != "true" || name != "response.completed" {
		t.Fatalf("live stream: X-Phasegate-Resumable %q, ends with %s", resp.Header.Get("X-Phasegate-Resumable"), name)
	}
	id := live[0].Data["response"].(map[string]any)["id"].(string)
	status, _, b := rsRaw(t, gw, http.MethodGet, "/v1/responses/"+id+"?stream=true", "key-a", "")
	replay := rsEvents(t, []byte(rsNoComments(b)))
	last := replay[len(replay)-1]
	if status != http.StatusOK || len(replay) < 2 || len(replay) >= len(live) || last.Name != "error" || last.Data["code"] != "resume_too_large" {
		t.Fatalf("replay: %d, %d events of %d, ending %v", status, len(replay), len(live), last)
	}
	if fmt.Sprint(rsShape(replay[:len(replay)-1])) != fmt.Sprint(rsShape(live[:len(replay)-1])) {
		t.Errorf("replayed events differ from the live ones:\n%v\n%v", rsShape(replay), rsShape(live))
	}
}
