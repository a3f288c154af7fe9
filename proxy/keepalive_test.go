package proxy_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/phasegate/phasegate/internal/redistest"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
	"github.com/phasegate/phasegate/store"
)

// The logs of resumable streams, in memory and on a real redis-server,
// under streams that go quiet for longer than RESUME_TTL.

var eventLogs = []string{"memory", "redis"}

// logConfig is the configuration of a gateway in front of usrv whose
// RESUME_TTL is ttl, with the defaults of the binary's timeouts that
// matter here.
func logConfig(usrv *httptest.Server, ttl time.Duration) proxy.Config {
	cfg := config(usrv)
	cfg.Resume.TTL = ttl
	cfg.Timeouts.Idle = 30 * time.Second // the quiet upstream is not cut as idle
	cfg.Timeouts.Request = 30 * time.Second
	return cfg
}

// logGateway is a gateway of cfg whose event log (kind: memory or redis)
// forgets a stream storeTTL after its last append. A storeTTL shorter
// than RESUME_TTL is a store that loses logs under the gateway (a Redis
// flushed or restarted).
func logGateway(t *testing.T, kind string, cfg proxy.Config, storeTTL time.Duration) *httptest.Server {
	t.Helper()
	var streams proxy.EventLog = store.NewMemoryStreams(storeTTL)
	if kind == "redis" {
		srv := redistest.Start(t)
		// REDIS_TIMEOUT is generous: these tests are about quiet
		// streams, not a slow Redis, and a loaded machine is slow.
		r, err := store.OpenRedisWith(srv.URL, store.RedisOptions{Followers: store.DefaultFollowers, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		streams = store.NewRedisStreams(r, storeTTL)
	}
	h, err := proxy.New(cfg, proxy.Options{Streams: streams})
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	t.Cleanup(h.Close) // after the server below is closed
	return newTestServer(t, h)
}

// quietReply is a stream of a role and a content chunk, then nothing at
// all for quiet (no event, no comment), then a content chunk, a finish
// and [DONE].
func quietReply(quiet time.Duration) sim.Reply {
	evs := sim.NewStream(testModel).Role().Content("before ").Events()
	rest := sim.NewStream(testModel).Content("after").Finish("stop").Done().Events()
	rest[0].Delay = quiet
	return sim.Reply{Events: append(evs, rest...)}
}

// startQuiet starts resumable stream id through a gateway with an event
// log of kind (resume TTL ttl, entries kept storeTTL) in front of an
// upstream quiet for quiet after two events, and returns the gateway, the
// answer and those two events.
func startQuiet(t *testing.T, kind string, ttl, storeTTL, quiet time.Duration, id string) (*httptest.Server, *http.Response, []idEvent) {
	t.Helper()
	_, usrv := proxytest.NewServer(t, proxytest.Script(quietReply(quiet)))
	gw := logGateway(t, kind, logConfig(usrv, ttl), storeTTL)
	resp := post(t, testContext(t), gw, "/v1/chat/completions", chatBody(true), resumableHeader(id))
	first := readIDEvents(t, resp.Body, 2)
	if len(first) != 2 {
		t.Fatalf("before the quiet: %v", first)
	}
	return gw, resp, first
}

func eventsPath(id string, after int) string {
	return fmt.Sprintf("/v1/phasegate/requests/%s/events?starting_after=%d", id, after)
}

// A stream quiet for four times RESUME_TTL keeps its log: a follower that
// started before the quiet and one that starts two and a half TTLs into
// it both get every event of the stream and [DONE]. The log is kept
// every TTL/3, so the TTL leaves the keep-alive two thirds of a second of
// slack: a 400 ms TTL (267 ms of slack) lost the log once on a machine
// whose two cores ran four race-enabled builds beside the tests.
func TestResumeQuietStreamKeepsItsLog(t *testing.T) {
	for _, kind := range eventLogs {
		t.Run(kind, func(t *testing.T) {
			const ttl = time.Second
			const id = "req-quiet"
			ctx := testContext(t)
			gw, resp, live := startQuiet(t, kind, ttl, ttl, 4*ttl, id)
			early := get(t, ctx, gw, eventsPath(id, 0), resumableHeader(id))
			time.Sleep(5 * ttl / 2) // no event for 2.5 TTLs: only the gateway keeps the log
			late := get(t, ctx, gw, eventsPath(id, 0), resumableHeader(id))
			if late.StatusCode != http.StatusOK {
				t.Fatalf("resume 2.5 TTLs into the quiet: %d %s; want the log kept while the stream runs", late.StatusCode, readAll(t, late.Body))
			}
			live = append(live, readIDEvents(t, resp.Body, 0)...)
			if live[len(live)-1].data != "[DONE]" || content(t, live) != "before after" {
				t.Fatalf("live stream: %v", live)
			}
			for name, r := range map[string]*http.Response{"before the quiet": early, "in the quiet": late} {
				if got := readIDEvents(t, r.Body, 0); fmt.Sprint(got) != fmt.Sprint(live) {
					t.Errorf("resume started %s got %v, want every event of the stream %v", name, got, live)
				}
			}
		})
	}
}

// A follower whose log the store forgets while the stream runs ends with
// an in-band resume_expired error and [DONE], not a silent end; the
// original client still gets the whole stream.
func TestResumeFollowerOfForgottenLogEnds(t *testing.T) {
	for _, kind := range eventLogs {
		t.Run(kind, func(t *testing.T) {
			const storeTTL = 400 * time.Millisecond
			const id = "req-forgotten"
			ctx := testContext(t)
			gw, resp, first := startQuiet(t, kind, time.Minute, storeTTL, 3*storeTTL, id)
			f := get(t, ctx, gw, eventsPath(id, 0), resumableHeader(id))
			if f.StatusCode != http.StatusOK {
				t.Fatalf("resume: %d %s", f.StatusCode, readAll(t, f.Body))
			}
			got := readIDEvents(t, f.Body, 0)
			if len(got) != 4 || fmt.Sprint(got[:2]) != fmt.Sprint(first) ||
				!strings.Contains(got[2].data, `"code":"resume_expired"`) || !strings.HasPrefix(got[2].data, `{"error":{`) || got[3].data != "[DONE]" {
				t.Errorf("resume of a forgotten log got %v; want the 2 events kept, a resume_expired error, [DONE]", got)
			}
			if rest := readIDEvents(t, resp.Body, 0); len(rest) == 0 || rest[len(rest)-1].data != "[DONE]" || content(t, append(first, rest...)) != "before after" {
				t.Errorf("the original client got %v after the quiet; want the rest and [DONE]", rest)
			}
		})
	}
}

// Cancelling a stream that already finished changes nothing: its replay
// is still the whole stream, 200, not a 409.
func TestResumeReplayAfterCancelOfFinishedStream(t *testing.T) {
	for _, kind := range eventLogs {
		t.Run(kind, func(t *testing.T) {
			reply, want := slowStream(5, time.Millisecond)
			_, usrv := proxytest.NewServer(t, proxytest.Script(reply))
			gw := logGateway(t, kind, logConfig(usrv, time.Minute), time.Minute)
			ctx := testContext(t)
			const id = "req-finished"
			live := readIDEvents(t, post(t, ctx, gw, "/v1/chat/completions", chatBody(true), resumableHeader(id)).Body, 0)
			if len(live) == 0 || live[len(live)-1].data != "[DONE]" || content(t, live) != want {
				t.Fatalf("live stream: %v", live)
			}
			if r := post(t, ctx, gw, "/v1/phasegate/requests/"+id+"/cancel", "", nil); r.StatusCode != http.StatusOK {
				t.Fatalf("cancel of a finished stream: %d %s", r.StatusCode, readAll(t, r.Body))
			}
			r := get(t, ctx, gw, eventsPath(id, 0), resumableHeader(id))
			if r.StatusCode != http.StatusOK {
				t.Fatalf("replay after the cancel: %d %s; want 200 and the whole stream", r.StatusCode, readAll(t, r.Body))
			}
			if got := readIDEvents(t, r.Body, 0); fmt.Sprint(got) != fmt.Sprint(live) {
				t.Errorf("replay after the cancel got %v, want %v", got, live)
			}
		})
	}
}

// Without REQUEST_TIMEOUT a resume follows a stream for at most
// RESUME_TTL: one that reaches that limit before the stream ends says so
// in-band, with the position to resume after, then [DONE]; a resume from
// there gets the rest.
func TestResumeFollowLimitEndsWithError(t *testing.T) {
	for _, kind := range eventLogs {
		t.Run(kind, func(t *testing.T) {
			const ttl = 400 * time.Millisecond
			_, usrv := proxytest.NewServer(t, proxytest.Script(quietReply(2*ttl)))
			cfg := logConfig(usrv, ttl)
			cfg.Timeouts.Request = 0
			gw := logGateway(t, kind, cfg, ttl)
			ctx := testContext(t)
			const id = "req-follow-limit"
			resp := post(t, ctx, gw, "/v1/chat/completions", chatBody(true), resumableHeader(id))
			first := readIDEvents(t, resp.Body, 2)
			if len(first) != 2 {
				t.Fatalf("before the quiet: %v", first)
			}
			got := readIDEvents(t, get(t, ctx, gw, eventsPath(id, 0), resumableHeader(id)).Body, 0)
			if len(got) != 4 || fmt.Sprint(got[:2]) != fmt.Sprint(first) || got[3].data != "[DONE]" ||
				!strings.Contains(got[2].data, `"code":"resume_timeout"`) || !strings.Contains(got[2].data, "starting_after=2") {
				t.Fatalf("resume past its limit got %v; want the 2 events, a resume_timeout error naming starting_after=2, [DONE]", got)
			}
			live := append(first, readIDEvents(t, resp.Body, 0)...)
			rest := readIDEvents(t, get(t, ctx, gw, eventsPath(id, 2), resumableHeader(id)).Body, 0)
			if fmt.Sprint(rest) != fmt.Sprint(live[2:]) {
				t.Errorf("resume after 2 got %v, want %v", rest, live[2:])
			}
		})
	}
}
