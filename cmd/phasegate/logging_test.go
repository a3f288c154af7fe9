package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phasegate/phasegate/sim"
)

// TestRunShutdownWritesPendingLog: a guarded request's log lines (its
// trace events and its request line) wait to be written together; a
// shutdown while they wait writes every one of them, and never a
// secret the request carried.
func TestRunShutdownWritesPendingLog(t *testing.T) {
	t.Parallel()
	const secret = "sk-pendinglogsecret0123456789"
	g := startLogging(t, nil, map[string]string{"PHASEGATE_API_KEYS": secret}, time.Hour)
	body := `{"model":"` + sim.Model + `","stream":true,"messages":[{"role":"user","content":"Weather in Paris?"}],` +
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}`
	req, err := http.NewRequestWithContext(testContext(t), http.MethodPost, g.url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("X-Request-Id", "pending-log-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte("get_weather")) {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if strings.Contains(g.log.String(), "pending-log-1") {
		t.Fatalf("the request's lines were written before the shutdown, with an hour to wait:\n%s", g.log)
	}
	if err := g.stop(t); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(g.log.String(), "\n") {
		if strings.Contains(l, `"pending-log-1"`) {
			lines = append(lines, l)
		}
	}
	for _, want := range []string{`"event":"orchestration_phase_start"`, `"event":"tool_call"`, `"event":"orchestration_phase_end"`, `"msg":"request served"`} {
		found := false
		for _, l := range lines {
			found = found || strings.Contains(l, want)
		}
		if !found {
			t.Errorf("no line of the request with %s; its lines:\n%s", want, strings.Join(lines, "\n"))
		}
	}
	if strings.Contains(g.log.String(), secret) {
		t.Errorf("the client key reached the log:\n%s", g.log)
	}
}
