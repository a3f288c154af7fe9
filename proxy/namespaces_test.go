package proxy_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// resumableGateway serves the guard and the Responses API, without client
// keys, in front of the simulated models, every stream resumable.
func resumableGateway(t *testing.T) *httptest.Server {
	t.Helper()
	_, usrv := proxytest.NewServer(t, proxytest.Simulated())
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}, Resume: proxy.Resume{All: true}}
	return serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
}

// TestChatIDsCannotNameResponsesStreams: without client keys, the chat
// route's X-Request-Id is the client's to choose, and "responses::<id>"
// named the log of a Responses stream: its events could be read, its
// existence learnt, and a cancel answered 200 doing nothing. The two
// namespaces are apart: the chat route's reads and cancels of that id are
// 404s, and a chat stream given that id does not collide with the
// Responses stream, which is still read back whole by its own route.
func TestChatIDsCannotNameResponsesStreams(t *testing.T) {
	gw := resumableGateway(t)
	ctx := testContext(t)
	resp := post(t, ctx, gw, "/v1/responses", `{"model":"`+sim.Model+`","input":"hello","stream":true}`, nil)
	_, r := rsFinal(t, rsEvents(t, readAll(t, resp.Body)))
	alias := "responses::" + r.ID
	for _, tt := range []struct{ method, path string }{
		{http.MethodGet, "/v1/phasegate/requests/" + alias + "/events"},
		{http.MethodPost, "/v1/phasegate/requests/" + alias + "/cancel"},
	} {
		status, _, b := rsRaw(t, gw, tt.method, tt.path, "", "")
		if status != http.StatusNotFound {
			t.Errorf("%s %s: %d %.200s; want 404", tt.method, tt.path, status, b)
		}
	}
	chatResp := post(t, ctx, gw, "/v1/chat/completions", chatBodyFor(sim.Model, true), http.Header{"X-Request-Id": {alias}})
	if b := readAll(t, chatResp.Body); chatResp.StatusCode != http.StatusOK || !strings.Contains(string(b), "[DONE]") {
		t.Errorf("a chat stream with X-Request-Id %s: %d %.200s", alias, chatResp.StatusCode, b)
	}
	back := get(t, ctx, gw, "/v1/responses/"+r.ID+"?stream=true", nil)
	if _, again := rsFinal(t, rsEvents(t, readAll(t, back.Body))); again.ID != r.ID {
		t.Errorf("the Responses stream read back as %q, want %q", again.ID, r.ID)
	}
}

// TestStartingAfterOutOfRange: a resume position past what any stream can
// hold (9223372036854775807 overflowed and replayed from the start) is a
// 400 naming starting_after, on the chat route and the Responses route.
func TestStartingAfterOutOfRange(t *testing.T) {
	gw := resumableGateway(t)
	ctx := testContext(t)
	resp := post(t, ctx, gw, "/v1/responses", `{"model":"`+sim.Model+`","input":"hello","stream":true}`, nil)
	_, r := rsFinal(t, rsEvents(t, readAll(t, resp.Body)))
	chatResp := post(t, ctx, gw, "/v1/chat/completions", chatBodyFor(sim.Model, true), resumableHeader("req-range"))
	readAll(t, chatResp.Body)
	for _, after := range []string{"9223372036854775807", "9223372036854775806", "1073741825"} {
		for _, path := range []string{"/v1/responses/" + r.ID + "?stream=true&starting_after=" + after, "/v1/phasegate/requests/req-range/events?starting_after=" + after} {
			status, _, b := rsRaw(t, gw, http.MethodGet, path, "", "")
			if e := rsError(t, b); status != http.StatusBadRequest || e.Param != "starting_after" {
				t.Errorf("GET %s: %d %.200s; want a 400 naming starting_after", path, status, b)
			}
		}
	}
	status, _, b := rsRaw(t, gw, http.MethodGet, fmt.Sprintf("/v1/responses/%s?stream=true&starting_after=%d", r.ID, 2), "", "")
	if status != http.StatusOK || strings.Contains(string(b), `"sequence_number":0,`) {
		t.Errorf("starting_after=2: %d %.200s; want the events after it", status, b)
	}
}

// chatBodyFor is a minimal chat completion request for model.
func chatBodyFor(model string, stream bool) string {
	return fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, model, stream)
}
