package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/pricing"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/session"
)

func ptr[T any](v T) *T { return &v }

// TestSessionsFromFile: the global session budgets from the environment,
// those per model and project and the prices from the config file.
func TestSessionsFromFile(t *testing.T) {
	file := writeFile(t, `session_max_tool_calls: 200
session_on_cap: reject
sessions:
  models:
    deepseek-v4-pro*: {max_usd: 2.5, idle_ttl: 30m}
    gpt-*:
      max_tool_calls: 50
  projects:
    payments: {max_tokens: 1000000, max_tool_calls: 0}
prices:
  gpt-5*: {input_cache_miss: 1.25, input_cache_hit: 0.125, output: 10}
  deepseek-v4-flash:
    input_cache_miss: 0.3
    input_cache_hit: 0.006
    output: 1.2
    off_peak: {input_cache_miss: 0.15, input_cache_hit: 0.003, output: 0.6}
`)
	o, err := parseOptions(serveCommand, []string{"--config", file},
		env(map[string]string{"SESSION_MAX_USD": "4.75", "SESSION_FROM": "prompt_cache_key, user", "SESSION_FAIL_OPEN": "false"}), &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	want := proxy.Sessions{
		Rules: session.Rules{
			Global: session.Budget{ToolCalls: 200, USD: 4.75, IdleTTL: time.Hour},
			Models: []session.ModelRule{
				{Pattern: "deepseek-v4-pro*", Override: session.Override{USD: ptr(2.5), IdleTTL: ptr(30 * time.Minute)}},
				{Pattern: "gpt-*", Override: session.Override{ToolCalls: ptr(int64(50))}},
			},
			Projects: map[string]session.Override{"payments": {Tokens: ptr(int64(1_000_000)), ToolCalls: ptr(int64(0))}},
		},
		From:   []session.Source{session.SourcePromptCacheKey, session.SourceUser},
		Reject: true,
	}
	if diff := cmp.Diff(want, o.Proxy.Sessions); diff != "" {
		t.Errorf("sessions (-want +got):\n%s", diff)
	}
	prices := []pricing.Rule{
		{Pattern: "gpt-5*", Price: pricing.Price{InputCacheMiss: 1.25, InputCacheHit: 0.125, Output: 10}},
		{Pattern: "deepseek-v4-flash", Price: pricing.Price{InputCacheMiss: 0.3, InputCacheHit: 0.006, Output: 1.2},
			OffPeak: &pricing.Price{InputCacheMiss: 0.15, InputCacheHit: 0.003, Output: 0.6}},
	}
	if diff := cmp.Diff(prices, o.Proxy.Prices); diff != "" {
		t.Errorf("prices (-want +got):\n%s", diff)
	}
	d, err := parseOptions(serveCommand, nil, env(nil), &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Proxy.Sessions; got.Rules.Global != (session.Budget{IdleTTL: time.Hour}) || !got.FailOpen || got.Reject || got.From != nil {
		t.Errorf("defaults: %+v; want no budget, an hour, fail open, answer, no body field", got)
	}
}

// TestSessionsInvalid: each bad session setting is one error naming it as
// written.
func TestSessionsInvalid(t *testing.T) {
	for _, tt := range []struct {
		name   string
		env    map[string]string
		file   string
		wantIn string
	}{
		{name: "negative calls", env: map[string]string{"SESSION_MAX_TOOL_CALLS": "-1"}, wantIn: "SESSION_MAX_TOOL_CALLS=-1: must be a whole number of 0 or more"},
		{name: "dollars not a number", env: map[string]string{"SESSION_MAX_USD": "$5"}, wantIn: "SESSION_MAX_USD=$5: must be a number of 0 or more"},
		{name: "zero ttl", env: map[string]string{"SESSION_IDLE_TTL": "0s"}, wantIn: "SESSION_IDLE_TTL=0s: must be a duration of more than 0"},
		{name: "bad on-cap", env: map[string]string{"SESSION_ON_CAP": "error"}, wantIn: "SESSION_ON_CAP=error: must be answer or reject"},
		{name: "unknown body field", env: map[string]string{"SESSION_FROM": "user,conversation_id"}, wantIn: `SESSION_FROM=user,conversation_id: unknown field "conversation_id"`},
		{name: "bad budget in the file", file: "sessions:\n  models:\n    gpt-*: {max_usd: lots}\n", wantIn: ":4: sessions: models: gpt-*: max_usd: lots: must be a number of 0 or more"},
		{name: "unknown budget key", file: "sessions:\n  projects:\n    p: {max_token: 3}\n", wantIn: ":4: sessions: projects: p: unknown key max_token; did you mean max_tokens?"},
		{name: "bad ttl in the file", file: "sessions:\n  projects:\n    p: {idle_ttl: 10}\n", wantIn: ":4: sessions: projects: p: idle_ttl: 10: must be a duration of more than 0"},
		{name: "a price left out", file: "prices:\n  gpt-5: {input_cache_miss: 1.25, output: 10}\n", wantIn: ":3: prices: gpt-5: prices need input_cache_hit"},
		{name: "a negative price", file: "prices:\n  gpt-5: {input_cache_miss: -1, input_cache_hit: 0, output: 10}\n", wantIn: ":3: prices: gpt-5: input_cache_miss: -1: must be a number of 0 or more"},
		{name: "unknown sessions key", file: "sessions:\n  model: {}\n", wantIn: ":3: sessions: unknown key model; did you mean models?"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var args []string
			if tt.file != "" {
				args = []string{"--config", writeFile(t, "\n"+tt.file)}
			}
			_, err := parseOptions(serveCommand, args, env(tt.env), &strings.Builder{})
			if err == nil || !strings.Contains(err.Error(), tt.wantIn) {
				t.Fatalf("error %v, want it to say %q", err, tt.wantIn)
			}
			if lines := strings.Split(err.Error(), "\n"); len(lines) != 1 {
				t.Errorf("error has %d lines, want 1:\n%s", len(lines), err)
			}
		})
	}
}
