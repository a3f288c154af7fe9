package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/phasegate/phasegate/internal/redistest"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
	"github.com/phasegate/phasegate/store"
)

// What a follow-up that names a large stored conversation costs:
//
//	go test ./proxy -run '^$' -bench '^BenchmarkFollowUpAttack$' -benchtime 3x
//
// reports the CPU time of the whole process per follow-up and the peak
// heap while sixteen of them from one key are in flight, at the default
// bounds (a 15 MiB conversation, MAX_BODY_BYTES 16 MiB).

// holdingUpstream is an upstream double that answers every chat request
// with a short stream, but holds one whose body holds "HOLD" until
// release is closed, telling arrived first.
func holdingUpstream(tb testing.TB) (usrv *httptest.Server, arrived chan struct{}, release chan struct{}) {
	arrived, release = make(chan struct{}, 64), make(chan struct{})
	stream := sim.NewStream(sim.Model).Role().Content("Noted.").Finish("stop").Done().Reply()
	whole := sim.Completion(sim.Model, map[string]any{"role": "assistant", "content": "Noted."}, "stop", nil)
	usrv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "HOLD") {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		reply := whole
		if strings.Contains(string(b), `"stream":true`) {
			reply = stream
		}
		reply.Serve(r.Context(), w)
	}))
	tb.Cleanup(usrv.Close)
	return usrv, arrived, release
}

// historyGateway is a gateway with two client keys (pk-tenant-0 and 1)
// whose bodies are at most body bytes and whose in-flight bound is the
// default's ratio to it (eight bodies of the largest size, a quarter of
// it per key), its stored responses in this process or on a Redis of its
// own.
func historyGateway(tb testing.TB, usrv *httptest.Server, body int64, onRedis bool) *httptest.Server {
	tb.Helper()
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1", APIKey: "sk-upstream-history"}}, MaxBodyBytes: body}
	cfg.MaxInflightBytes = 8 * proxy.InflightFactor * body
	cfg.MetricsOpen = true
	for i := range 2 {
		cfg.ClientKeys = append(cfg.ClientKeys, proxy.ClientKey{Key: proxy.Secret(fmt.Sprintf("pk-tenant-%d", i))})
	}
	opts := proxy.Options{Responses: store.NewMemoryResponses(time.Hour, 0)}
	if onRedis {
		r, err := store.OpenRedisWith(redistest.Start(tb).URL, store.RedisOptions{Timeout: 2 * time.Second})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = r.Close() })
		opts.Responses = store.NewRedisResponses(r, time.Hour, 0)
	}
	return serveGateway(tb, cfg, opts)
}

