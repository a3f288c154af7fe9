package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phasegate/phasegate/internal/redistest"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
	"github.com/phasegate/phasegate/store"
)

// starvationConfig is a gateway with four client keys, bodies of at most
// 256 KiB and an in-flight bound of four such bodies (8 MiB charged).
func starvationConfig(usrv *httptest.Server) proxy.Config {
	cfg := config(usrv)
	cfg.Providers[0].APIKey = "sk-upstream-starve"
	cfg.MaxBodyBytes = 256 << 10
	cfg.MaxInflightBytes = 4 * proxy.InflightFactor * cfg.MaxBodyBytes
	for i := range 4 {
		cfg.ClientKeys = append(cfg.ClientKeys, proxy.ClientKey{Key: proxy.Secret(fmt.Sprintf("pk-tenant-%d", i))})
	}
	cfg.Timeouts = proxy.Timeouts{Body: 3 * time.Second}
	cfg.MinBodyRate = proxy.BodyRate{BytesPerSecond: 64 << 10, Grace: 300 * time.Millisecond}
	cfg.MetricsOpen = true
	return cfg
}

// tenantAuth is the Authorization header of the ith client key of
// starvationConfig.
func tenantAuth(i int) http.Header {
	return http.Header{"Authorization": {fmt.Sprintf("Bearer pk-tenant-%d", i)}}
}

// TestSlowBodiesStarveNoTenant is a load test of one tenant against three:
// the first key opens nine connections that each announce a body of
// 255 KiB (together more than the in-flight bound) and send one byte of
// it, while the three others post requests of 8 KiB, one after another,
// until every slow connection has been answered. Every honest request is
// served; each slow connection is cut as too slow (408), long before
// BODY_READ_TIMEOUT. Without charging what arrived, a share per key and
// a minimum rate, the slow bodies held the whole bound until the body
// timeout and the honest tenants got 503 server_busy.
func TestSlowBodiesStarveNoTenant(t *testing.T) {
	up, usrv := proxytest.NewServer(t, proxytest.Simulated())
	cfg := starvationConfig(usrv)
	gw := newGateway(t, cfg)

	const slow = 9
	announced := 255 << 10
	conns := make([]net.Conn, slow)
	for i := range conns {
		conns[i] = rawPost(t, gw, "/v1/chat/completions", fmt.Sprintf("Authorization: Bearer pk-tenant-0\r\nContent-Length: %d\r\n", announced))
		if _, err := io.WriteString(conns[i], "{"); err != nil {
			t.Fatal(err)
		}
	}
	type answer struct {
		status int
		body   []byte
	}
	slowAnswers := make([]answer, slow)
	attackOver := make(chan struct{})
	var slowWG sync.WaitGroup
	for i, conn := range conns {
		slowWG.Go(func() {
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				slowAnswers[i] = answer{0, []byte(err.Error())}
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			slowAnswers[i] = answer{resp.StatusCode, body}
		})
	}
	go func() { slowWG.Wait(); close(attackOver) }()

	ordinary := chatBody(false) + strings.Repeat(" ", 8<<10)
	ctx := testContext(t)
	var mu sync.Mutex
	served, refused := map[int]int{}, map[int][]string{}
	var honest sync.WaitGroup
	for tenant := 1; tenant <= 3; tenant++ {
		honest.Go(func() {
			for n := 0; n < 400; n++ {
				select {
				case <-attackOver:
					if n > 0 {
						return
					}
				default:
				}
				resp := post(t, ctx, gw, "/v1/chat/completions", ordinary, tenantAuth(tenant))
				body := readAll(t, resp.Body)
				mu.Lock()
				if resp.StatusCode == http.StatusOK {
					served[tenant]++
				} else {
					refused[tenant] = append(refused[tenant], fmt.Sprintf("%d %.120s", resp.StatusCode, body))
				}
				mu.Unlock()
			}
		})
	}
	honest.Wait()
	<-attackOver
	for tenant := 1; tenant <= 3; tenant++ {
		t.Logf("tenant %d: %d served, %d refused", tenant, served[tenant], len(refused[tenant]))
		if len(refused[tenant]) > 0 {
			t.Errorf("tenant %d: %d of %d requests refused while another key held slow bodies, first: %s",
				tenant, len(refused[tenant]), served[tenant]+len(refused[tenant]), refused[tenant][0])
		}
	}
	for i, a := range slowAnswers {
		if a.status != http.StatusRequestTimeout {
			t.Errorf("slow connection %d: status %d, want 408: %.200s", i, a.status, a.body)
			continue
		}
		if e := decodeError(t, a.body); e.Error.Code == nil || *e.Error.Code != "request_body_too_slow" {
			t.Errorf("slow connection %d: %s, want code request_body_too_slow", i, a.body)
		}
	}
	if n := len(up.Received()); n != served[1]+served[2]+served[3] {
		t.Errorf("the upstream received %d requests, the honest tenants were served %d", n, served[1]+served[2]+served[3])
	}
}

