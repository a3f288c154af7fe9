package proxy_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
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
	opt, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
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
