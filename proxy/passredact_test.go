package proxy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// passKey is the gateway's key in the pass-through redaction tests; its
// tail is what must never reach a client.
const (
	passKey     = "sk-gateway-passKEY0123456789abcdef"
	passKeyTail = "0123456789abcdef"
)

// leakyUpstream serves write as the answer to every request, flushing
// after each part it writes, and a gateway holding passKey in front of it.
func leakyUpstream(t *testing.T, write func(w http.ResponseWriter, r *http.Request, flush func())) *httptest.Server {
	t.Helper()
	usrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		write(w, r, func() { _ = http.NewResponseController(w).Flush() })
	}))
	t.Cleanup(usrv.Close)
	cfg := config(usrv)
	cfg.Providers[0].APIKey = passKey
	return newGateway(t, cfg)
}

// embeddingsOnWire posts an embeddings request to gw on a connection of
// its own and returns the answer as it came over the wire.
func embeddingsOnWire(t *testing.T, gw *httptest.Server) (*http.Response, []byte) {
	t.Helper()
	body := `{"model":"m","input":"x"}`
	raw := wire(t, gw, "POST /v1/embeddings HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nContent-Type: application/json\r\n"+
		"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	if bytes.Contains(raw, []byte(passKeyTail)) {
		t.Errorf("the key reached the client")
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, got
}

// TestPassThroughRedactsLongBody: a 1 MiB JSON success that quotes the
// key raw near its end, JSON-escaped, and cut by the upstream's 32 KiB
// writes reaches the client with every spelling redacted, still JSON, and
// chunked since its length changed.
func TestPassThroughRedactsLongBody(t *testing.T) {
	t.Parallel()
	escaped := strings.ReplaceAll(passKey, "-", `\u002d`)
	head := `{"object":"list","data":[{"embedding":[` + strings.Repeat("0.0123456,", 3000) + `0.5],"note":"`
	// The first quote of the key starts 10 bytes before the 32 KiB mark.
	head += strings.Repeat(" ", 32<<10-10-len(head))
	body := head + passKey + `","pad":"` + strings.Repeat("x", 1<<20) + `","raw":"` + passKey + `","esc":"` + escaped + `"}]}`
	gw := leakyUpstream(t, func(w http.ResponseWriter, _ *http.Request, flush func()) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		for rest := body; len(rest) > 0; {
			n := min(len(rest), 32<<10)
			_, _ = io.WriteString(w, rest[:n])
			flush()
			rest = rest[n:]
		}
	})
	resp, got := embeddingsOnWire(t, gw)
	if resp.StatusCode != http.StatusOK || resp.ContentLength != -1 || len(resp.TransferEncoding) == 0 {
		t.Errorf("status %d, length %d, coding %v; want a 200, chunked", resp.StatusCode, resp.ContentLength, resp.TransferEncoding)
	}
	var v struct {
		Data []struct{ Note, Raw, Esc string }
	}
	if err := json.Unmarshal(got, &v); err != nil || len(v.Data) != 1 {
		t.Fatalf("answer of %d bytes is not the JSON sent: %v", len(got), err)
	}
	if d := v.Data[0]; strings.TrimSpace(d.Note) != "[redacted]" || d.Raw != "[redacted]" || d.Esc != "[redacted]" {
		t.Errorf("note %q raw %q esc %q, want each [redacted]", d.Note, d.Raw, d.Esc)
	}
}

// TestPassThroughRedactsPlainText: a text/plain success that quotes the
// key is redacted too.
func TestPassThroughRedactsPlainText(t *testing.T) {
	t.Parallel()
	gw := leakyUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ func()) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "your key is "+passKey+"\n")
	})
	resp, got := embeddingsOnWire(t, gw)
	if resp.StatusCode != http.StatusOK || string(got) != "your key is [redacted]\n" {
		t.Errorf("answer %d %q, want a 200 with the key redacted", resp.StatusCode, got)
	}
}

// TestPassThroughRedactsStreamCutByFlush: an SSE stream on a pass-through
// route that sends the key in two flushes, the second once the client has
// read what came before the key, gets it to the client redacted.
func TestPassThroughRedactsStreamCutByFlush(t *testing.T) {
	t.Parallel()
	read := make(chan struct{})
	gw := leakyUpstream(t, func(w http.ResponseWriter, r *http.Request, flush func()) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"key\":\""+passKey[:14])
		flush()
		select {
		case <-read:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, passKey[14:]+"\"}\n\ndata: [DONE]\n\n")
		flush()
	})
	resp := post(t, testContext(t), gw, "/v1/embeddings", `{"model":"m","input":"x"}`, nil)
	var got bytes.Buffer
	b := make([]byte, 1024)
	for !bytes.Contains(got.Bytes(), []byte(`{"key":"`)) {
		n, err := resp.Body.Read(b)
		got.Write(b[:n])
		if err != nil {
			t.Fatalf("read %q, then %v", got.Bytes(), err)
		}
	}
	close(read)
	rest, err := io.ReadAll(resp.Body)
	got.Write(rest)
	if want := "data: {\"key\":\"[redacted]\"}\n\ndata: [DONE]\n\n"; err != nil || resp.StatusCode != http.StatusOK || got.String() != want {
		t.Errorf("answer %d %q (%v), want a 200 %q", resp.StatusCode, got.Bytes(), err, want)
	}
}

// TestPassThroughStreamPaced: a redacted pass-through stream still gives
// each event to the client when the upstream flushes it: the upstream
// sends the next event only once the client has read the one before.
func TestPassThroughStreamPaced(t *testing.T) {
	t.Parallel()
	read := make(chan struct{})
	const events = 5
	event := func(i int) string { return "data: {\"n\":" + strconv.Itoa(i) + ",\"text\":\"sk-g\"}\n\n" }
	gw := leakyUpstream(t, func(w http.ResponseWriter, r *http.Request, flush func()) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range events {
			_, _ = io.WriteString(w, event(i))
			flush()
			select {
			case <-read:
			case <-r.Context().Done():
				return
			}
		}
	})
	resp := post(t, testContext(t), gw, "/v1/embeddings", `{"model":"m","input":"x"}`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	for i := range events {
		var got strings.Builder
		for !strings.HasSuffix(got.String(), "\n\n") {
			line, err := br.ReadString('\n')
			got.WriteString(line)
			if err != nil {
				t.Fatalf("event %d: read %q, then %v", i, got.String(), err)
			}
		}
		if got.String() != event(i) {
			t.Fatalf("event %d = %q, want %q", i, got.String(), event(i))
		}
		read <- struct{}{}
	}
}
