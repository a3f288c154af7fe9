package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/phasegate/phasegate/internal/redistest"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
	"github.com/phasegate/phasegate/store"
)

// Two gateway replicas (two httptest servers built with this package)
// share one real redis-server, as two processes behind a load balancer
// would: each has its own connections to it.

// replica builds one gateway on the Redis at url with cfg.
func replica(t *testing.T, url string, cfg proxy.Config) *httptest.Server {
	t.Helper()
	return replicaTB(t, url, cfg)
}

func replicaTB(t testing.TB, url string, cfg proxy.Config) *httptest.Server {
	t.Helper()
	return replicaFollowing(t, url, cfg, store.DefaultFollowers)
}

// replicaFollowing is a replica that follows at most followers resumes
// at once. Its REDIS_TIMEOUT is generous: these tests are about what
// replicas share, not a slow Redis, and on a loaded machine a hundred
// lookups at once through the pool outlast the 100 ms default, open the
// breaker and fail what follows with a 503.
func replicaFollowing(t testing.TB, url string, cfg proxy.Config, followers int) *httptest.Server {
	t.Helper()
	r, err := store.OpenRedisWith(url, store.RedisOptions{Followers: followers, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	h, err := proxy.New(cfg, proxy.Options{
		Thinking:  store.NewReasoning(r, 1<<20, time.Hour),
		Limiter:   store.NewRedisLimiter(r),
		Streams:   store.NewRedisStreams(r, time.Minute),
		TwoStage:  protocol.NewTwoStage(protocol.TwoStageConfig{}, nil),
		Responses: store.NewRedisResponses(r, time.Hour, 1<<20),
	})
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	t.Cleanup(h.Close) // after the server below is closed
	return newTestServer(t, h)
}

// replicas starts Redis and two replicas A and B of cfg.
func replicas(t *testing.T, cfg proxy.Config) (a, b *httptest.Server, srv *redistest.Server) {
	t.Helper()
	srv = redistest.Start(t)
	return replica(t, srv.URL, cfg), replica(t, srv.URL, cfg), srv
}

func TestReplicasShareReasoning(t *testing.T) {
	up, usrv := proxytest.NewServer(t, thDeepSeek)
	a, b, _ := replicas(t, proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}})
	ctx := testContext(t)
	tools := `"tools":[{"type":"function","function":{"name":"list_dir","parameters":{"type":"object","properties":{}}}}]`
	first := post(t, ctx, a, "/v1/chat/completions", `{"model":"`+thModel+`","stream":true,`+tools+`,"messages":[{"role":"user","content":"List the files."}]}`, nil)
	if got := dataOf(readSSE(t, first.Body)); len(got) == 0 || got[len(got)-1] != "[DONE]" {
		t.Fatalf("turn 1 on A: %v", got)
	}
	// The agent's next request lands on B, without the reasoning.
	history := `[{"role":"user","content":"List the files."},` +
		`{"role":"assistant","content":"","tool_calls":[{"id":"` + thCallID + `","type":"function","function":{"name":"list_dir","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"` + thCallID + `","content":"a.go"}]`
	second := post(t, ctx, b, "/v1/chat/completions", `{"model":"`+thModel+`",`+tools+`,"messages":`+history+`}`, nil)
	body := readAll(t, second.Body)
	if second.StatusCode != http.StatusOK {
		t.Fatalf("turn 2 on B: %d %s", second.StatusCode, body)
	}
	if got := second.Header.Get("X-Phasegate-Reasoning-Restored"); got != "1" {
		t.Errorf("turn 2 on B: X-Phasegate-Reasoning-Restored = %q, want 1 (what A served)", got)
	}
	rec := up.Received()
	if got := thSentReasoning(t, rec[len(rec)-1].Body); len(got) != 1 || thDeref(got[0]) != thReasoning {
		t.Errorf("B sent upstream reasoning_content %v, want %q", got, thReasoning)
	}
}

