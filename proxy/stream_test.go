package proxy_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// A chunk with fields no OpenAI type declares, odd spacing inside values
// and characters encoding/json would escape: all must reach the client
// byte for byte.
const vendorChunk = `{"id":"chatcmpl-proxytest","object":"chat.completion.chunk","created":1767225600,"model":"gpt-test",` +
	`"choices":[{"index":0,"delta":{"content":"<b>&amp;</b> \u00e9","x_delta":[1, 2.50, null]},"logprobs":{"content":[]},"finish_reason":null}],` +
	`"x_vendor":{"nested": {"deep":true}},"service_tier":"default"}`

func TestStreamForwardsEventsByteForByte(t *testing.T) {
	t.Parallel()
	bigArgs := `{"path":"` + strings.Repeat("a", 1<<20) + `"}`
	keepAlives := sim.NewStream(testModel).Role()
	for range 400 { // more than go-openai's default limit of 300 empty lines
		keepAlives.KeepAlive()
	}
	keepAlives.Content("still ", "here").Finish("stop").Done()

	tests := []struct {
		name     string
		events   []sim.Event
		comments int
	}{
		{
			name: "content reasoning usage and vendor fields",
			events: sim.NewStream(testModel).Role().Reasoning("Think ", "hard.").Content("Hel", "lo").
				Raw(vendorChunk).Finish("stop").
				Usage(10, 5, map[string]any{"prompt_cache_hit_tokens": 8, "prompt_cache_miss_tokens": 2}).Done().Events(),
		},
		{
			name:   "a 1 MiB tool call argument in one event",
			events: sim.NewStream(testModel).Role().ToolCall(0, "call_1", "write", bigArgs).Finish("tool_calls").Done().Events(),
		},
		{
			name:   "an event of several data lines",
			events: sim.NewStream(testModel).Raw("{\"id\":\"x\",\n\"object\":\"chat.completion.chunk\",\n\"choices\":[]}").Finish("stop").Done().Events(),
		},
		{
			name:     "keep-alive comments between events",
			events:   keepAlives.Events(),
			comments: 400,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, gw := startUpstream(t, proxytest.Script(sim.Reply{Events: tt.events}))
			resp := post(t, testContext(t), gw, "/v1/chat/completions", chatBody(true), nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, want 200", resp.StatusCode)
			}
			if got, want := resp.Header.Get("Content-Type"), "text/event-stream; charset=utf-8"; got != want {
				t.Errorf("Content-Type = %q, want %q", got, want)
			}
			items := readSSE(t, resp.Body)
			if diff := cmp.Diff(dataEvents(tt.events), dataOf(items)); diff != "" {
				t.Errorf("events the client got differ from the upstream's (-want +got):\n%s", diff)
			}
			comments := 0
			for _, it := range items {
				if it.Comment != "" {
					comments++
					if it.Comment != ": keep-alive" {
						t.Errorf("comment = %q, want %q", it.Comment, ": keep-alive")
					}
				}
			}
			if comments != tt.comments {
				t.Errorf("client got %d comments, want %d", comments, tt.comments)
			}
		})
	}
}

// TestStreamFlushesEachEvent proves an event reaches the client while the
// upstream still holds the stream open: nothing waits for a buffer to fill.
func TestStreamFlushesEachEvent(t *testing.T) {
	t.Parallel()
	events := sim.NewStream(testModel).Role().Content("first").Events()
	up, gw := startUpstream(t, proxytest.Script(sim.Reply{Events: events, Hang: true}))
	resp := post(t, testContext(t), gw, "/v1/chat/completions", chatBody(true), nil)
	sr := newSSEReader(resp.Body)
	for i, want := range dataEvents(events) {
		got, ok, err := sr.next()
		if err != nil || !ok {
			t.Fatalf("event %d: ok=%v err=%v, want the event while the upstream is still open", i, ok, err)
		}
		if got.Data != want {
			t.Errorf("event %d = %q, want %q", i, got.Data, want)
		}
	}
	resp.Body.Close()
	waitCancelled(t, up)
}

// endless returns n keep-alive comments, one every 10ms: far longer than
// any timeout under test.
func endless(n int) []sim.Event {
	evs := make([]sim.Event, n)
	for i := range evs {
		evs[i] = sim.Event{Comment: ": keep-alive", Delay: 10 * time.Millisecond}
	}
	return evs
}

