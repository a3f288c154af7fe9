package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/phasegate/phasegate/internal/redistest"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
	"github.com/phasegate/phasegate/store"
)

// referencesGateway is a gateway whose stored responses are on a Redis of
// its own, and a client of that Redis that counts its commands.
func referencesGateway(t *testing.T) (*httptest.Server, func() int64) {
	t.Helper()
	_, usrv := proxytest.NewServer(t, proxytest.Simulated())
	srv := redistest.Start(t)
	r, err := store.OpenRedisWith(srv.URL, store.RedisOptions{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}}
	gw := serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil),
		Responses: store.NewRedisResponses(r, time.Hour, 64<<20)})
	c := redisClient(t, srv.URL)
	commands := func() int64 {
		info, err := c.Info(context.Background(), "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatalf("no total_commands_processed in %q", info)
		return 0
	}
	return gw, commands
}

// referencing is a Responses request whose input is a message and n
// item_reference items, to ids named ref-0 to ref-(distinct-1) in turn.
func referencing(n, distinct int) string {
	var b strings.Builder
	b.WriteString(`{"model":"` + sim.Model + `","input":[{"role":"user","content":"x"}`)
	for i := range n {
		fmt.Fprintf(&b, `,{"type":"item_reference","id":"ref-%d"}`, i%distinct)
	}
	b.WriteString(`]}`)
	return b.String()
}

// TestItemReferencesBatched: the items a request's item_reference items
// name are read from the store a hundred to a round trip, each once,
// and more than MaxItemReferences distinct ones (1,000) are a 400 before
// any is read. Before, each reference was a Redis call of its own: 500
// references made 500 calls, and a 15 MiB request 400,007.
func TestItemReferencesBatched(t *testing.T) {
	gw, commands := referencesGateway(t)
	tests := []struct {
		name            string
		n, distinct     int
		message         string
		maxCommands     int64
		wantCode, param string
	}{
		{"500 references to 500 items", 500, 500, "Item with id 'ref-0' not found", 6, "not_found", "input[1].id"},
		{"5,000 references to 10 items", 5000, 10, "Item with id 'ref-0' not found", 2, "not_found", "input[1].id"},
		{"1,001 items", 1001, 1001, "the request has 1001 item references; this gateway accepts at most 1000", 1, "", "input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := commands()
			status, _, b := rsRaw(t, gw, http.MethodPost, "/v1/responses", "", referencing(tt.n, tt.distinct))
			used := commands() - before - 1 // the INFO that read it
			e := rsError(t, b)
			if status != http.StatusBadRequest || e.Param != tt.param || !strings.Contains(e.Message, tt.message) || e.Code != tt.wantCode {
				t.Errorf("got %d %s; want a 400 with param %s, code %q and %q", status, b, tt.param, tt.wantCode, tt.message)
			}
			t.Logf("%d Redis commands", used)
			if used > tt.maxCommands {
				t.Errorf("%d Redis commands for %d references to %d items, want at most %d", used, tt.n, tt.distinct, tt.maxCommands)
			}
		})
	}
}

// TestStoreWriteReported: a response the store does not keep (here, one
// larger than its key's share of a small store) is still served, and
// its client is told: X-Phasegate-Stored: false, a header on a JSON
// answer and a trailer on a stream, and the next previous_response_id
// naming it is a 400 that says why. One that is kept says true. Before,
// nothing told the client, and its next turn read "not found".
func TestStoreWriteReported(t *testing.T) {
	_, usrv := proxytest.NewServer(t, proxytest.Simulated())
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}}
	gw := serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil),
		Responses: store.NewMemoryResponses(time.Hour, 64<<10)}) // 16 KiB a key
	large := strings.Repeat("x", 20<<10)
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "stream"}[stream], func(t *testing.T) {
			ctx := testContext(t)
			for _, tt := range []struct {
				input, want string
			}{{"hi", "true"}, {large, "false"}} {
				body := fmt.Sprintf(`{"model":%q,"input":%q,"stream":%v}`, sim.Model, tt.input, stream)
				resp := post(t, ctx, gw, "/v1/responses", body, nil)
				b := readAll(t, resp.Body) // trailers are read with the body's end
				got := resp.Header.Get(proxy.StoredHeader)
				if stream {
					got = resp.Trailer.Get(proxy.StoredHeader)
				}
				if resp.StatusCode != http.StatusOK || got != tt.want {
					t.Errorf("input of %d bytes: status %d, %s %q; want 200 and %q", len(tt.input), resp.StatusCode, proxy.StoredHeader, got, tt.want)
				}
				if tt.want == "true" {
					continue
				}
				id := responseID(t, b, stream)
				status, _, eb := rsRaw(t, gw, http.MethodPost, "/v1/responses", "", `{"model":"`+sim.Model+`","input":"more","previous_response_id":"`+id+`"}`)
				if e := rsError(t, eb); status != http.StatusBadRequest || e.Code != "previous_response_not_stored" || !strings.Contains(e.Message, "share") {
					t.Errorf("next turn: %d %s; want a 400 previous_response_not_stored saying why", status, eb)
				}
			}
		})
	}
}

// responseID is the id of the response of a JSON answer or a stream.
func responseID(t *testing.T, b []byte, stream bool) string {
	t.Helper()
	if !stream {
		var r rsResponse
		if err := json.Unmarshal(b, &r); err != nil || r.ID == "" {
			t.Fatalf("no response id in %s", b)
		}
		return r.ID
	}
	_, r := rsFinal(t, rsEvents(t, b))
	return r.ID
}

// TestLargeStoreWrite: a stored response of 6 MiB is written to Redis
// while Redis holds writes for 800 ms (CLIENT PAUSE WRITE), far past
// REDIS_TIMEOUT (100 ms): a large write has a deadline of its own, scaled
// to its size, so it is stored, the client is told so, its next turn
// finds it, and the breaker of the short calls stays closed. Before, the
// write failed after REDIS_TIMEOUT, the client got 200 with nothing
// stored, and each such failure counted towards opening the breaker that
// turns rate limits off for every key.
func TestLargeStoreWrite(t *testing.T) {
	_, usrv := proxytest.NewServer(t, proxytest.Simulated())
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, []string{"deepseek"})
	r, err := store.OpenRedisWith(srv.URL, store.RedisOptions{Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}}
	gw := serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil),
		Metrics: m, Gatherer: reg, Responses: store.NewRedisResponses(r, time.Hour, 256<<20)})
	admin := redisClient(t, srv.URL)
	ctx := heavyContext(t)
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "800", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	resp := post(t, ctx, gw, "/v1/responses", fmt.Sprintf(`{"model":%q,"input":%q}`, sim.Model, strings.Repeat("x", 3<<20)), nil)
	b := readAll(t, resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.StoredHeader) != "true" {
		t.Fatalf("status %d, %s %q; want 200, stored", resp.StatusCode, proxy.StoredHeader, resp.Header.Get(proxy.StoredHeader))
	}
	id := responseID(t, b, false)
	if status, _, eb := rsRawCtx(t, ctx, gw, http.MethodPost, "/v1/responses", "", `{"model":"`+sim.Model+`","input":"more","previous_response_id":"`+id+`"}`); status != http.StatusOK {
		t.Errorf("next turn: %d %.300s", status, eb)
	}
	metricsHave(t, gw, `phasegate_redis_breaker_state{state="closed"} 1`)
}

// redisClient is a client of the Redis at url, closed when the test ends.
func redisClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}
