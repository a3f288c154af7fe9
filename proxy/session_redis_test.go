package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"

	"github.com/phasegate/phasegate/internal/redistest"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/session"
	"github.com/phasegate/phasegate/store"
)

// sessReplicas are gateways in front of one simulated upstream, each with
// its own connection to the Redis of srv, as replicas in their own
// processes.
//
// Their Redis calls get 2 s, not the gateway's 100 ms, so that a loaded
// machine's stall is not a timeout and a retry (which would add commands
// to those counted); sessReplicasWith sets the bound.
func sessReplicas(t *testing.T, srv *redistest.Server, sess proxy.Sessions, n int) []*sessStack {
	t.Helper()
	return sessReplicasWith(t, srv, sess, n, 2*time.Second)
}

// sessReplicasWith is sessReplicas with each Redis read and write bounded
// by timeout (0: the gateway's default).
func sessReplicasWith(t *testing.T, srv *redistest.Server, sess proxy.Sessions, n int, timeout time.Duration) []*sessStack {
	t.Helper()
	up, usrv := proxytest.NewServer(t, proxytest.Simulated())
	var out []*sessStack
	for range n {
		reg := prometheus.NewRegistry()
		m := metrics.New(reg, []string{"openai"}, sessModel)
		r, err := store.OpenRedisWith(srv.URL, store.RedisOptions{Observer: m, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		cfg := proxy.Config{Providers: []proxy.Provider{{Name: "openai", BaseURL: usrv.URL + "/v1"}}, GuardProfile: protocol.ProfileAgent,
			AdminAPIKey: adminKey, Sessions: sess}
		h, err := proxy.New(cfg, proxy.Options{Metrics: m, Gatherer: reg, DefaultProtocol: proxy.ProtocolTwoStage,
			TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{Metrics: m}, nil), Sessions: store.NewRedisSessions(r)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		out = append(out, &sessStack{gw: newTestServer(t, h), up: up, reg: reg})
	}
	return out
}

// alternating runs one turn of session id, each request to the next
// replica in turn.
func alternating(t *testing.T, ctx context.Context, replicas []*sessStack, id string, stream bool) []sessReply {
	t.Helper()
	agents := make([]*sessAgent, len(replicas))
	for i, r := range replicas {
		agents[i] = r.agent("", id, stream, nil)
	}
	msgs := userMessage("Fix the rounding bug.")
	var replies []sessReply
	for i := range 30 {
		r, err := agents[i%len(agents)].send(ctx, msgs)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		replies = append(replies, r)
		if len(r.calls) == 0 {
			return replies
		}
		msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: r.calls},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: r.calls[0].ID, Content: fmt.Sprintf("result %d", i)})
	}
	t.Fatal("no answer after 30 requests")
	return nil
}

// TestSessionReplicasShareCounters: two replicas on one redis-server
// count one session together, whichever serves each request, and an
// operator's stop on one holds on the other.
func TestSessionReplicasShareCounters(t *testing.T) {
	srv := redistest.Start(t)
	rs := sessReplicas(t, srv, budget(session.Budget{ToolCalls: 3}), 2)
	ctx := testContext(t)
	for _, stream := range []bool{false, true} {
		id := fmt.Sprintf("shared-%v", stream)
		replies := alternating(t, ctx, rs, id, stream)
		if got := calls(replies); got != 3 {
			t.Fatalf("stream=%v: tool calls run = %d across the replicas, want 3", stream, got)
		}
		checkForcedFinal(t, replies, session.CapToolCalls, 3)
		for i, r := range rs {
			if v, status := r.adminView(t, ctx, id, nil); status != http.StatusOK || v["tool_calls"] != float64(3) || v["requests"] != float64(4) {
				t.Errorf("replica %d's view of the session: %d %v, want 3 calls in 4 requests", i, status, v)
			}
		}
	}
	if status, _ := rs[0].adminDo(t, ctx, http.MethodPost, "/admin/sessions/halt-1/stop", true); status != http.StatusOK {
		t.Fatalf("stop on replica 0: %d", status)
	}
	checkForcedFinal(t, rs[1].agent("", "halt-1", true, nil).turn(t, ctx, "Fix it."), session.CapStopped, 0)
}