// storeConversation stores, as key's, a response whose input is items of
// 4 KiB messages coming to about size bytes, and returns its id.
func storeConversation(tb testing.TB, gw *httptest.Server, key string, size int) string {
	tb.Helper()
	var b strings.Builder
	b.WriteString(`{"model":"` + sim.Model + `","input":[`)
	text := strings.Repeat("y", 4<<10)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"user","content":"%d %s"}`, i, text)
	}
	b.WriteString(`]}`)
	status, got := postResponses(context.Background(), gw, key, b.String())
	var r struct{ ID string }
	if err := json.Unmarshal(got, &r); status != http.StatusOK || err != nil || r.ID == "" {
		tb.Fatalf("storing the conversation: %d %.300s", status, got)
	}
	return r.ID
}

// postResponses posts body to /v1/responses as key and reads the whole
// answer; status 0 and the error's text when it could not.
func postResponses(ctx context.Context, gw *httptest.Server, key, body string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/responses", strings.NewReader(body))
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := gw.Client().Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, []byte(err.Error())
	}
	return resp.StatusCode, b
}

// heapPeak samples the heap's live objects until stop is closed and
// answers the most it saw (a sampled figure, for the log only).
func heapPeak(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var peak uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-stop:
				out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// followUpAttack is the attack of one key that stored a conversation of
// about conversation bytes and sends n small follow-ups naming it at
// once, each held by the upstream once admitted. It returns the statuses
// and bodies of the follow-ups answered while the others were held, how
// many reached the upstream, and the answer to another key's request
// sent then; the held ones are then released and their statuses
// returned too.
type attackResult struct {
	refused  []int
	bodies   [][]byte
	admitted int
	other    int
	held     []int
	peak     uint64
	cpu      time.Duration // of the whole process, from the first follow-up to the last answer
}

func followUpAttack(tb testing.TB, onRedis bool, body int64, conversation, n int) attackResult {
	tb.Helper()
	usrv, arrived, release := holdingUpstream(tb)
	gw := historyGateway(tb, usrv, body, onRedis)
	id := storeConversation(tb, gw, "pk-tenant-0", conversation)
	ctx := testContext(tb)

	type answer struct {
		status int
		body   []byte
	}
	answers := make(chan answer, n)
	stop := make(chan struct{})
	peak := heapPeak(stop)
	cpu0 := cpuTime(tb)
	var wg sync.WaitGroup
	follow := `{"model":"` + sim.Model + `","stream":true,"input":"HOLD, and go on","previous_response_id":"` + id + `"}`
	for range n {
		wg.Go(func() {
			s, b := postResponses(ctx, gw, "pk-tenant-0", follow)
			answers <- answer{s, b}
		})
	}
	var res attackResult
	for res.admitted+len(res.refused) < n {
		select {
		case <-arrived:
			res.admitted++
		case a := <-answers:
			res.refused = append(res.refused, a.status)
			res.bodies = append(res.bodies, a.body)
		case <-ctx.Done():
			close(release)
			tb.Fatalf("after %d admitted and %d answered, the follow-ups hang", res.admitted, len(res.refused))
		}
	}
	res.other, _ = postResponses(ctx, gw, "pk-tenant-1", `{"model":"`+sim.Model+`","input":"a question of my own"}`)
	close(release)
	wg.Wait()
	cpu := cpuTime(tb) - cpu0
	close(stop)
	res.peak = <-peak
	close(answers)
	for a := range answers {
		res.held = append(res.held, a.status)
	}
	res.cpu = cpu
	return res
}

// TestFollowUpsChargedToTheirKey: the stored history a
// previous_response_id brings is charged, before it is decoded, against
// the bound of requests in flight and the share of the key that sent it.
// One key that stored a large conversation and names it in sixteen small
// follow-ups at once gets two of them served (its share) and the others
// refused 429 inflight_share_exceeded, while another key is served; in
// this process and on Redis. Before, the history was decoded first and
// charged to the total alone: eight were admitted and the others were
// 503 server_busy, as every other key's requests would have been.
func TestFollowUpsChargedToTheirKey(t *testing.T) {
	for _, onRedis := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "redis"}[onRedis], func(t *testing.T) {
			const body = 2 << 20
			res := followUpAttack(t, onRedis, body, body-body/16, 16)
			t.Logf("16 follow-ups: %v of CPU, heap peak %d MiB", res.cpu, res.peak>>20)
			if res.admitted != 2 || len(res.refused) != 14 {
				t.Errorf("%d follow-ups admitted and %d refused, want 2 and 14 (a quarter of the bound, %d bytes of history charged each): %v",
					res.admitted, len(res.refused), proxy.InflightFactor*body, res.refused)
			}
			for i, s := range res.refused {
				if e := decodeError(t, res.bodies[i]); s != http.StatusTooManyRequests || e.Error.Code == nil || *e.Error.Code != "inflight_share_exceeded" {
					t.Errorf("a refused follow-up: %d %s, want 429 inflight_share_exceeded", s, res.bodies[i])
					break
				}
			}
			if res.other != http.StatusOK {
				t.Errorf("another key while the first held its share: %d, want 200", res.other)
			}
			for _, s := range res.held {
				if s != http.StatusOK {
					t.Errorf("an admitted follow-up: %d, want 200", s)
				}
			}
		})
	}
}

// BenchmarkFollowUpAttack runs followUpAttack at the default bounds: a
// 15 MiB conversation, sixteen follow-ups at once, and reports the CPU
// time per follow-up and the heap's peak.
func BenchmarkFollowUpAttack(b *testing.B) {
	for _, onRedis := range []bool{false, true} {
		b.Run(map[bool]string{false: "memory", true: "redis"}[onRedis], func(b *testing.B) {
			var peak uint64
			var cpu time.Duration
			for range b.N {
				res := followUpAttack(b, onRedis, proxy.DefaultMaxBodyBytes, 15<<20, 16)
				peak, cpu = max(peak, res.peak), cpu+res.cpu
				b.Logf("admitted %d, refused %d %v, another key %d", res.admitted, len(res.refused), res.refused, res.other)
			}
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N*16), "cpu-ms/follow-up")
			b.ReportMetric(float64(peak>>20), "peak-heap-MiB")
		})
	}
}

// TestHistoryBoundedAsABody: the stored history a previous_response_id
// brings is held to the limits of a body, counted while its record is
// scanned, before it is decoded: its items with the request's own are
// at most MaxMessages, and it nests no deeper than MaxDepth (its
// response's output items one level deeper, inside the response). A
// replica with lower limits than the one that stored a conversation
// refuses it with the 400s of a body over them, naming
// previous_response_id, and nothing reaches the upstream.
func TestHistoryBoundedAsABody(t *testing.T) {
	up, usrv := proxytest.NewServer(t, proxytest.Simulated())
	shared := store.NewMemoryResponses(time.Hour, 0)
	replica := func(l proxy.Limits) *httptest.Server {
		cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}, Limits: l}
		return serveGateway(t, cfg, proxy.Options{Responses: shared})
	}
	wide := replica(proxy.Limits{})
	var input []map[string]any
	for i := range 8 {
		input = append(input, map[string]any{"role": "user", "content": fmt.Sprintf("message %d", i)})
	}
	first := rsCreate(t, wide, "/v1/responses", "", map[string]any{"model": sim.Model, "input": input})
	// Eight input items and the output's are the history. Its output
	// message nests as deep as a body holding it as input would:
	// {"input":[{"content":[{"annotations":[]}]}]}, 6 deep.
	history := len(input) + len(first.Output)
	most := history + 1
	next := func(own int) string {
		items := strings.Repeat(`{"role":"user","content":"more"},`, own)
		return `{"model":"` + sim.Model + `","input":[` + strings.TrimSuffix(items, ",") + `],"previous_response_id":"` + first.ID + `"}`
	}
	tests := []struct {
		name    string
		limits  proxy.Limits
		own     int
		status  int
		message string
	}{
		{"history and own items at the limit", proxy.Limits{MaxMessages: most}, 1, http.StatusOK, ""},
		{"history and own items over the limit", proxy.Limits{MaxMessages: most}, 2, http.StatusBadRequest,
			fmt.Sprintf("the request has %d input items with the stored history of response '%s'; this gateway accepts at most %d", most+1, first.ID, most)},
		{"history as deep as a body may be", proxy.Limits{MaxDepth: 6}, 1, http.StatusOK, ""},
		{"history deeper than a body may be", proxy.Limits{MaxDepth: 5}, 1, http.StatusBadRequest,
			"the stored history of response '" + first.ID + "' nests JSON objects and arrays more than 5 deep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := len(up.Received())
			status, _, b := rsRaw(t, replica(tt.limits), http.MethodPost, "/v1/responses", "", next(tt.own))
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, b)
			}
			if tt.status == http.StatusOK {
				return
			}
			if e := rsError(t, b); e.Type != "invalid_request_error" || e.Param != "previous_response_id" || e.Message != tt.message {
				t.Errorf("got %+v, want param previous_response_id and message %q", e, tt.message)
			}
			if n := len(up.Received()); n != calls {
				t.Errorf("%d calls reached the upstream", n-calls)
			}
		})
	}
}
