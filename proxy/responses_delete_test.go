package proxy_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

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