// slowStream is a stream of n content events, each after a short delay,
// so a client can leave in the middle.
func slowStream(n int, delay time.Duration) (sim.Reply, string) {
	s := sim.NewStream(testModel).Role()
	var want strings.Builder
	for i := range n {
		piece := fmt.Sprintf("w%d ", i)
		want.WriteString(piece)
		s.Delay(delay).Content(piece)
	}
	return s.Finish("stop").Done().Reply(), want.String()
}

// idEvent is one event read with its id line.
type idEvent struct {
	id   int
	data string
}

// readIDEvents reads events with "id:" lines until the stream ends, or
// only the first n when n > 0.
func readIDEvents(t *testing.T, r io.Reader, n int) []idEvent {
	t.Helper()
	var out []idEvent
	cur := idEvent{id: -1}
	sc := newSSEReader(r).sc
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			cur.id, _ = strconv.Atoi(strings.TrimPrefix(line, "id: "))
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		case line == "" && cur.data != "":
			out = append(out, cur)
			cur = idEvent{id: -1}
			if len(out) == n {
				return out
			}
		}
	}
	return out
}

// content joins the content deltas of chunk events.
func content(t *testing.T, evs []idEvent) string {
	t.Helper()
	var b strings.Builder
	for _, ev := range evs {
		if ev.data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatalf("event %d: %v: %s", ev.id, err, ev.data)
		}
		for _, ch := range c.Choices {
			b.WriteString(ch.Delta.Content)
		}
	}
	return b.String()
}

func ids(evs []idEvent) []int {
	out := make([]int, len(evs))
	for i, ev := range evs {
		out[i] = ev.id
	}
	return out
}

func resumableHeader(id string) http.Header {
	return http.Header{"X-Phasegate-Resumable": {"true"}, "X-Phasegate-Event-Ids": {"true"}, "X-Request-Id": {id}}
}

func get(t *testing.T, ctx context.Context, gw *httptest.Server, path string, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, gw.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := gw.Client().Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestReplicasResumeOnAnother(t *testing.T) {
	reply, want := slowStream(30, 10*time.Millisecond)
	up, usrv := proxytest.NewServer(t, proxytest.Script(reply))
	a, b, _ := replicas(t, config(usrv))
	ctx := testContext(t)
	const id = "req-resume-1"
	clientCtx, drop := context.WithCancel(ctx)
	resp := post(t, clientCtx, a, "/v1/chat/completions", chatBody(true), resumableHeader(id))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Phasegate-Resumable") != "true" {
		t.Fatalf("start on A: %d, X-Phasegate-Resumable %q", resp.StatusCode, resp.Header.Get("X-Phasegate-Resumable"))
	}
	seen := readIDEvents(t, resp.Body, 4)
	drop() // the laptop lid closes
	resp.Body.Close()

	last := seen[len(seen)-1].id
	rest := get(t, ctx, b, fmt.Sprintf("/v1/phasegate/requests/%s/events?starting_after=%d", id, last), http.Header{"X-Phasegate-Event-Ids": {"true"}})
	if rest.StatusCode != http.StatusOK {
		t.Fatalf("resume on B: %d %s", rest.StatusCode, readAll(t, rest.Body))
	}
	all := append(seen, readIDEvents(t, rest.Body, 0)...)
	for i, ev := range all {
		if ev.id != i+1 {
			t.Fatalf("event %d has id %d; want ids 1, 2, 3... with none lost or repeated: %v", i, ev.id, ids(all))
		}
	}
	if all[len(all)-1].data != "[DONE]" {
		t.Errorf("the resumed stream ends with %q, want [DONE]", all[len(all)-1].data)
	}
	if got := content(t, all); got != want {
		t.Errorf("content across A and B = %q, want %q", got, want)
	}
	if n := len(up.Received()); n != 1 {
		t.Errorf("upstream calls = %d, want 1: a resume is not paid for again", n)
	}
	// A replay from the start, on A this time, is the same stream.
	again := readIDEvents(t, get(t, ctx, a, "/v1/phasegate/requests/"+id+"/events", http.Header{"X-Phasegate-Event-Ids": {"true"}}).Body, 0)
	if fmt.Sprint(again) != fmt.Sprint(all) {
		t.Errorf("replay from 0 differs from the live events:\n got %v\nwant %v", again, all)
	}
}

