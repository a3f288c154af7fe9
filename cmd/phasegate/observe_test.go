package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/phasegate/phasegate/sim"
)

// TestRunTracingAndRecent: OTEL_TRACES_EXPORTER=console traces the
// gateway's requests (flushed at shutdown), and ADMIN_API_KEY opens the
// recent requests' events to its bearer.
func TestRunTracingAndRecent(t *testing.T) {
	t.Parallel()
	g := start(t, nil, map[string]string{"OTEL_TRACES_EXPORTER": "console", "ADMIN_API_KEY": "admin-test-key"})
	ctx := testContext(t)

	tool := openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "get_weather",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}
	body := `{"model":"` + sim.Model + `","messages":[{"role":"user","content":"Weather in Paris?"}],"tools":[` + mustJSON(t, tool) + `]}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("X-Request-Id", "req-observe-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	get := func(auth string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.url+"/debug/requests/req-observe-1", nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, b := get("Bearer admin-test-key"); status != http.StatusOK || !strings.Contains(b, `"verdict":"forward"`) {
		t.Errorf("with the admin key: %d %s; want 200 and the forwarded call", status, b)
	}
	if status, _ := get("Bearer sk-client"); status != http.StatusNotFound {
		t.Errorf("with another key: %d, want 404", status)
	}

	if err := g.stop(t); err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, want := range []string{`"Name":"chat ` + sim.Model + `"`, `"gen_ai.operation.name"`, `"tool_call"`} {
		if !strings.Contains(g.log.String(), want) {
			t.Errorf("stderr lacks the span's %s:\n%s", want, g.log)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