// waitCharged waits, a bounded number of looks, until the gateway's
// bodies in flight are charged n bytes.
func waitCharged(t *testing.T, gw *httptest.Server, n int) {
	t.Helper()
	charged := fmt.Sprintf("phasegate_inflight_body_bytes %d", n)
	for try := 0; !metricsHas(t, gw, charged); try++ {
		if try == 1000 {
			t.Fatalf("/metrics never showed %s", charged)
		}
		runtime.Gosched()
	}
}

// TestInflightShare: one client's bodies in flight hold at most its share
// of the bound. While a client key (or, without client keys, a client
// address) holds its share with a body it has not finished, its next
// body is answered 429 inflight_share_exceeded with Retry-After, counted,
// while another key (address) is served; the held body is then served.
func TestInflightShare(t *testing.T) {
	tests := []struct {
		name          string
		keys          bool
		holder, other http.Header
	}{
		{"client keys", true, tenantAuth(0), tenantAuth(1)},
		{"client addresses", false, http.Header{"X-Forwarded-For": {"192.0.2.1"}}, http.Header{"X-Forwarded-For": {"192.0.2.2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, usrv := proxytest.NewServer(t, proxytest.Simulated())
			cfg := starvationConfig(usrv)
			cfg.MaxBodyBytes = 64 << 10
			cfg.MaxInflightBytes = 4 * proxy.InflightFactor * cfg.MaxBodyBytes // a share is one largest body
			cfg.MinBodyRate = proxy.BodyRate{}                                 // the holder waits on the test, however loaded
			if !tt.keys {
				cfg.ClientKeys, cfg.TrustedProxies = nil, []string{"127.0.0.1"}
			}
			gw := newGateway(t, cfg)

			held := `{"model":"` + testModel + `","messages":[{"role":"user","content":"` + strings.Repeat("x", 60<<10) + `"}]}`
			var head strings.Builder
			for k, vs := range tt.holder {
				fmt.Fprintf(&head, "%s: %s\r\n", k, vs[0])
			}
			holder := rawPost(t, gw, "/v1/chat/completions", head.String()+fmt.Sprintf("Content-Length: %d\r\n", len(held)))
			sent := len(held) - 100
			if _, err := io.WriteString(holder, held[:sent]); err != nil {
				t.Fatal(err)
			}
			waitCharged(t, gw, proxy.InflightFactor*sent)

			ctx := testContext(t)
			small := chatBody(false) + strings.Repeat(" ", 8<<10)
			resp := post(t, ctx, gw, "/v1/chat/completions", small, tt.holder)
			got := readAll(t, resp.Body)
			if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("the holder's second body: status %d, Retry-After %q, want 429 with one: %s", resp.StatusCode, resp.Header.Get("Retry-After"), got)
			}
			if e := decodeError(t, got); e.Error.Code == nil || *e.Error.Code != "inflight_share_exceeded" || !strings.Contains(e.Error.Message, "MAX_INFLIGHT_SHARE") {
				t.Errorf("got %s, want code inflight_share_exceeded naming MAX_INFLIGHT_SHARE", got)
			}
			if resp := post(t, ctx, gw, "/v1/chat/completions", small, tt.other); resp.StatusCode != http.StatusOK {
				t.Errorf("another client: status %d, want 200: %s", resp.StatusCode, readAll(t, resp.Body))
			}
			metricsHave(t, gw, `phasegate_requests_bounded_total{bound="inflight_share"} 1`)
			if _, err := io.WriteString(holder, held[sent:]); err != nil {
				t.Fatal(err)
			}
			if resp, got := readResponse(t, holder); resp.StatusCode != http.StatusOK {
				t.Errorf("the holder: status %d: %s", resp.StatusCode, got)
			}
		})
	}
}