func TestReplicasCancelOnAnother(t *testing.T) {
	events := sim.NewStream(testModel).Role().Content("one ", "two ").Events()
	up, usrv := proxytest.NewServer(t, proxytest.Script(sim.Reply{Events: events, Hang: true}))
	cfg := config(usrv)
	cfg.Providers[0].APIKey = "sk-upstream"
	cfg.ClientKeys = []proxy.ClientKey{{Key: "sk-alice"}, {Key: "sk-bob"}}
	a, b, _ := replicas(t, cfg)
	ctx := testContext(t)
	alice, bob := http.Header{"Authorization": {"Bearer sk-alice"}}, http.Header{"Authorization": {"Bearer sk-bob"}}
	const id = "req-cancel-1"
	h := resumableHeader(id)
	h.Set("Authorization", "Bearer sk-alice")
	resp := post(t, ctx, a, "/v1/chat/completions", chatBody(true), h)
	seen := readIDEvents(t, resp.Body, 2)
	if len(seen) != 2 {
		t.Fatalf("read %v before the cancel", seen)
	}
	if r := post(t, ctx, b, "/v1/phasegate/requests/"+id+"/cancel", "", bob); r.StatusCode != http.StatusNotFound {
		t.Errorf("cancel by another client key: %d, want 404", r.StatusCode)
	}
	sent := time.Now()
	if r := post(t, ctx, b, "/v1/phasegate/requests/"+id+"/cancel", "", alice); r.StatusCode != http.StatusOK {
		t.Fatalf("cancel on B: %d %s", r.StatusCode, readAll(t, r.Body))
	}
	select {
	case <-up.Cancelled():
		t.Logf("A's upstream closed %v after the cancel on B", time.Since(sent))
	case <-time.After(time.Second):
		t.Fatal("A's upstream still open a second after the cancel on B")
	}
	rest := readIDEvents(t, resp.Body, 0)
	var finishes int
	for _, ev := range rest {
		finishes += strings.Count(ev.data, `"finish_reason":"`)
	}
	if finishes != 1 || len(rest) == 0 || rest[len(rest)-1].data != "[DONE]" {
		t.Errorf("the cancelled stream ended with %v; want one finish and [DONE]", rest)
	}
	r := get(t, ctx, b, "/v1/phasegate/requests/"+id+"/events", alice)
	if body := readAll(t, r.Body); r.StatusCode != http.StatusConflict || !strings.Contains(string(body), `"code":"request_cancelled"`) {
		t.Errorf("resume after cancel: %d %s; want 409 request_cancelled", r.StatusCode, body)
	}
}

func TestReplicasShareRateLimit(t *testing.T) {
	_, usrv := proxytest.NewServer(t, proxytest.Simulated())
	cfg := config(usrv)
	cfg.RateLimits = proxy.RateLimits{KeyRequests: 2, FailOpen: true}
	a, b, _ := replicas(t, cfg)
	ctx := testContext(t)
	key := http.Header{"Authorization": {"Bearer sk-client"}}
	for i, gw := range []*httptest.Server{a, b} {
		r := post(t, ctx, gw, "/v1/chat/completions", chatBody(false), key)
		readAll(t, r.Body)
		if r.StatusCode != http.StatusOK || r.Header.Get("X-Ratelimit-Limit-Requests") != "2" || r.Header.Get("X-Ratelimit-Remaining-Requests") != strconv.Itoa(1-i) {
			t.Fatalf("request %d: %d, limit %q remaining %q; want 200, 2, %d", i+1, r.StatusCode,
				r.Header.Get("X-Ratelimit-Limit-Requests"), r.Header.Get("X-Ratelimit-Remaining-Requests"), 1-i)
		}
	}
	r := post(t, ctx, a, "/v1/chat/completions", chatBody(false), key)
	body := readAll(t, r.Body)
	var e struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	if r.StatusCode != http.StatusTooManyRequests || e.Error.Code != "rate_limit_exceeded" || e.Error.Type != "requests" || e.Error.Message == "" {
		t.Fatalf("3rd request of 2/min across A and B: %d %s; want 429 rate_limit_exceeded", r.StatusCode, body)
	}
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 31 {
		t.Errorf("Retry-After = %q, want 1 to 31 seconds", r.Header.Get("Retry-After"))
	}
	if got := r.Header.Get("X-Ratelimit-Remaining-Requests"); got != "0" {
		t.Errorf("x-ratelimit-remaining-requests on the 429 = %q, want 0", got)
	}
	// Another key has a budget of its own.
	if r := post(t, ctx, b, "/v1/chat/completions", chatBody(false), http.Header{"Authorization": {"Bearer sk-other"}}); r.StatusCode != http.StatusOK {
		t.Errorf("another key: %d, want 200", r.StatusCode)
	}
}

