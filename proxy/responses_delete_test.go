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

// A deleted response is gone from its resume too: the events its
// resumable stream left are not replayed.
func TestResponsesDeleteForgetsStream(t *testing.T) {
	_, gw := rsGateway(t, proxytest.Simulated())
	body := `{"model":"` + sim.Model + `","input":"hi","stream":true}`
	resp, r, _ := rsStreamRaw(t, gw, "sk-a", body, "X-Phasegate-Resumable: true\r\n")
	b, _ := io.ReadAll(r)
	evs := rsEvents(t, []byte(rsNoComments(b)))
	_, final := rsFinal(t, evs)
	if resp.Header.Get("X-Phasegate-Resumable") != "true" {
		t.Fatal("not resumable")
	}
	if status, _, b := rsRaw(t, gw, http.MethodDelete, "/v1/responses/"+final.ID, "sk-a", ""); status != http.StatusOK {
		t.Fatalf("DELETE: %d %s", status, b)
	}
	if status, _, b := rsRaw(t, gw, http.MethodGet, "/v1/responses/"+final.ID+"?stream=true", "sk-a", ""); status != http.StatusNotFound || strings.Contains(string(b), "response.completed") {
		t.Errorf("resume of a deleted response: %d %s", status, b)
	}
}

// A response id in a path or in previous_response_id is one the gateway
// could have made (letters, digits, _ and -, at most 100) or a 400
// naming it, before any store is asked.
func TestResponsesIDValidated(t *testing.T) {
	_, gw := rsGateway(t, proxytest.Simulated())
	for _, id := range []string{strings.Repeat("a", 5000), "resp_a:b", "resp_%00", "resp_%C3%A9"} {
		for _, p := range []string{"/v1/responses/" + id, "/v1/responses/" + id + "/input_items", "/v1/responses/" + id + "?stream=true"} {
			for _, m := range []string{http.MethodGet, http.MethodDelete} {
				if m == http.MethodDelete && p != "/v1/responses/"+id {
					continue
				}
				status, _, b := rsRaw(t, gw, m, p, "sk-a", "")
				if e := rsError(t, b); status != http.StatusBadRequest || e.Param != "response_id" || e.Code != "invalid_response_id" {
					t.Errorf("%s %.60s: %d %s", m, p, status, b)
				}
			}
		}
		status, _, b := rsRaw(t, gw, http.MethodPost, "/v1/responses", "sk-a", `{"model":"`+sim.Model+`","input":"hi","previous_response_id":"`+id+`"}`)
		if e := rsError(t, b); status != http.StatusBadRequest || e.Param != "previous_response_id" || e.Code != "invalid_response_id" {
			t.Errorf("previous_response_id %.60s: %d %s", id, status, b)
		}
	}
}

