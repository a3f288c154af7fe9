package proxytest_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestUpstreamReplies checks what the double writes for each kind of reply.
func TestUpstreamReplies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		reply       sim.Reply
		status      int
		contentType string
		body        string
		wantErr     bool // the body ends in an error: the connection was cut
	}{
		{name: "json", reply: sim.Reply{Body: []byte(`{"a":1}`)}, status: 200, contentType: "application/json", body: `{"a":1}`},
		{name: "status and own content type", reply: sim.Reply{Status: 503, Header: http.Header{"Content-Type": {"text/plain"}}, Body: []byte("down")}, status: 503, contentType: "text/plain", body: "down"},
		{name: "events", reply: sim.Reply{Events: []sim.Event{{Comment: ": keep-alive"}, {Data: "a\nb"}, {Data: "[DONE]"}}},
			status: 200, contentType: "text/event-stream", body: ": keep-alive\n\ndata: a\ndata: b\n\ndata: [DONE]\n\n"},
		{name: "empty event list is still a stream", reply: sim.Reply{Events: []sim.Event{}}, status: 200, contentType: "text/event-stream"},
		{name: "cut", reply: sim.Reply{Events: []sim.Event{{Data: "x"}}, Cut: true}, status: 200, contentType: "text/event-stream", body: "data: x\n\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up, srv := proxytest.NewServer(t, proxytest.Script(tt.reply))
			resp := proxytest.Do(t, proxytest.Context(t), srv.Client(), http.MethodPost, srv.URL+"/v1/chat/completions?x=1", `{"model":"m"}`)
			body, err := io.ReadAll(resp.Body)
			if (err != nil) != tt.wantErr {
				t.Errorf("read error = %v, want error: %v", err, tt.wantErr)
			}
			if resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			if got := resp.Header.Get("Content-Type"); got != tt.contentType {
				t.Errorf("Content-Type = %q, want %q", got, tt.contentType)
			}
			if string(body) != tt.body {
				t.Errorf("body = %q, want %q", body, tt.body)
			}
			rec := up.Received()
			if len(rec) != 1 {
				t.Fatalf("received %d requests, want 1", len(rec))
			}
			var v map[string]string
			if err := rec[0].Decode(&v); err != nil || v["model"] != "m" {
				t.Errorf("Decode = %v, %v; want model m", v, err)
			}
			if rec[0].Method != http.MethodPost || rec[0].Path != "/v1/chat/completions" {
				t.Errorf("received %s %s, want POST /v1/chat/completions", rec[0].Method, rec[0].Path)
			}
		})
	}
}

// TestScriptExhausted checks a call beyond the script fails loudly.
func TestScriptExhausted(t *testing.T) {
	t.Parallel()
	_, srv := proxytest.NewServer(t, proxytest.Script(sim.Reply{Body: []byte("{}")}))
	statuses := []int{}
	for range 2 {
		resp := proxytest.Do(t, proxytest.Context(t), srv.Client(), http.MethodGet, srv.URL+"/v1/models", "")
		io.Copy(io.Discard, resp.Body)
		statuses = append(statuses, resp.StatusCode)
	}
	if diff := cmp.Diff([]int{200, 500}, statuses); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
}

// TestCancelled checks the double reports a client that leaves a held or
// slow reply, and nothing for a reply written in full.
func TestCancelled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		reply sim.Reply
	}{
		{name: "hang", reply: sim.Reply{Events: []sim.Event{{Data: "x"}}, Hang: true}},
		{name: "delay", reply: sim.Reply{Events: []sim.Event{{Data: "x"}, {Data: "y", Delay: time.Hour}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up, srv := proxytest.NewServer(t, proxytest.Script(tt.reply))
			ctx, cancel := context.WithCancel(proxytest.Context(t))
			resp := proxytest.Do(t, ctx, srv.Client(), http.MethodPost, srv.URL+"/v1/chat/completions", "{}")
			buf := make([]byte, len("data: x\n\n"))
			if _, err := io.ReadFull(resp.Body, buf); err != nil {
				t.Fatal(err)
			}
			cancel()
			up.WaitCancelled(t)
		})
	}
	t.Run("complete reply", func(t *testing.T) {
		t.Parallel()
		up, srv := proxytest.NewServer(t, proxytest.Script(sim.NewStream("m").Role().Done().Reply()))
		resp := proxytest.Do(t, proxytest.Context(t), srv.Client(), http.MethodPost, srv.URL+"/v1/chat/completions", "{}")
		io.Copy(io.Discard, resp.Body)
		srv.Close() // waits for the handler
		select {
		case <-up.Cancelled():
			t.Error("a reply written in full was reported cancelled")
		default:
		}
	})
}
