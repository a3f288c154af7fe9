package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/phasegate/phasegate/internal/proc"
)

// A case is a scenario of the mock at a concurrency.
type benchCase struct {
	name        string
	scenario    string
	stream      bool
	tools       bool // the request always declares a tool
	concurrency int
	requests    int
}

// allCases are the cases of issue 14's table.
var allCases = []benchCase{
	{name: "small-c1", scenario: "small", concurrency: 1, requests: 1500},
	{name: "small-c32", scenario: "small", concurrency: 32, requests: 4000},
	{name: "stream-c1", scenario: "stream", stream: true, concurrency: 1, requests: 150},
	{name: "stream-c32", scenario: "stream", stream: true, concurrency: 32, requests: 640},
	{name: "paced-c64", scenario: "paced", stream: true, concurrency: 64, requests: 640},
	{name: "tool-c8", scenario: "tool", stream: true, tools: true, concurrency: 8, requests: 800},
}

func pickCases(cfg config) ([]benchCase, error) {
	var out []benchCase
	for _, c := range allCases {
		if cfg.cases == "" || slices.Contains(strings.Split(cfg.cases, ","), c.name) {
			c.requests = max(1, int(float64(c.requests)*cfg.scale))
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no case named in -cases %q", cfg.cases)
	}
	return out, nil
}

// A target is where a case's requests go.
type target struct {
	name   string
	direct bool    // to the mock
	srv    *server // the gateway, or the peer; nil direct
	std    string  // the name of its gateway's /standard target
	path   string  // of the gateway
	tools  bool    // declare a tool
}

// targets are the case's targets: direct, then each gateway's routes
// (/standard, /v1 without tools, /v1 with a tool declared, the last when
// the case declares none), then each peer's chat completions.
func (st *stack) targets(c benchCase) []target {
	ts := []target{{name: "direct", direct: true, path: "/v1/chat/completions"}}
	for _, sv := range st.servers {
		if sv.peer {
			ts = append(ts, target{name: sv.name, srv: sv, path: "/v1/chat/completions"})
			continue
		}
		prefix := ""
		if sv.name != "" {
			prefix = sv.name + " "
		}
		std := prefix + "standard"
		ts = append(ts, target{name: std, srv: sv, std: std, path: "/standard/v1/chat/completions"},
			target{name: prefix + "v1", srv: sv, std: std, path: "/v1/chat/completions"})
		if !c.tools {
			ts = append(ts, target{name: prefix + "v1+tools", srv: sv, std: std, path: "/v1/chat/completions", tools: true})
		}
	}
	return ts
}

const toolsField = `,"tools":[{"type":"function","function":{"name":"read_file","description":"Read a file of the repository.",` +
	`"parameters":{"type":"object","properties":{"path":{"type":"string"},"line":{"type":"integer"}},"required":["path"]}}}]`

// body is the case's request to t; model "" is gpt-4o. The user message
// names the scenario too, for a peer that does not pass the header on.
func (c benchCase) body(t target, model string) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"` + cmp.Or(model, "gpt-4o") + `","messages":[{"role":"system","content":"You are a coding agent."},` +
		`{"role":"user","content":"The handler test fails with a closed stream. Find out why. ` + scenarioTag + c.scenario + `]"}]`)
	if c.stream {
		b.WriteString(`,"stream":true,"stream_options":{"include_usage":true}`)
	}
	if c.tools || t.tools {
		b.WriteString(toolsField)
	}
	b.WriteString("}")
	return []byte(b.String())
}

// scenarioTag, the scenario's name and "]" in a request's body name its
// scenario to the mock when no X-Bench-Scenario header does.
const scenarioTag = "[bench:"

// measurement is one case on one target in one round.
type measurement struct {
	requests   int
	failed     int
	firstFail  string
	wall       time.Duration
	gatewayCPU time.Duration
	mockCPU    time.Duration
	peakRSS    int64
	latency    []time.Duration // whole request
	firstEvent []time.Duration // to the first SSE event (streams)
	firstToken []time.Duration // to the first content or tool-call event
	events     int             // SSE events received, [DONE] included
}

// measure runs one case on one target and reads the processes' CPU time
// around it; the gateway's RSS is sampled every 50 ms meanwhile.
func measure(ctx context.Context, cfg config, st *stack, c benchCase, t target) (*measurement, error) {
	base, sv := st.mockURL, st.servers[0]
	if !t.direct {
		base, sv = t.srv.url, t.srv
	}
	client := proc.LoopbackClient(c.concurrency)
	defer client.CloseIdleConnections()
	m := &measurement{requests: c.requests}
	stopRSS := sampleRSS(sv.pid, &m.peakRSS)
	g0, m0 := cpuOf(sv.pid), cpuOf(st.mockPID)
	start := time.Now()
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	body := c.body(t, st.model(t, cfg))
	hdr := st.headers(t, cfg)
	for range c.concurrency {
		wg.Go(func() {
			for ctx.Err() == nil && next.Add(1) <= int64(c.requests) {
				r := do(ctx, client, base+t.path, hdr, c, body, cfg.requestTimeout)
				mu.Lock()
				m.add(r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	m.wall = time.Since(start)
	m.gatewayCPU, m.mockCPU = cpuOf(sv.pid)-g0, cpuOf(st.mockPID)-m0
	stopRSS()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *measurement) add(r result) {
	if r.err != "" {
		m.failed++
		if m.firstFail == "" {
			m.firstFail = r.err
		}
		return
	}
	m.latency = append(m.latency, r.total)
	m.events += r.events
	if r.firstEvent > 0 {
		m.firstEvent = append(m.firstEvent, r.firstEvent)
	}
	if r.firstToken > 0 {
		m.firstToken = append(m.firstToken, r.firstToken)
	}
}

type result struct {
	err                           string
	total, firstEvent, firstToken time.Duration
	events                        int
}

// do makes one request, with hdr added, and reads its answer to the end.
func do(ctx context.Context, client *http.Client, url string, hdr http.Header, c benchCase, body []byte, timeout time.Duration) result {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return result{err: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-client")
	req.Header.Set("X-Bench-Scenario", c.scenario)
	for k, v := range hdr {
		req.Header[k] = v
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return result{err: err.Error()}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return result{err: fmt.Sprintf("status %d: %s", resp.StatusCode, b)}
	}
	if !c.stream {
		b, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Contains(b, []byte(`"choices"`)) {
			return result{err: fmt.Sprintf("not a completion: %v %.200s", err, b)}
		}
		return result{total: time.Since(start)}
	}
	r := readStream(resp.Body, start)
	r.total = time.Since(start)
	return r
}

// readStream reads SSE events to [DONE].
func readStream(body io.Reader, start time.Time) result {
	var r result
	br := bufio.NewReaderSize(body, 16<<10)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			r.err = fmt.Sprintf("stream ended without [DONE]: %v", err)
			return r
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		r.events++
		if r.firstEvent == 0 {
			r.firstEvent = time.Since(start)
		}
		if bytes.HasPrefix(data, []byte("[DONE]")) {
			return r
		}
		if bytes.HasPrefix(data, []byte(`{"error"`)) {
			r.err = string(bytes.TrimSpace(data))
			return r
		}
		if r.firstToken == 0 && token(data) {
			r.firstToken = time.Since(start)
		}
	}
}

// token reports whether an event carries content or a tool call.
func token(data []byte) bool {
	_, after, ok := bytes.Cut(data, []byte(`"content":"`))
	return ok && len(after) > 0 && after[0] != '"' || bytes.Contains(data, []byte(`"tool_calls"`))
}

// headers are the headers added for t: -peer-header to a peer, with
// $UPSTREAM_URL expanded; none to a phasegate route.
func (st *stack) headers(t target, cfg config) http.Header {
	h := http.Header{}
	if t.srv == nil || !t.srv.peer {
		return h
	}
	for _, kv := range cfg.peerHeaders {
		h.Add(kv[0], strings.ReplaceAll(kv[1], "$UPSTREAM_URL", st.mockURL+"/v1"))
	}
	return h
}

// model is the model named to t: -peer-model to a peer.
func (st *stack) model(t target, cfg config) string {
	if t.srv != nil && t.srv.peer {
		return cfg.peerModel
	}
	return ""
}

// warmUp sends each case's request once through every route, only the
// cases run: a peer need not serve the others (Portkey's gateway on Node
// answers every stream with a 500).
func warmUp(ctx context.Context, cfg config, st *stack, cases []benchCase) error {
	client := proc.LoopbackClient(1)
	defer client.CloseIdleConnections()
	for _, c := range cases {
		for _, t := range st.targets(c) {
			base := st.mockURL
			if !t.direct {
				base = t.srv.url
			}
			if r := do(ctx, client, base+t.path, st.headers(t, cfg), c, c.body(t, st.model(t, cfg)), cfg.requestTimeout); r.err != "" {
				return fmt.Errorf("warm-up %s via %s: %s", c.name, t.name, r.err)
			}
		}
	}
	return nil
}

// uncut fails the run when a phasegate gateway cut an answer as
// degenerate text (phasegate_degenerate_text_total on its /metrics): the
// guard then asked the model again, and a case would measure the cut and
// the re-ask instead of the answer. The mock's answers never repeat a
// phrase; this holds them to it.
func uncut(ctx context.Context, st *stack) error {
	for _, sv := range st.servers {
		if sv.peer {
			continue
		}
		const name = "phasegate_degenerate_text_total"
		n, found, err := counterOf(ctx, sv.url+"/metrics", name)
		switch {
		case err != nil:
			return fmt.Errorf("%s: read its metrics: %w", sv.label(), err)
		case !found:
			return fmt.Errorf("%s: its /metrics has no %s, so whether it cut an answer cannot be told", sv.label(), name)
		case n > 0:
			return fmt.Errorf("%w: %s counted %v cuts of degenerate text: the figures measure answers asked again, not the answers", errFailed, sv.label(), n)
		}
	}
	return nil
}

// counterOf sums the counters of the metric name in the Prometheus text
// exposition at url; found is whether the exposition has the metric.
func counterOf(ctx context.Context, url, name string) (sum float64, found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("status %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, false, err
	}
	family, found := families[name]
	for _, m := range family.GetMetric() {
		sum += m.GetCounter().GetValue()
	}
	return sum, found, nil
}