// TestSessionRedisPaused pauses Redis (SIGSTOP: a hang, not a refusal):
// with SESSION_FAIL_OPEN the session's requests are served, unchecked, and
// the breaker opens; without, they are a 503 with Retry-After.
func TestSessionRedisPaused(t *testing.T) {
	srv := redistest.Start(t)
	open := sessReplicasWith(t, srv, budget(session.Budget{ToolCalls: 100}), 1, 0)[0]
	closedSess := budget(session.Budget{ToolCalls: 100})
	closedSess.FailOpen = false
	closed := sessReplicasWith(t, srv, closedSess, 1, 0)[0]
	ctx := testContext(t)
	if r, err := open.agent("", "paused-1", false, nil).send(ctx, userMessage("Fix it.")); err != nil || len(r.calls) != 1 {
		t.Fatalf("before the pause: %v %+v", err, r)
	}
	srv.Pause(t)
	defer srv.Continue(t)
	for i := range 6 {
		rctx, cancel := context.WithTimeout(ctx, 5e9)
		r, err := open.agent("", "paused-1", i%2 == 0, nil).send(rctx, userMessage("Fix it."))
		cancel()
		if err != nil || len(r.calls) != 1 {
			t.Fatalf("request %d with Redis paused, failing open: %v %+v; want the call served", i, err, r)
		}
	}
	if got := sampled(t, open.reg, "phasegate_session_requests_total", "decision", "failed_open"); got != 6 {
		t.Errorf("failed_open decisions = %v, want 6", got)
	}
	if got := sampled(t, open.reg, "phasegate_session_requests_total", "decision", "open"); got != 1 {
		t.Errorf("open decisions = %v, want the one before the pause", got)
	}
	if got := sampled(t, open.reg, "phasegate_redis_breaker_transitions_total", "state", "open"); got < 1 {
		t.Errorf("the breaker never opened with Redis paused")
	}
	_, err := closed.agent("", "paused-2", false, nil).send(ctx, userMessage("Fix it."))
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != http.StatusServiceUnavailable || apiErr.Code != "session_unavailable" {
		t.Errorf("failing closed with Redis paused: %v, want a 503 session_unavailable", err)
	}
	resp := post(t, ctx, closed.gw, "/v1/chat/completions", `{"model":"`+sessModel+`","messages":[{"role":"user","content":"hi"}]}`,
		http.Header{session.Header: {"paused-3"}})
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a raw request failing closed: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// redisCounter is a TCP proxy on 127.0.0.1 in front of a Redis that
// counts the commands its clients send: RESP arrays, each a round trip
// unless pipelined (the gateway pipelines none of the calls counted here).
type redisCounter struct {
	ln       net.Listener
	target   string
	commands atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

// countRedis starts a redisCounter in front of srv; it stops with the
// test.
func countRedis(t *testing.T, srv *redistest.Server) (*redisCounter, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &redisCounter{ln: ln, target: srv.Addr}
	c.wg.Add(1)
	go c.accept()
	t.Cleanup(c.close)
	return c, "redis://" + ln.Addr().String()
}

func (c *redisCounter) accept() {
	defer c.wg.Done()
	for {
		in, err := c.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", c.target)
		if err != nil {
			in.Close()
			continue
		}
		c.mu.Lock()
		c.conns = append(c.conns, in, out)
		c.mu.Unlock()
		c.wg.Add(2)
		go func() { defer c.wg.Done(); _, _ = io.Copy(in, out); in.Close() }()
		go func() { defer c.wg.Done(); c.count(in, out); out.Close() }()
	}
}

// count reads the commands of one client (RESP arrays of bulk strings)
// until it ends, counting each before it forwards it to w, so that a
// command is counted before its reply can reach the client.
func (c *redisCounter) count(in io.Reader, w io.Writer) {
	var cmd bytes.Buffer
	r := bufio.NewReader(io.TeeReader(in, &cmd))
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if n, ok := strings.CutPrefix(strings.TrimSpace(line), "*"); ok {
			items, _ := strconv.Atoi(n)
			for range items {
				head, err := r.ReadString('\n')
				size, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(head), "$"))
				if err != nil || size < 0 {
					break
				}
				if _, err := r.Discard(size + 2); err != nil {
					break
				}
			}
			c.commands.Add(1)
		}
		// The client sends its next command once this one is answered:
		// what was read is this command, whole.
		if _, err := w.Write(cmd.Bytes()); err != nil {
			return
		}
		cmd.Reset()
	}
}

func (c *redisCounter) close() {
	c.ln.Close()
	c.mu.Lock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// TestSessionOneRoundTripPerRequest counts, on a real redis-server, the
// commands each request of a session costs, its requests alternating
// between two replicas: one (the request's opening) for every request,
// but for the one whose settlement spends the budget, which makes a
// second, so that the next request, on the other replica, finds the
// session capped.
func TestSessionOneRoundTripPerRequest(t *testing.T) {
	srv := redistest.Start(t)
	counter, url := countRedis(t, srv)
	rs := sessReplicas(t, &redistest.Server{URL: url, Addr: srv.Addr}, budget(session.Budget{ToolCalls: 4}), 2)
	ctx := testContext(t)
	for _, stream := range []bool{false, true} {
		// A first session, so that both replicas have their connections
		// and Redis has the script.
		alternating(t, ctx, rs, fmt.Sprintf("warm-%v", stream), stream)
		agents := []*sessAgent{rs[0].agent("", fmt.Sprintf("count-%v", stream), stream, nil), rs[1].agent("", fmt.Sprintf("count-%v", stream), stream, nil)}
		msgs := userMessage("Fix the rounding bug.")
		var perRequest []int64
		for i := range 6 {
			before := counter.commands.Load()
			r, err := agents[i%2].send(ctx, msgs)
			if err != nil {
				t.Fatalf("stream=%v, request %d: %v", stream, i+1, err)
			}
			perRequest = append(perRequest, counter.commands.Load()-before)
			if len(r.calls) == 0 {
				checkForcedFinal(t, []sessReply{r}, session.CapToolCalls, 4)
				break
			}
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: r.calls},
				openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: r.calls[0].ID, Content: fmt.Sprintf("result %d", i)})
		}
		// Four calls forwarded, the fourth reaching the budget; the fifth
		// request is the forced final answer.
		if want := []int64{1, 1, 1, 2, 1}; !slices.Equal(perRequest, want) {
			t.Errorf("stream=%v: Redis commands per request = %v, want %v", stream, perRequest, want)
		}
	}
}
