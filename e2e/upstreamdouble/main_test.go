package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// startDouble runs the double as the e2e tests do: it returns its root URL
// and a stop function that closes its standard input and waits for it.
func startDouble(t *testing.T) (root string, stop func() error) {
	t.Helper()
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(stdinR, stdoutW, true)
		stdoutW.Close()
		done <- err
	}()
	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	if err != nil {
		t.Fatalf("read address: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdoutR) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		stdinW.Close()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("double did not exit 10s after its stdin closed")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return strings.TrimSpace(line), stop
}

func TestDouble(t *testing.T) {
	root, _ := startDouble(t)
	if !strings.HasPrefix(root, "http://127.0.0.1:") {
		t.Fatalf("address line = %q, want http://127.0.0.1:PORT", root)
	}
	tests := []struct {
		name       string
		method     string
		path       string
		header     map[string]string
		body       string
		wantStatus int
		wantType   string // Content-Type prefix
		wantIn     string // a substring of the body
	}{
		{name: "scenario by header, streaming", method: "POST", path: "/v1/chat/completions",
			header:     map[string]string{"X-Test-Scenario": "text"},
			body:       `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
			wantStatus: 200, wantType: "text/event-stream", wantIn: `"prompt_cache_hit_tokens":5`},
		{name: "scenario by last user message", method: "POST", path: "/v1/chat/completions",
			body:       `{"model":"m","messages":[{"role":"user","content":"scenario:cut"},{"role":"user","content":"go scenario:reasoning"}]}`,
			wantStatus: 200, wantType: "application/json", wantIn: `"reasoning_content":"The user wants a check."`},
		{name: "tool call, not streaming", method: "POST", path: "/v1/chat/completions",
			header:     map[string]string{"X-Test-Scenario": "tool-call"},
			body:       `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			wantStatus: 200, wantType: "application/json", wantIn: `"name":"get_weather"`},
		{name: "load text", method: "POST", path: "/v1/chat/completions",
			header:     map[string]string{"X-Test-Scenario": "agent-text"},
			body:       `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			wantStatus: 200, wantType: "text/event-stream", wantIn: `"finish_reason":"stop"`},
		{name: "load tool call", method: "POST", path: "/v1/chat/completions",
			header:     map[string]string{"X-Test-Scenario": "agent-tool"},
			body:       `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			wantStatus: 200, wantType: "text/event-stream", wantIn: `"finish_reason":"tool_calls"`},
		{name: "rate limit", method: "POST", path: "/v1/chat/completions",
			header:     map[string]string{"X-Test-Scenario": "rate-limit"},
			body:       `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			wantStatus: 429, wantType: "application/json", wantIn: `"code":"rate_limit_exceeded"`},
		{name: "no scenario", method: "POST", path: "/v1/chat/completions",
			body:       `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			wantStatus: 400, wantType: "application/json", wantIn: `"code":"unknown_scenario"`},
		{name: "a simulated model without a scenario", method: "POST", path: "/v1/chat/completions",
			body:       `{"model":"phasegate-sim-agent-thinking","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"bash","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}]}`,
			wantStatus: 200, wantType: "application/json", wantIn: `"reasoning_content":"Reasoning of call_think_`},
		{name: "models", method: "GET", path: "/v1/models",
			wantStatus: 200, wantType: "application/json", wantIn: `"id":"e2e-model-b"`},
		{name: "unknown path", method: "GET", path: "/v1/files",
			wantStatus: 404, wantType: "application/json", wantIn: `"code":"unknown_url"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, root+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status = %d, want %d (body %s)", resp.StatusCode, tt.wantStatus, body)
			}
			if got := resp.Header.Get("Content-Type"); !strings.HasPrefix(got, tt.wantType) {
				t.Errorf("Content-Type = %q, want %s...", got, tt.wantType)
			}
			if !strings.Contains(string(body), tt.wantIn) {
				t.Errorf("body = %s, want it to contain %s", body, tt.wantIn)
			}
		})
	}
}

func TestDoubleWithoutRecording(t *testing.T) {
	srv := httptest.NewServer(newHandler(false))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"scenario:text"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Hello") {
		t.Fatalf("answer = %d %s, want 200 with the text scenario's content", resp.StatusCode, body)
	}
	resp, err = http.Get(srv.URL + "/_double/requests")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []received
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("got %d recorded requests, want none", len(got))
	}
}

func TestDoubleRecordsRequests(t *testing.T) {
	root, _ := startDouble(t)
	for _, id := range []string{"req-a", "req-b"} {
		req, _ := http.NewRequest("POST", root+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","temperature":0,"messages":[{"role":"user","content":"scenario:text"}]}`))
		req.Header.Set("X-Request-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	resp, err := http.Get(root + "/_double/requests?request_id=req-b")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []received
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("got %d requests for req-b, want 1: %+v", len(got), got)
	}
	if want := `{"model":"m","temperature":0,"messages":[{"role":"user","content":"scenario:text"}]}`; string(got[0].Body) != want {
		t.Errorf("body = %s, want %s", got[0].Body, want)
	}
	if got[0].Path != "/v1/chat/completions" || got[0].Method != "POST" {
		t.Errorf("request = %s %s, want POST /v1/chat/completions", got[0].Method, got[0].Path)
	}
}

func TestDoubleExitsWhenStdinCloses(t *testing.T) {
	root, stop := startDouble(t)
	// A held-open stream must not keep the double alive.
	req, _ := http.NewRequest("POST", root+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"scenario:text"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := stop(); err != nil {
		t.Fatalf("run returned %v, want nil", err)
	}
	if _, err := http.Get(root + "/v1/models"); err == nil {
		t.Error("double still answers after its stdin closed")
	}
}
