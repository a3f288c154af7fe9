package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/sim"
)

// TestProcessGuardProfileFromEnvironment runs the gateway as a process
// with and without GUARD_PROFILE=agent and asks it a guarded question: the
// profile the guard applied, which the response names, is the one the
// environment set.
func TestProcessGuardProfileFromEnvironment(t *testing.T) {
	for _, want := range []string{"strict", "agent"} {
		t.Run(want, func(t *testing.T) {
			env := map[string]string{}
			if want == "agent" {
				env["GUARD_PROFILE"] = "agent"
			}
			c := startProcess(t, env)
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			body := `{"model":"` + sim.Model + `","messages":[{"role":"user","content":"weather?"}],` +
				`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}`
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.addr+"/two-stage/v1/chat/completions", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("the request: %v; the gateway's log:\n%s", err, c.log())
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if got := resp.Header.Get("X-Phasegate-Guard-Profile"); got != want {
				t.Errorf("X-Phasegate-Guard-Profile = %q, want %q", got, want)
			}
		})
	}
}
