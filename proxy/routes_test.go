package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// TestTrailingSlash checks a path with a trailing slash is served, or
// answered 404 in OpenAI's shape, and never redirected: many clients do not
// follow a redirect of a POST.
func TestTrailingSlash(t *testing.T) {
	t.Parallel()
	_, usrv := proxytest.NewServer(t, proxytest.Simulated())
	gw := serveGateway(t, config(usrv), proxy.Options{TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct {
		method, path string
		status       int
	}{
		{http.MethodPost, "/v1/chat/completions/", http.StatusOK},
		{http.MethodPost, "/standard/v1/chat/completions/", http.StatusOK},
		{http.MethodPost, "/two-stage/v1/chat/completions/", http.StatusOK},
		{http.MethodGet, "/v1/models/", http.StatusOK},
		{http.MethodGet, "/metrics/", http.StatusNotFound},
		{http.MethodGet, "/healthz/", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			var body *strings.Reader
			if tt.method == http.MethodPost {
				body = strings.NewReader(chatBody(false))
			} else {
				body = strings.NewReader("")
			}
			req, err := http.NewRequestWithContext(testContext(t), tt.method, gw.URL+tt.path, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tt.method, tt.path, err)
			}
			defer resp.Body.Close()
			b := readAll(t, resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("%s %s = %d (Location %q), want %d:\n%s", tt.method, tt.path, resp.StatusCode, resp.Header.Get("Location"), tt.status, b)
			}
			if tt.status == http.StatusNotFound {
				var e struct {
					Error struct {
						Type, Code string
					}
				}
				if err := json.Unmarshal(b, &e); err != nil || e.Error.Code != "unknown_url" {
					t.Errorf("404 body = %s, want an OpenAI-style unknown_url error", b)
				}
			}
		})
	}
}

// logBuffer is a bytes.Buffer safe for the gateway's concurrent writes,
// which tells of each write on wrote.
type logBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{}
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case l.wrote <- struct{}{}:
	default:
	}
	return l.b.Write(p)
}

// waitFor waits, bounded, until the log holds every phrase.
func (l *logBuffer) waitFor(tb testing.TB, phrases ...string) {
	tb.Helper()
	timeout := time.After(wait)
	for {
		s, all := l.String(), true
		for _, p := range phrases {
			all = all && strings.Contains(s, p)
		}
		if all {
			return
		}
		select {
		case <-l.wrote:
		case <-timeout:
			tb.Fatalf("the log never held %q:\n%s", phrases, s)
		}
	}
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLogDurations checks durations are logged in milliseconds with the
// unit in the key, for requests served and failed alike.
func TestLogDurations(t *testing.T) {
	t.Parallel()
	_, usrv := proxytest.NewServer(t, proxytest.Simulated())
	logs := &logBuffer{wrote: make(chan struct{}, 1)}
	gw := serveGateway(t, config(usrv), proxy.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	ctx := testContext(t)
	post(t, ctx, gw, "/v1/chat/completions", chatBody(false), nil).Body.Close()
	post(t, ctx, gw, "/v1/chat/completions", `{"model":"m","messages":"hi"}`, nil).Body.Close()
	logs.waitFor(t, `"msg":"request served"`, `"msg":"request failed"`)

	seen := map[string]bool{}
	dec := json.NewDecoder(strings.NewReader(logs.String()))
	for {
		var rec map[string]any
		if err := dec.Decode(&rec); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("log is not JSON lines: %v\n%s", err, logs.String())
			}
			break
		}
		msg, _ := rec["msg"].(string)
		if _, ok := rec["duration"]; ok {
			t.Errorf("%q logs a bare duration: %v", msg, rec)
		}
		if msg != "request served" && msg != "request failed" {
			continue
		}
		ms, ok := rec["duration_ms"].(float64)
		if !ok || ms < 0 || ms > float64(wait.Milliseconds()) {
			t.Errorf("%q: duration_ms = %v, want milliseconds", msg, rec["duration_ms"])
		}
		seen[msg] = true
	}
	if !seen["request served"] || !seen["request failed"] {
		t.Errorf("log lines seen: %v, want request served and request failed:\n%s", seen, logs.String())
	}
}

// TestLogClientClosedStream checks a client that hangs up mid-stream is
// logged at info, not as a warning: agents' users stop answers routinely.
func TestLogClientClosedStream(t *testing.T) {
	t.Parallel()
	_, usrv := proxytest.NewServer(t, proxytest.Script(sim.Reply{Events: sim.NewStream(testModel).Role().Content("thinking...").Events(), Hang: true}))
	logs := &logBuffer{wrote: make(chan struct{}, 1)}
	gw := serveGateway(t, config(usrv), proxy.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	ctx, cancel := context.WithCancel(testContext(t))
	resp := post(t, ctx, gw, "/v1/chat/completions", chatBody(true), nil)
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatalf("read the first event: %v", err)
	}
	cancel()
	resp.Body.Close()
	logs.waitFor(t, `"msg":"client closed the stream"`)
	if s := logs.String(); strings.Contains(s, `"level":"WARN"`) {
		t.Errorf("a client that hung up logged a warning:\n%s", s)
	}
}