// TestReplicasRedisDown kills Redis under two replicas: every feature
// degrades as the README says, no request hangs.
func TestReplicasRedisDown(t *testing.T) {
	_, usrv := proxytest.NewServer(t, proxytest.Simulated())
	_, dsrv := proxytest.NewServer(t, thDeepSeek)
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: usrv.URL + "/v1"}, {Name: "deepseek", BaseURL: dsrv.URL + "/v1"}},
		RateLimits: proxy.RateLimits{KeyRequests: 100, FailOpen: true}}
	srv := redistest.Start(t)
	open := replica(t, srv.URL, cfg)
	cfg.RateLimits.FailOpen = false
	closed := replica(t, srv.URL, cfg)
	ctx := testContext(t)
	post(t, ctx, open, "/v1/chat/completions", chatBody(true), resumableHeader("req-before")).Body.Close()
	srv.Kill()

	checks := []struct {
		name   string
		do     func() *http.Response
		status int
		want   string
	}{
		{"limits fail open", func() *http.Response { return post(t, ctx, open, "/v1/chat/completions", chatBody(false), nil) }, 200, ""},
		{"limits fail closed", func() *http.Response { return post(t, ctx, closed, "/v1/chat/completions", chatBody(false), nil) }, 503, "rate_limit_unavailable"},
		{"resume answers 503", func() *http.Response { return get(t, ctx, open, "/v1/phasegate/requests/req-before/events", nil) }, 503, "resume_unavailable"},
		{"cancel answers 503", func() *http.Response {
			return post(t, ctx, open, "/v1/phasegate/requests/req-before/cancel", "", nil)
		}, 503, "resume_unavailable"},
		{"a resumable stream is served plain", func() *http.Response {
			return post(t, ctx, open, "/v1/chat/completions", chatBody(true), resumableHeader("req-after"))
		}, 200, "[DONE]"},
		{"reasoning is emptied", func() *http.Response {
			history := `[{"role":"user","content":"List."},{"role":"assistant","content":"","tool_calls":[{"id":"call_x","type":"function","function":{"name":"list_dir","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_x","content":"a.go"}]`
			return post(t, ctx, open, "/v1/chat/completions", `{"model":"`+thModel+`","messages":`+history+`}`, nil)
		}, 200, thAnswer},
	}
	for _, c := range checks {
		start := time.Now()
		r := c.do()
		body := readAll(t, r.Body)
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: took %v with Redis down", c.name, took)
		}
		if r.StatusCode != c.status || !strings.Contains(string(body), c.want) {
			t.Errorf("%s: %d %s; want %d with %q", c.name, r.StatusCode, body, c.status, c.want)
		}
		if c.name == "a resumable stream is served plain" && r.Header.Get("X-Phasegate-Resumable") != "false" {
			t.Errorf("%s: X-Phasegate-Resumable = %q, want false", c.name, r.Header.Get("X-Phasegate-Resumable"))
		}
		if c.name == "reasoning is emptied" && r.Header.Get("X-Phasegate-Reasoning-Emptied") != "1" {
			t.Errorf("%s: X-Phasegate-Reasoning-Emptied = %q, want 1", c.name, r.Header.Get("X-Phasegate-Reasoning-Emptied"))
		}
	}
	m := string(readAll(t, get(t, ctx, open, "/metrics", nil).Body))
	for _, want := range []string{`phasegate_shared_store_errors_total{feature="rate_limit"}`, `phasegate_shared_store_errors_total{feature="resume"}`,
		`phasegate_shared_store_errors_total{feature="reasoning"}`, `phasegate_rate_limit_decisions_total{limit="key_requests",outcome="failed_open"}`} {
		if !strings.Contains(m, want+" ") || strings.Contains(m, want+" 0\n") {
			t.Errorf("metrics: %s not counted", want)
		}
	}
}

