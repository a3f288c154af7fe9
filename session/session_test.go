package session_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/session"
)

// bodyFields reads the top-level fields of body, as a door does.
func bodyFields(t *testing.T, body string) session.Fields {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	return func(name string) (json.RawMessage, bool) { v, ok := m[name]; return v, ok }
}

func TestIdentify(t *testing.T) {
	claudeUser := "user_" + strings.Repeat("a1", 32) + "_account_2f1e4c2a-7a43-4c50-9d3b-0c6a1d5e9b11_session_9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b"
	all := session.BodySources
	for _, tc := range []struct {
		name    string
		hdr     http.Header
		body    string
		from    []session.Source
		want    string
		wantSrc session.Source
		param   string // a 400 naming this param
	}{
		{name: "none", body: `{"user":"u1"}`},
		{name: "our header", hdr: http.Header{"X-Session-Id": {"run-42"}}, want: "run-42", wantSrc: session.SourceHeader},
		{name: "our header before Claude Code's", hdr: http.Header{"X-Session-Id": {"a"}, "X-Claude-Code-Session-Id": {"b"}}, want: "a", wantSrc: session.SourceHeader},
		{name: "Claude Code's header", hdr: http.Header{"X-Claude-Code-Session-Id": {"9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b"}},
			want: "9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b", wantSrc: session.SourceClaudeCode},
		{name: "headers before the body", hdr: http.Header{"X-Session-Id": {"h"}}, body: `{"user":"u"}`, from: all, want: "h", wantSrc: session.SourceHeader},
		{name: "body fields only when opted in", body: `{"user":"u","prompt_cache_key":"k"}`},
		{name: "Codex client_metadata", body: `{"client_metadata":{"session_id":"codex-1"},"prompt_cache_key":"k"}`, from: all,
			want: "codex-1", wantSrc: session.SourceClientMetadata},
		{name: "in the order of SESSION_FROM", body: `{"user":"u","prompt_cache_key":"k"}`,
			from: []session.Source{session.SourceUser, session.SourcePromptCacheKey}, want: "u", wantSrc: session.SourceUser},
		{name: "an absent field is skipped", body: `{"safety_identifier":"s"}`, from: all, want: "s", wantSrc: session.SourceSafetyIdentifier},
		{name: "Claude Code metadata.user_id", body: `{"metadata":{"user_id":"` + claudeUser + `"}}`, from: all,
			want: claudeUser, wantSrc: session.SourceMetadataUserID},
		{name: "a field that is not a string names none", body: `{"user":7,"metadata":"x","client_metadata":{"session_id":null}}`, from: all},
		{name: "an empty header", hdr: http.Header{"X-Session-Id": {""}}, param: "X-Session-Id"},
		{name: "a header too long", hdr: http.Header{"X-Session-Id": {strings.Repeat("a", session.MaxIDLen+1)}}, param: "X-Session-Id"},
		{name: "a slash", hdr: http.Header{"X-Claude-Code-Session-Id": {"a/b"}}, param: "X-Claude-Code-Session-Id"},
		{name: "a space in a body field", body: `{"user":"John Smith"}`, from: all, param: "user"},
		{name: "an email is an id", body: `{"user":"john+ci@example.com"}`, from: all, want: "john+ci@example.com", wantSrc: session.SourceUser},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fields session.Fields
			if tc.body != "" {
				fields = bodyFields(t, tc.body)
			}
			id, src, err := session.Identify(tc.hdr, fields, tc.from)
			if tc.param != "" {
				var ce *chat.Error
				if !errors.As(err, &ce) || ce.Status != http.StatusBadRequest || ce.Param != tc.param {
					t.Fatalf("Identify: %v, want a 400 with param %s", err, tc.param)
				}
				return
			}
			if err != nil || id != tc.want || src != tc.wantSrc {
				t.Errorf("Identify = %q, %q, %v; want %q, %q", id, src, err, tc.want, tc.wantSrc)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestResolve(t *testing.T) {
	r := session.Rules{
		Global: session.Budget{ToolCalls: 100, Tokens: 1000, USD: 5, IdleTTL: time.Hour},
		Models: []session.ModelRule{
			{Pattern: "deepseek-v4-pro*", Override: session.Override{USD: ptr(2.0)}},
			{Pattern: "deepseek-*", Override: session.Override{ToolCalls: ptr(int64(50))}},
		},
		Projects: map[string]session.Override{"team-a": {ToolCalls: ptr(int64(0)), IdleTTL: ptr(2 * time.Hour)}},
	}
	for _, tc := range []struct {
		project, model string
		want           session.Budget
	}{
		{"", "gpt-5", r.Global},
		{"", "deepseek-v4-pro", session.Budget{ToolCalls: 100, Tokens: 1000, USD: 2, IdleTTL: time.Hour}},
		{"other", "deepseek-v4-flash", session.Budget{ToolCalls: 50, Tokens: 1000, USD: 5, IdleTTL: time.Hour}},
		{"team-a", "deepseek-v4-flash", session.Budget{ToolCalls: 0, Tokens: 1000, USD: 5, IdleTTL: 2 * time.Hour}},
	} {
		if got := r.Resolve(tc.project, tc.model); got != tc.want {
			t.Errorf("Resolve(%q, %q) = %+v, want %+v", tc.project, tc.model, got, tc.want)
		}
	}
}

func TestLowered(t *testing.T) {
	base := session.Budget{ToolCalls: 10, Tokens: 0, USD: 1.5, IdleTTL: time.Hour}
	for _, tc := range []struct {
		name  string
		hdr   map[string]string
		want  session.Budget
		param string
	}{
		{name: "no header", want: base},
		{name: "every budget lowered", hdr: map[string]string{session.HeaderMaxToolCalls: "3", session.HeaderMaxTokens: "500",
			session.HeaderMaxUSD: "0.25", session.HeaderIdleTTL: "5m"}, want: session.Budget{ToolCalls: 3, Tokens: 500, USD: 0.25, IdleTTL: 5 * time.Minute}},
		{name: "equal is allowed", hdr: map[string]string{session.HeaderMaxToolCalls: "10"}, want: base},
		{name: "raised", hdr: map[string]string{session.HeaderMaxToolCalls: "11"}, param: session.HeaderMaxToolCalls},
		{name: "unlimited under a limit", hdr: map[string]string{session.HeaderMaxUSD: "0"}, param: session.HeaderMaxUSD},
		{name: "0 where unlimited", hdr: map[string]string{session.HeaderMaxTokens: "0"}, want: base},
		{name: "a longer ttl", hdr: map[string]string{session.HeaderIdleTTL: "2h"}, param: session.HeaderIdleTTL},
		{name: "not a number", hdr: map[string]string{session.HeaderMaxTokens: "lots"}, param: session.HeaderMaxTokens},
		{name: "negative", hdr: map[string]string{session.HeaderMaxToolCalls: "-1"}, param: session.HeaderMaxToolCalls},
		{name: "not an amount", hdr: map[string]string{session.HeaderMaxUSD: "NaN"}, param: session.HeaderMaxUSD},
		{name: "a ttl without a unit", hdr: map[string]string{session.HeaderIdleTTL: "30"}, param: session.HeaderIdleTTL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := http.Header{}
			for k, v := range tc.hdr {
				hdr.Set(k, v)
			}
			got, err := base.Lowered(hdr)
			if tc.param != "" {
				var ce *chat.Error
				if !errors.As(err, &ce) || ce.Status != http.StatusBadRequest || ce.Param != tc.param {
					t.Fatalf("Lowered: %v, want a 400 with param %s", err, tc.param)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Lowered = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestApplyAndSpent(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	b := session.Budget{ToolCalls: 2, Tokens: 1000, USD: 0.01, IdleTTL: time.Hour}
	var s session.State
	call := session.Charge{Counters: session.Counters{Requests: 1, ToolCalls: 1, PromptTokens: 100, CacheReadTokens: 60, CompletionTokens: 10, USD: 0.001}, Budget: b}
	s = s.Apply(call, t0)
	want := session.State{Counters: session.Counters{Requests: 1, ToolCalls: 1, PromptTokens: 100, CacheReadTokens: 60, CompletionTokens: 10, USD: 0.001},
		Started: t0, Last: t0, Decayed: 0.001, Budget: b}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Fatalf("after the first charge (-want +got):\n%s", diff)
	}
	if got := s.Tokens(); got != 50 {
		t.Errorf("Tokens = %d, want 40 misses + 10 completion", got)
	}
	if got := s.MissRatio(); got != 0.4 {
		t.Errorf("MissRatio = %v, want 0.4", got)
	}
	for _, tc := range []struct {
		name string
		next session.Next
		b    session.Budget
		want session.Cap
	}{
		{name: "room left", next: session.Next{Tokens: 100, USD: 0.001}, b: b},
		{name: "the prompt would cross the tokens", next: session.Next{Tokens: 951}, b: b, want: session.CapTokens},
		{name: "exactly the tokens left", next: session.Next{Tokens: 950}, b: b},
		{name: "the prompt would cross the dollars", next: session.Next{USD: 0.0091}, b: b, want: session.CapUSD},
		{name: "a lowered call budget is reached", b: session.Budget{ToolCalls: 1}, want: session.CapToolCalls},
		{name: "unlimited", next: session.Next{Tokens: 1 << 40, USD: 1e9}, b: session.Budget{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := s.Spent(tc.b, tc.next); got != tc.want {
				t.Errorf("Spent(%+v, %+v) = %q, want %q", tc.b, tc.next, got, tc.want)
			}
		})
	}
	// The second call reaches the call budget: the cap is recorded and
	// stays, whatever budget later requests bring.
	s = s.Apply(call, t0.Add(RateWindowTenth))
	if s.Capped != session.CapToolCalls || s.Requests != 2 || s.Started != t0 {
		t.Fatalf("after the second charge: %+v, want capped by tool calls", s)
	}
	if got := s.Spent(session.Budget{}, session.Next{}); got != session.CapToolCalls {
		t.Errorf("a capped session with no budget: Spent = %q, want the recorded cap", got)
	}
	s = s.Apply(session.Charge{Cap: session.CapStopped, Budget: b}, t0.Add(time.Minute))
	if s.Capped != session.CapToolCalls {
		t.Errorf("a later cap replaced the first: %q", s.Capped)
	}
	if s.Outcome() != session.OutcomeCappedToolCalls {
		t.Errorf("Outcome = %q", s.Outcome())
	}
}

// RateWindowTenth is a tenth of the rate's time constant.
const RateWindowTenth = session.RateWindow / 10

func TestSpendRateDecays(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	var s session.State
	// A dollar a minute for an hour: the rate settles at 60 $/h.
	for i := range 60 {
		s = s.Apply(session.Charge{Counters: session.Counters{USD: 1}}, t0.Add(time.Duration(i)*time.Minute))
	}
	if r := s.RateUSDPerHour(); r < 55 || r > 70 {
		t.Errorf("rate after an hour at $1/min: %.1f $/h, want about 60", r)
	}
	// An hour idle: the rate is nearly gone, the total is not.
	s = s.Apply(session.Charge{}, t0.Add(2*time.Hour))
	if r := s.RateUSDPerHour(); r > 0.2 || s.USD != 60 {
		t.Errorf("after an idle hour: rate %.2f $/h, total %v; want under 0.2 and 60", r, s.USD)
	}
}

func TestExpired(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	s := session.State{}.Apply(session.Charge{Budget: session.Budget{IdleTTL: time.Minute}}, t0)
	if s.Expired(t0.Add(59*time.Second)) || !s.Expired(t0.Add(time.Minute)) {
		t.Errorf("a session idle for 1m with a 1m TTL: expired %v at 59s, %v at 60s; want false, true",
			s.Expired(t0.Add(59*time.Second)), s.Expired(t0.Add(time.Minute)))
	}
}

func TestNotice(t *testing.T) {
	b := session.Budget{ToolCalls: 1, Tokens: 2000, USD: 2.5}
	for _, tc := range []struct {
		c    session.Cap
		want string
	}{
		{session.CapToolCalls, "1 tool call"}, {session.CapTokens, "2000 tokens"}, {session.CapUSD, "US$2.50"}, {session.CapStopped, "stopped by an operator"},
	} {
		text, shown := session.Notice(tc.c, b)
		if !strings.Contains(text, "("+tc.want+")") || !strings.Contains(shown, tc.want) || !strings.Contains(text, "final answer") {
			t.Errorf("Notice(%s) = %q / %q, want both to name %q", tc.c, text, shown, tc.want)
		}
	}
}