// TestStreamEndings checks how a stream ends: [DONE] is forwarded; a
// stream cut short, gone idle, never started or carrying an oversized
// event gets an in-band OpenAI-style error event and then a clean end.
func TestStreamEndings(t *testing.T) {
	t.Parallel()
	head := sim.NewStream(testModel).Role().Content("partial ", "answer")
	// Each stream is built once: its id is fresh, so a second build would
	// not compare equal.
	done := sim.NewStream(testModel).Role().Content("hi").Finish("stop").Done()
	finished := sim.NewStream(testModel).Role().Content("hi").Finish("length")
	large := sim.NewStream(testModel).Role().Content("ok")
	beforeLarge := large.Events()
	large.Content(strings.Repeat("x", 8192)).Finish("stop").Done()
	tests := []struct {
		name  string
		cfg   func(*proxy.Config)
		reply sim.Reply
		// want is the data the client gets before any error event.
		want []string
		// wantCode is the code of the final in-band error; "" means none.
		wantCode string
		// wantCancel means the gateway must abandon the upstream.
		wantCancel bool
	}{
		{
			name:  "done is forwarded",
			reply: done.Reply(),
			want:  dataEvents(done.Events()),
		},
		{
			name:  "a finish reason without done ends cleanly",
			reply: finished.Reply(),
			want:  dataEvents(finished.Events()),
		},
		{
			name:     "a clean end without done or finish reason is truncated",
			reply:    sim.Reply{Events: head.Events()},
			want:     dataEvents(head.Events()),
			wantCode: "upstream_truncated",
		},
		{
			name:     "a stream cut mid-way is truncated",
			reply:    sim.Reply{Events: head.Events(), Cut: true},
			want:     dataEvents(head.Events()),
			wantCode: "upstream_truncated",
		},
		{
			name:       "keep-alives do not hold an idle stream open",
			cfg:        func(c *proxy.Config) { c.Timeouts.Idle = 200 * time.Millisecond },
			reply:      sim.Reply{Events: append(head.Events(), endless(2000)...)},
			want:       dataEvents(head.Events()),
			wantCode:   "upstream_idle_timeout",
			wantCancel: true,
		},
		{
			name:       "idle bound alone, without a first-byte bound",
			cfg:        func(c *proxy.Config) { c.Timeouts = proxy.Timeouts{Idle: 200 * time.Millisecond} },
			reply:      sim.Reply{Events: append(head.Events(), endless(2000)...)},
			want:       dataEvents(head.Events()),
			wantCode:   "upstream_idle_timeout",
			wantCancel: true,
		},
		{
			name:       "keep-alives do not count as a first event",
			cfg:        func(c *proxy.Config) { c.Timeouts.FirstByte = 200 * time.Millisecond },
			reply:      sim.Reply{Events: endless(2000)},
			wantCode:   "upstream_timeout",
			wantCancel: true,
		},
		{
			name:     "an event over the size limit",
			cfg:      func(c *proxy.Config) { c.MaxEventBytes = 4096 },
			reply:    large.Reply(),
			want:     dataEvents(beforeLarge),
			wantCode: "upstream_event_too_large",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up, usrv := proxytest.NewServer(t, proxytest.Script(tt.reply))
			cfg := config(usrv)
			cfg.Timeouts = proxy.Timeouts{FirstByte: wait, Idle: wait}
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			gw := newGateway(t, cfg)
			resp := post(t, testContext(t), gw, "/v1/chat/completions", chatBody(true), nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, want 200 (the stream started)", resp.StatusCode)
			}
			got := dataOf(readSSE(t, resp.Body)) // fails unless the body ends cleanly
			var gotCode string
			if tt.wantCode != "" {
				// A failure ends as every stream: its error, then [DONE].
				if n := len(got); n == 0 || got[n-1] != "[DONE]" {
					t.Errorf("a failed stream ends with %q, want [DONE] after its error", got)
				} else {
					got = got[:n-1]
				}
			}
			if n := len(got); n > 0 && strings.HasPrefix(got[n-1], `{"error":`) {
				var e struct {
					Error map[string]any `json:"error"`
				}
				if err := json.Unmarshal([]byte(got[n-1]), &e); err != nil {
					t.Fatalf("error event %q: %v", got[n-1], err)
				}
				checkErrorObject(t, e.Error)
				gotCode, _ = e.Error["code"].(string)
				got = got[:n-1]
			}
			if gotCode != tt.wantCode {
				t.Errorf("final error code = %q, want %q", gotCode, tt.wantCode)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("events before the error (-want +got):\n%s", diff)
			}
			if tt.wantCancel {
				waitCancelled(t, up)
			}
		})
	}
}

// checkErrorObject checks the inside of an OpenAI-style error body: exactly
// message, type, param and code, with a message and a type.
func checkErrorObject(t *testing.T, e map[string]any) {
	t.Helper()
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e[k]; !ok {
			t.Errorf("error object %v lacks %q", e, k)
		}
	}
	if len(e) != 4 {
		t.Errorf("error object %v has %d fields, want 4", e, len(e))
	}
	if m, _ := e["message"].(string); m == "" {
		t.Errorf("error object %v has no message", e)
	}
	if ty, _ := e["type"].(string); ty == "" {
		t.Errorf("error object %v has no type", e)
	}
}