// Redis stalls in the middle of a resumable stream on A (CLIENT PAUSE):
// once it answers again, a resume on B ends, promptly, with the events
// the log has and either the stream's own end or an in-band
// resume_incomplete error; it never waits for events that never come.
func TestResumeAfterRedisStallEnds(t *testing.T) {
	reply, _ := slowStream(40, 20*time.Millisecond)
	_, usrv := proxytest.NewServer(t, proxytest.Script(reply))
	a, b, srv := replicas(t, config(usrv))
	ctx := testContext(t)
	const id = "req-stall"
	resp := post(t, ctx, a, "/v1/chat/completions", chatBody(true), resumableHeader(id))
	seen := readIDEvents(t, resp.Body, 3)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	if err := rc.Do(ctx, "CLIENT", "PAUSE", "2500", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	live := readIDEvents(t, resp.Body, 0) // the original client is served
	if len(live) == 0 || live[len(live)-1].data != "[DONE]" {
		t.Fatalf("live stream on A: %v", ids(live))
	}
	time.Sleep(3 * time.Second) // Redis answers again
	rctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	start := time.Now()
	r := get(t, rctx, b, fmt.Sprintf("/v1/phasegate/requests/%s/events?starting_after=%d", id, seen[2].id), resumableHeader(id))
	defer r.Body.Close()
	got := readIDEvents(t, r.Body, 0)
	if r.StatusCode != http.StatusOK || rctx.Err() != nil {
		t.Fatalf("resume on B: status %d, %d events, after %v (%v)", r.StatusCode, len(got), time.Since(start).Round(100*time.Millisecond), rctx.Err())
	}
	if len(got) == 0 {
		t.Fatal("resume on B: no event and no error")
	}
	for i, ev := range got[:len(got)-1] {
		if ev.id != seen[2].id+1+i {
			t.Fatalf("resume on B: positions %v, want them in order from %d", ids(got), seen[2].id+1)
		}
	}
	last := got[len(got)-1].data
	complete := last == "[DONE]" && got[len(got)-1].id == live[len(live)-1].id
	incomplete := len(got) >= 2 && strings.Contains(got[len(got)-2].data, `"code":"resume_incomplete"`) && last == "[DONE]"
	if !complete && !incomplete {
		t.Errorf("resume on B ends with %.120q at %d (live ended at %d); want [DONE] of a complete log, or a resume_incomplete error and [DONE]", last, got[len(got)-1].id, live[len(live)-1].id)
	}
}

// Resumes following a live stream wait in XREAD BLOCK, a connection each:
// they have a pool of their own, so a hundred of them leave every other
// Redis call of the replica (here the rate limits, failing closed) its
// connections.
func TestFollowersDoNotStarveRedisPool(t *testing.T) {
	prev := runtime.GOMAXPROCS(1) // the main pool: 10 connections
	events := sim.NewStream(testModel).Role().Content("one ").Events()
	plain := sim.Answer("POST", "/v1/chat/completions", []byte(chatBody(false)))
	_, usrv := proxytest.NewServer(t, proxytest.Script(sim.Reply{Events: events, Hang: true}, plain, plain, plain, plain, plain))
	cfg := config(usrv)
	cfg.RateLimits = proxy.RateLimits{KeyRequests: 1000, FailOpen: false}
	a, b, _ := replicas(t, cfg)
	runtime.GOMAXPROCS(prev)
	ctx := testContext(t)
	resp := post(t, ctx, a, "/v1/chat/completions", chatBody(true), resumableHeader("req-hang"))
	readIDEvents(t, resp.Body, 2)
	var wg sync.WaitGroup
	fctx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		wg.Wait()
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(cctx, http.MethodPost, a.URL+"/v1/phasegate/requests/req-hang/cancel", nil)
		if r, err := a.Client().Do(req); err == nil {
			r.Body.Close()
		}
	}()
	var following sync.WaitGroup
	for range 100 {
		wg.Add(1)
		following.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(fctx, http.MethodGet, b.URL+"/v1/phasegate/requests/req-hang/events?starting_after=2", nil)
			r, err := b.Client().Do(req)
			following.Done()
			if err != nil {
				return
			}
			defer r.Body.Close()
			if r.StatusCode != http.StatusOK {
				t.Errorf("follower: %d", r.StatusCode)
				return
			}
			<-fctx.Done()
		}()
	}
	headers := make(chan struct{})
	go func() { following.Wait(); close(headers) }()
	select {
	case <-headers: // every follower has its headers
	case <-time.After(5 * time.Second):
		t.Fatal("100 resumes on B got no headers within 5s")
	}
	time.Sleep(200 * time.Millisecond) // and waits in XREAD
	for range 5 {
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		r := post(t, pctx, b, "/v1/chat/completions", chatBody(false), nil)
		body := readAll(t, r.Body)
		cancel()
		if r.StatusCode != http.StatusOK || time.Since(start) > time.Second {
			t.Errorf("a plain request on B while 100 resumes follow: %d after %v: %.80s", r.StatusCode, time.Since(start).Round(100*time.Millisecond), body)
		}
	}
}