// A response deleted while its stream runs stays deleted when the
// stream ends: its end does not store it again.
func TestResponsesDeleteWhileRunning(t *testing.T) {
	release := make(chan struct{})
	up, _ := rsGated(t, release)
	gw := serveGateway(t, rsResumeConfig(up), proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage,
		TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
	body := `{"model":"` + sim.Model + `","input":"Weather in Paris?","stream":true}`
	_, r, _ := rsStreamRaw(t, gw, "key-a", body, "X-Phasegate-Resumable: true\r\n")
	id := rsEvents(t, rsReadEvents(t, r, 1))[0].Data["response"].(map[string]any)["id"].(string)
	if status, _, b := rsRaw(t, gw, http.MethodDelete, "/v1/responses/"+id, "key-a", ""); status != http.StatusOK {
		t.Fatalf("DELETE while running: %d %s", status, b)
	}
	close(release)
	if b, _ := io.ReadAll(r); !strings.Contains(string(b), "response.completed") {
		t.Fatalf("stream did not end: %s", b)
	}
	if status, _, b := rsRaw(t, gw, http.MethodGet, "/v1/responses/"+id, "key-a", ""); status != http.StatusNotFound {
		t.Errorf("GET after the stream of a deleted response ended: %d %.200s", status, b)
	}
}

// After a DELETE nothing of the response resolves: neither its output
// items nor the input items it indexed are an item_reference's any more,
// in memory and on Redis; the items of another response it referenced
// still are.
func TestResponsesDeleteForgetsItems(t *testing.T) {
	_, usrv := proxytest.NewServer(t, proxytest.Simulated())
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}}
	memory := serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
	a, b, _ := replicas(t, cfg)
	for _, gw := range []struct {
		name         string
		write, other *httptest.Server
	}{{"memory", memory, memory}, {"redis", a, b}} {
		t.Run(gw.name, func(t *testing.T) {
			kept := rsCreate(t, gw.write, "/v1/responses", "", map[string]any{"model": sim.Model, "input": "Keep me."})
			keptIn := rsItems(t, gw.write, kept.ID, "").Data[0]["id"].(string)
			gone := rsCreate(t, gw.write, "/v1/responses", "", map[string]any{"model": sim.Model,
				"input": []map[string]any{{"type": "item_reference", "id": keptIn}, {"role": "user", "content": "Forget me."}}})
			items := rsItems(t, gw.write, gone.ID, "?order=asc").Data
			if len(items) != 2 || items[0]["id"] != keptIn {
				t.Fatalf("input items of %s: %v", gone.ID, items)
			}
			goneIn, goneOut := items[1]["id"].(string), gone.Output[len(gone.Output)-1].ID
			if status, _, body := rsRaw(t, gw.other, http.MethodDelete, "/v1/responses/"+gone.ID, "", ""); status != http.StatusOK {
				t.Fatalf("DELETE: %d %s", status, body)
			}
			for _, id := range []string{goneIn, goneOut} {
				status, _, body := rsRaw(t, gw.write, http.MethodPost, "/v1/responses", "", `{"model":"`+sim.Model+`","input":[{"type":"item_reference","id":"`+id+`"}]}`)
				if e := rsError(t, body); status != http.StatusBadRequest || e.Param != "input[0].id" || !strings.Contains(e.Message, id) {
					t.Errorf("reference to %s of a deleted response: %d %s", id, status, body)
				}
			}
			rsCreate(t, gw.other, "/v1/responses", "", map[string]any{"model": sim.Model,
				"input": []map[string]any{{"type": "item_reference", "id": keptIn}}})
		})
	}
}

// POST /v1/responses/{id}/cancel is OpenAI's for background responses,
// which the gateway does not serve: for a response it holds, running or
// not, a 400 that says so; another key's, or none, a 404; never a
// request to the upstream.
func TestResponsesCancelUnsupported(t *testing.T) {
	release := make(chan struct{})
	up, calls := rsGated(t, release)
	gw := serveGateway(t, rsResumeConfig(up), proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage,
		TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
	body := `{"model":"` + sim.Model + `","input":"Weather in Paris?","stream":true}`
	_, r, _ := rsStreamRaw(t, gw, "key-a", body, "X-Phasegate-Resumable: true\r\n")
	id := rsEvents(t, rsReadEvents(t, r, 1))[0].Data["response"].(map[string]any)["id"].(string)
	cancel := func(key string) (int, []byte) {
		t.Helper()
		status, _, b := rsRaw(t, gw, http.MethodPost, "/v1/responses/"+id+"/cancel", key, "")
		return status, b
	}
	running := func(state string) {
		t.Helper()
		status, b := cancel("key-a")
		if e := rsError(t, b); status != http.StatusBadRequest || e.Code != "unsupported_cancel" || !strings.Contains(e.Message, "background") {
			t.Errorf("cancel of a %s response: %d %s", state, status, b)
		}
	}
	running("running")
	if status, b := cancel("key-b"); status != http.StatusNotFound {
		t.Errorf("cancel of another key's response: %d %s", status, b)
	}
	close(release)
	if b, _ := io.ReadAll(r); !strings.Contains(string(b), "response.completed") {
		t.Fatalf("stream did not end: %s", b)
	}
	running("completed")
	if n := len(calls.get()); n != 1 {
		t.Errorf("upstream got %d requests, want the stream's 1", n)
	}
}