// TestBodyTooSlow: a body that stops arriving, or trickles, is answered
// 408 request_body_too_slow once MIN_BODY_RATE_GRACE has passed and its
// average falls below MIN_BODY_RATE, long before BODY_READ_TIMEOUT, and
// counted; a body sent in two parts at a fair rate is served.
func TestBodyTooSlow(t *testing.T) {
	up, usrv := proxytest.NewServer(t, proxytest.Simulated())
	cfg := config(usrv)
	cfg.Timeouts = proxy.Timeouts{Body: time.Minute}
	cfg.MinBodyRate = proxy.BodyRate{BytesPerSecond: 4 << 10, Grace: 200 * time.Millisecond}
	gw := newGateway(t, cfg)
	body := `{"model":"` + testModel + `","messages":[{"role":"user","content":"` + strings.Repeat("x", 16<<10) + `"}]}`

	// 8 KiB at once, then nothing: it may take 2 s, and is cut then.
	conn := rawPost(t, gw, "/v1/chat/completions", fmt.Sprintf("Content-Length: %d\r\n", len(body)))
	if _, err := io.WriteString(conn, body[:8<<10]); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	resp, got := readResponse(t, conn)
	took := time.Since(t0)
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("status %d, want 408: %s", resp.StatusCode, got)
	}
	if e := decodeError(t, got); e.Error.Code == nil || *e.Error.Code != "request_body_too_slow" || !strings.Contains(e.Error.Message, "MIN_BODY_RATE") {
		t.Errorf("got %s, want code request_body_too_slow naming MIN_BODY_RATE", got)
	}
	if took < time.Second || took > 30*time.Second {
		t.Errorf("cut after %v; 8 KiB at 4 KiB/s may take 2 s, and BODY_READ_TIMEOUT is a minute", took)
	}
	metricsHave(t, gw, `phasegate_requests_bounded_total{bound="body_too_slow"} 1`)

	// Two parts, the second once the first was read: well above the rate.
	conn = rawPost(t, gw, "/v1/chat/completions", fmt.Sprintf("Content-Length: %d\r\n", len(body)))
	if _, err := io.WriteString(conn, body[:8<<10]); err != nil {
		t.Fatal(err)
	}
	waitCharged(t, gw, proxy.InflightFactor*8<<10)
	if _, err := io.WriteString(conn, body[8<<10:]); err != nil {
		t.Fatal(err)
	}
	if resp, got := readResponse(t, conn); resp.StatusCode != http.StatusOK {
		t.Errorf("a body at a fair rate: status %d: %s", resp.StatusCode, got)
	}
	if n := len(up.Received()); n != 1 {
		t.Errorf("%d requests reached the upstream, want the fair one", n)
	}
}

// TestStoredResponsesOfOtherKeysSurvive: one client key that stores
// response after response fills only its own share of the store of
// responses (in this process, and on Redis): another key's stored
// response is still there for its next turn. Before, the store evicted
// the oldest records whoever they were, and the other key's next turn was
// a 400 previous_response_not_found.
func TestStoredResponsesOfOtherKeysSurvive(t *testing.T) {
	for _, onRedis := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "redis"}[onRedis], func(t *testing.T) {
			_, usrv := proxytest.NewServer(t, proxytest.Simulated())
			cfg := starvationConfig(usrv)
			cfg.Providers[0].Name = "deepseek"
			opts := proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil),
				Responses: store.NewMemoryResponses(time.Hour, 64<<10)}
			if onRedis {
				r, err := store.OpenRedisWith(redistest.Start(t).URL, store.RedisOptions{Timeout: 2 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = r.Close() })
				opts.Responses = store.NewRedisResponses(r, time.Hour, 64<<10)
			}
			gw := serveGateway(t, cfg, opts)
			kept := rsCreate(t, gw, "/v1/responses", "pk-tenant-1", map[string]any{"model": sim.Model, "input": "remember me"})
			for i := range 40 { // 40 records of over 4 KiB: the store three times over
				rsCreate(t, gw, "/v1/responses", "pk-tenant-0", map[string]any{"model": sim.Model, "input": fmt.Sprintf("%d %s", i, strings.Repeat("x", 4<<10))})
			}
			status, _, b := rsRaw(t, gw, http.MethodPost, "/v1/responses", "pk-tenant-1",
				`{"model":"`+sim.Model+`","input":"and now?","previous_response_id":"`+kept.ID+`"}`)
			if status != http.StatusOK {
				t.Errorf("the other key's next turn: %d %s", status, b)
			}
		})
	}
}