// Past the resumes a replica follows at once, a resume is answered at
// once with a 503 in OpenAI's shape and a Retry-After; a slot freed is
// taken again.
func TestResumeFollowersCapped(t *testing.T) {
	events := sim.NewStream(testModel).Role().Content("one ").Events()
	_, usrv := proxytest.NewServer(t, proxytest.Script(sim.Reply{Events: events, Hang: true}))
	srv := redistest.Start(t)
	a := replica(t, srv.URL, config(usrv))
	b := replicaFollowing(t, srv.URL, config(usrv), 2)
	ctx := testContext(t)
	resp := post(t, ctx, a, "/v1/chat/completions", chatBody(true), resumableHeader("req-cap"))
	readIDEvents(t, resp.Body, 2)
	defer func() { readAll(t, post(t, ctx, a, "/v1/phasegate/requests/req-cap/cancel", "", nil).Body) }()
	path := "/v1/phasegate/requests/req-cap/events?starting_after=2"
	var cancels []context.CancelFunc
	for i := range 2 {
		fctx, cancel := context.WithCancel(ctx)
		cancels = append(cancels, cancel)
		defer cancel()
		if r := get(t, fctx, b, path, nil); r.StatusCode != http.StatusOK {
			t.Fatalf("follower %d of 2: %d", i+1, r.StatusCode)
		}
	}
	start := time.Now()
	r := get(t, ctx, b, path, nil)
	body := readAll(t, r.Body)
	if r.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"code":"resume_busy"`) || r.Header.Get("Retry-After") == "" || time.Since(start) > time.Second {
		t.Errorf("a third follower of 2: %d (Retry-After %q) after %v: %s; want 503 resume_busy at once", r.StatusCode, r.Header.Get("Retry-After"), time.Since(start).Round(time.Millisecond), body)
	}
	cancels[0]() // a follower leaves: its slot is free once its read returns
	deadline := time.Now().Add(5 * time.Second)
	for {
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		r := get(t, fctx, b, path, nil)
		if r.StatusCode == http.StatusOK {
			break
		}
		readAll(t, r.Body)
		if time.Now().After(deadline) {
			t.Fatalf("after a follower left: still %d", r.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
