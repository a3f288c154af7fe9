package proxy_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// logRecords returns the logged records whose message is msg.
func logRecords(t *testing.T, l *lockedBuffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace([]byte(l.String())), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// A declared tool whose parameters schema does not compile (here: a
// "$ref" to an http URL, which is never loaded) gets its calls judged
// without it, and the judgement's schema error is logged once, with the
// request and the tool; the URL's server is never asked.
func TestSchemaErrLoggedOncePerJudgement(t *testing.T) {
	logs := &lockedBuffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(logs, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	var asked atomic.Int32
	refSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		_, _ = w.Write([]byte(`{"type":"object"}`))
	}))
	defer refSrv.Close()

	call := sim.NewStream(tsModel).Role().ToolCall(0, "call_r", "fetch_doc", `{"url":"x"}`).Finish("tool_calls").Done()
	_, gw := tsGateway(t, proxytest.Script(call.Reply()), protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), false)
	body := `{"model":"` + tsModel + `","stream":true,"messages":[{"role":"user","content":"hi"}],` +
		`"tools":[{"type":"function","function":{"name":"fetch_doc","parameters":{"$ref":"` + refSrv.URL + `/doc.json"}}}]}`
	resp, got := tsPost(t, gw, "/v1/chat/completions", body, http.Header{"X-Request-Id": {"req-schema-1"}})
	if resp.StatusCode != http.StatusOK || !bytes.Contains(got, []byte(`"call_r"`)) {
		t.Fatalf("status %d, body %s: want the call forwarded", resp.StatusCode, got)
	}
	recs := logRecords(t, logs, "tool parameters schema does not compile; the call was judged without it")
	if len(recs) != 1 {
		t.Fatalf("%d schema error lines, want 1; log:\n%s", len(recs), logs.String())
	}
	if recs[0]["level"] != "WARN" || recs[0]["tool"] != "fetch_doc" || recs[0]["request_id"] != "req-schema-1" || recs[0]["err"] == "" {
		t.Errorf("schema error line %v, want WARN with the request id, the tool and the error", recs[0])
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the server of the $ref was asked %d times, want never", n)
	}
}
