package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// TestTransport checks the in-process transport serves the simulated host
// without a network, and sends every other host on.
func TestTransport(t *testing.T) {
	t.Parallel()
	other, osrv := proxytest.NewServer(t, proxytest.Script(sim.Reply{Body: []byte(`{"other":true}`)}))
	simulated := proxytest.NewUpstream(proxytest.Script(
		sim.Reply{Status: 201, Header: http.Header{"X-Sim": {"1"}}, Body: []byte(`{"sim":true}`)},
		sim.Reply{Events: sim.NewStream("m").Role().Done().Events(), Cut: true},
	))
	client := &http.Client{Transport: &sim.Transport{Handler: simulated, Next: osrv.Client().Transport}}
	tests := []struct {
		name    string
		url     string
		status  int
		body    string
		header  string
		wantErr error
	}{
		{name: "simulated host", url: sim.BaseURL + "/models", status: 201, body: `{"sim":true}`, header: "1"},
		{name: "a cut reply is an unexpected EOF", url: sim.BaseURL + "/chat/completions", status: 200, wantErr: io.ErrUnexpectedEOF},
		{name: "any other host", url: osrv.URL + "/v1/models", status: 200, body: `{"other":true}`},
	}
	for _, tt := range tests { // in order: the script is shared
		resp := proxytest.Do(t, proxytest.Context(t), client, http.MethodGet, tt.url, "")
		body, err := io.ReadAll(resp.Body)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: read error = %v, want %v", tt.name, err, tt.wantErr)
		}
		if resp.StatusCode != tt.status || (tt.wantErr == nil && string(body) != tt.body) || resp.Header.Get("X-Sim") != tt.header {
			t.Errorf("%s: got %d %s X-Sim=%q, want %d %s X-Sim=%q", tt.name, resp.StatusCode, body, resp.Header.Get("X-Sim"), tt.status, tt.body, tt.header)
		}
	}
	if n := len(simulated.Received()); n != 2 {
		t.Errorf("simulated upstream got %d requests, want 2", n)
	}
	if n := len(other.Received()); n != 1 {
		t.Errorf("other upstream got %d requests, want 1", n)
	}
}

// TestZeroTransport checks the zero Transport serves the simulated models
// themselves, each answer under a fresh id.
func TestZeroTransport(t *testing.T) {
	t.Parallel()
	client := &http.Client{Transport: &sim.Transport{}}
	resp := proxytest.Do(t, proxytest.Context(t), client, http.MethodGet, sim.BaseURL+"/models", "")
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("models: %d, %v", resp.StatusCode, err)
	}
	if len(list.Data) != len(sim.Models) || list.Data[0].ID != sim.Model {
		t.Errorf("models = %+v, want %v", list.Data, sim.Models)
	}
	ids := map[string]bool{}
	for range 2 {
		body := `{"model":"` + sim.Model + `","messages":[{"role":"user","content":"hi"}]}`
		resp := proxytest.Do(t, proxytest.Context(t), client, http.MethodPost, sim.BaseURL+"/chat/completions", body)
		var c struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("chat: %d, %v", resp.StatusCode, err)
		}
		ids[c.ID] = true
	}
	if len(ids) != 2 {
		t.Errorf("answer ids = %v, want two different ones", ids)
	}
}

// TestTransportCancellation checks a held in-process reply ends, and the
// double sees the client leave, however the client leaves: by cancelling
// its context before or after the headers, or by closing the body.
func TestTransportCancellation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		reply sim.Reply
		leave func(cancel context.CancelFunc, body io.Closer)
	}{
		{name: "cancel mid-stream", reply: sim.Reply{Events: []sim.Event{{Data: "x"}}, Hang: true},
			leave: func(cancel context.CancelFunc, _ io.Closer) { cancel() }},
		{name: "close the body mid-stream", reply: sim.Reply{Events: []sim.Event{{Data: "x"}}, Hang: true},
			leave: func(_ context.CancelFunc, body io.Closer) { body.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := proxytest.NewUpstream(proxytest.Script(tt.reply))
			client := &http.Client{Transport: &sim.Transport{Handler: up}}
			ctx, cancel := context.WithCancel(proxytest.Context(t))
			defer cancel()
			resp := proxytest.Do(t, ctx, client, http.MethodPost, sim.BaseURL+"/chat/completions", "{}")
			buf := make([]byte, len("data: x\n\n"))
			if _, err := io.ReadFull(resp.Body, buf); err != nil {
				t.Fatal(err)
			}
			tt.leave(cancel, resp.Body)
			up.WaitCancelled(t)
		})
	}
	t.Run("cancel before the headers", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		arrived := make(chan struct{})
		up := proxytest.NewUpstream(func(proxytest.Received) sim.Reply {
			close(arrived)
			<-release
			return sim.Reply{Body: []byte("{}")}
		})
		client := &http.Client{Transport: &sim.Transport{Handler: up}}
		ctx, cancel := context.WithCancel(proxytest.Context(t))
		errc := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, sim.BaseURL+"/models", nil)
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		<-arrived
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("error = %v, want context.Canceled", err)
		}
		close(release) // the handler's write then fails and its goroutine ends; goleak checks
	})
}
