package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// A small request whose stored history makes the conversation larger
// than one body may be is a 413 that says so, naming
// previous_response_id, before the history is assembled or sent.
func TestResponsesHistoryTooLarge(t *testing.T) {
	up, usrv := proxytest.NewServer(t, proxytest.Simulated())
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}, MaxBodyBytes: 64 << 10}
	gw := serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
	// The simulated model repeats what it was told: 40 KiB in, 40 out.
	first := rsCreate(t, gw, "/v1/responses", "sk-a", map[string]any{"model": sim.Model, "input": strings.Repeat("x", 40<<10)})
	calls := len(up.Received())
	status, _, b := rsRaw(t, gw, http.MethodPost, "/v1/responses", "sk-a", `{"model":"`+sim.Model+`","input":"more","previous_response_id":"`+first.ID+`"}`)
	e := rsError(t, b)
	if status != http.StatusRequestEntityTooLarge || e.Param != "previous_response_id" || e.Code != "conversation_too_large" ||
		!strings.Contains(e.Message, first.ID) || !strings.Contains(e.Message, "MAX_BODY_BYTES") || !strings.Contains(e.Message, "start a new conversation") {
		t.Errorf("continuation over MAX_BODY_BYTES: %d %s", status, b)
	}
	if n := len(up.Received()); n != calls {
		t.Errorf("%d calls reached the upstream", n-calls)
	}
}

// The body a previous_response_id assembles is charged against
// MAX_INFLIGHT_BYTES while it is served, as a body the client sent
// would be: with one such conversation in flight a second does not fit
// and is a 503 server_busy; once the first ends it is served.
func TestResponsesHistoryChargedInflight(t *testing.T) {
	release := make(chan struct{})
	evs := sim.NewStream(sim.Model).Role().Content("Held ").Content("answer.").Finish("stop").Done().Events()
	usrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i, ev := range evs {
			if i == 2 && strings.Contains(string(b), "HOLD") {
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
	t.Cleanup(usrv.Close)
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}, MaxBodyBytes: 64 << 10}
	cfg.MaxInflightBytes = proxy.InflightFactor * cfg.MaxBodyBytes
	gw := newGateway(t, cfg)
	streamed := func(body string) string {
		t.Helper()
		_, r, _ := rsStreamRaw(t, gw, "sk-a", body, "")
		b, _ := io.ReadAll(r)
		_, final := rsFinal(t, rsEvents(t, []byte(rsNoComments(b))))
		return final.ID
	}
	first := streamed(`{"model":"` + sim.Model + `","stream":true,"input":"` + strings.Repeat("x", 40<<10) + `"}`)
	next := func(input string) string {
		return `{"model":"` + sim.Model + `","stream":true,"input":"` + input + `","previous_response_id":"` + first + `"}`
	}
	held, r, _ := rsStreamRaw(t, gw, "sk-a", next("HOLD"), "")
	if held.StatusCode != http.StatusOK {
		t.Fatalf("held continuation: %d", held.StatusCode)
	}
	rsReadEvents(t, r, 1)
	status, h, b := rsRaw(t, gw, http.MethodPost, "/v1/responses", "sk-a", next("go"))
	if e := rsError(t, b); status != http.StatusServiceUnavailable || e.Code != "server_busy" || h.Get("Retry-After") == "" {
		t.Errorf("second continuation while the first holds its history: %d %s", status, b)
	}
	close(release)
	if b, _ := io.ReadAll(r); !strings.Contains(string(b), "response.completed") {
		t.Fatalf("held stream did not end: %s", b)
	}
	streamed(next("go"))
}

// The items a small request's item_reference items name count as a
// history does: past MAX_BODY_BYTES together they are a 413 naming
// input, before they are assembled or sent.
func TestResponsesReferencesTooLarge(t *testing.T) {
	up, usrv := proxytest.NewServer(t, proxytest.Simulated())
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}, MaxBodyBytes: 64 << 10}
	gw := serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
	first := rsCreate(t, gw, "/v1/responses", "", map[string]any{"model": sim.Model, "input": strings.Repeat("x", 20<<10)})
	item := rsItems(t, gw, first.ID, "").Data[0]["id"].(string)
	calls := len(up.Received())
	ref := `{"type":"item_reference","id":"` + item + `"}`
	status, _, b := rsRaw(t, gw, http.MethodPost, "/v1/responses", "", `{"model":"`+sim.Model+`","input":[`+strings.Repeat(ref+",", 4)+ref+`]}`)
	if e := rsError(t, b); status != http.StatusRequestEntityTooLarge || e.Param != "input" || e.Code != "conversation_too_large" || !strings.Contains(e.Message, "MAX_BODY_BYTES") {
		t.Errorf("references over MAX_BODY_BYTES: %d %s", status, b)
	}
	if n := len(up.Received()); n != calls {
		t.Errorf("%d calls reached the upstream", n-calls)
	}
}
