package deploy_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"
	"github.com/sashabaranov/go-openai/jsonschema"
	"gopkg.in/yaml.v3"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/pricing"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/session"
	"github.com/phasegate/phasegate/sim"
)

const (
	rulesFile     = "prometheus/rules.yml"
	scrapeFile    = "prometheus/prometheus.yml"
	dashboardFile = "grafana/phasegate-dashboard.json"
	job           = "phasegate"
	// testBudget bounds the whole test: Prometheus's start, the sessions
	// and every wait for a scrape or an evaluation.
	testBudget = 45 * time.Second
)

// loopingModel is the scripted looping model: it calls get_weather for
// Paris whenever it may call a tool, however often it was told that call
// was made, and answers only once the gateway takes its tools away.
const loopingModel = "scripted-looping"

// The alerts the sessions below must fire; every other alert of the rules
// file must stay silent.
var wantFiring = []string{"PhasegateBudgetExhaustionsHigh", "PhasegateDuplicateToolCallsHigh"}

// TestRealPrometheus starts Debian's Prometheus on a free loopback port
// with temporary storage, scraping (every second) a gateway in front of
// the simulated models, and the shipped rules evaluated every second. An
// agent runs a session on the looping model and one on the well-behaved
// model through the guard; then every recording rule, every panel query of
// the dashboard and every variable query must return data, the alerts the
// looping session earns must fire and no other may. The rules' `for`
// durations (minutes) are set to 0 in the copy Prometheus loads: what is
// tested is that each expression holds or not, not the waiting.
func TestRealPrometheus(t *testing.T) {
	bin := prometheusBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), testBudget)
	defer cancel()

	gw := startGateway(t)
	prom := startPrometheus(t, ctx, bin, gw.Listener.Addr().String())

	// Sessions start once Prometheus holds a sample from before them, so
	// every counter they move has a rate.
	prom.waitFor(t, ctx, "the first scrape of the gateway", func() (bool, string) {
		r := prom.query(t, ctx, `up{job="`+job+`"} == 1`)
		return len(r) > 0, fmt.Sprintf("up: %v", r)
	})
	base := gw.URL + "/v1"
	runAgent(t, ctx, base, loopingModel, http.Header{session.Header: {"looping-run"}})
	// A session whose budget is one tool call: its second request is its
	// forced final answer; then an operator resets it, which ends it.
	runAgent(t, ctx, base, sim.Model, http.Header{session.Header: {"capped-run"}, session.HeaderMaxToolCalls: {"1"}})
	resetSession(t, ctx, gw.URL, "capped-run")

	rules := readRules(t)
	prom.waitFor(t, ctx, "the alerts the looping session earns", func() (bool, string) {
		firing := prom.firing(t, ctx)
		return slices.Equal(firing, wantFiring), fmt.Sprintf("firing or pending: %v, want %v; verdicts: %v", firing, wantFiring,
			prom.query(t, ctx, `sum by (verdict) (phasegate_tool_calls_total) > 0`))
	})
	for _, name := range rules.records {
		t.Run("record/"+name, func(t *testing.T) {
			prom.waitFor(t, ctx, name, func() (bool, string) {
				r := prom.query(t, ctx, name)
				return len(r) > 0, "no series"
			})
		})
	}
	for _, q := range dashboardQueries(t) {
		t.Run("panel/"+q.name, func(t *testing.T) {
			// A quantile of a histogram that saw nothing is NaN: one series
			// with a number is what a working panel shows. It is waited
			// for: a scrape that a busy machine made time out marks every
			// series stale until the next one.
			prom.waitFor(t, ctx, q.expr, func() (bool, string) {
				r := prom.query(t, ctx, q.expr)
				ok := slices.ContainsFunc(r, func(s string) bool { return !strings.HasSuffix(s, "=NaN") })
				return ok, fmt.Sprintf("%s returns no number: %v", q.expr, r)
			})
		})
	}
	// The firing set is checked once more, after everything else had time
	// to evaluate: an alert that fires late fails too.
	if firing := prom.firing(t, ctx); !slices.Equal(firing, wantFiring) {
		t.Errorf("firing or pending alerts %v, want %v", firing, wantFiring)
	}
}

// prometheusBinary finds Debian's prometheus: on PATH, or where the
// package installs it.
func prometheusBinary(t *testing.T) string {
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	const debian = "/usr/bin/prometheus"
	if _, err := os.Stat(debian); err == nil {
		return debian
	}
	t.Fatal("the prometheus binary is neither on PATH nor at " + debian + ": this test runs a real Prometheus; " +
		"install Debian's prometheus package (apt-get install prometheus; .ci/run does)")
	return ""
}

// startGateway serves the scripted looping model and the simulated ones
// through the guard, with every collector on one registry, on a loopback
// port.
func startGateway(t *testing.T) *httptest.Server {
	_, up := proxytest.NewServer(t, func(r proxytest.Received) sim.Reply {
		req, err := chat.ParseRequest(r.Body)
		if err != nil || req.Model != loopingModel {
			return sim.Answer(r.Method, r.Path, r.Body)
		}
		return loop(req)
	})
	reg := prometheus.NewRegistry()
	models := []string{sim.Model, loopingModel}
	m := metrics.New(reg, []string{"deepseek"}, models...)
	metrics.RegisterTokenRatios(reg, models, func(string) float64 { return 1 })
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: up.URL + "/v1"}}, AdminAPIKey: adminKey,
		Sessions: proxy.Sessions{Rules: session.Rules{Global: session.Budget{ToolCalls: 50, IdleTTL: time.Hour}}, FailOpen: true},
		Prices:   []pricing.Rule{{Pattern: "*", Price: pricing.Price{InputCacheMiss: 1, InputCacheHit: 0.1, Output: 2}}}}
	h, err := proxy.New(cfg, proxy.Options{Metrics: m, Gatherer: reg,
		DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{Metrics: m}, nil)})
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// loop is the scripted looping model's answer to req.
func loop(req *chat.Request) sim.Reply {
	usage := map[string]any{"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48}
	if len(req.Tools) == 0 {
		if !req.Stream {
			return sim.Completion(loopingModel, map[string]any{"content": "It is sunny in Paris."}, chat.FinishStop, usage)
		}
		return sim.NewStream(loopingModel).Role().Content("It is ", "sunny in Paris.").Finish(chat.FinishStop).Usage(40, 8, nil).Done().Reply()
	}
	id := "call_" + rand.Text()
	if !req.Stream {
		return sim.Completion(loopingModel, map[string]any{"content": nil, "tool_calls": []map[string]any{{"id": id, "type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`}}}}, chat.FinishToolCalls, usage)
	}
	return sim.NewStream(loopingModel).Role().ToolCall(0, id, "get_weather", `{"city":`, `"Paris"}`).Finish(chat.FinishToolCalls).
		Usage(40, 8, nil).Done().Reply()
}

// adminKey opens the admin routes of the gateway under test.
const adminKey = "sk-test-admin"

// resetSession resets session id through the admin route.
func resetSession(t *testing.T, ctx context.Context, root, id string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, root+"/admin/sessions/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE /admin/sessions/%s: %s", id, resp.Status)
	}
}

// withHeader is a transport that adds header to every request.
type withHeader struct{ header http.Header }

func (w withHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range w.header {
		r.Header[k] = v
	}
	return http.DefaultTransport.RoundTrip(r)
}

// runAgent is an agent loop: ask, run every tool call, send the results,
// until the model answers; header goes with every request.
func runAgent(t *testing.T, ctx context.Context, baseURL, model string, header http.Header) {
	t.Helper()
	cfg := openai.DefaultConfig("sk-test-client")
	cfg.BaseURL = baseURL
	cfg.HTTPClient = &http.Client{Transport: withHeader{header}}
	client := openai.NewClientWithConfig(cfg)
	str := jsonschema.Definition{Type: jsonschema.String}
	tools := []openai.Tool{
		{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "get_weather",
			Parameters: jsonschema.Definition{Type: jsonschema.Object, Properties: map[string]jsonschema.Definition{"city": str}, Required: []string{"city"}}}},
		{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "get_time",
			Parameters: jsonschema.Definition{Type: jsonschema.Object, Properties: map[string]jsonschema.Definition{"timezone": str}, Required: []string{"timezone"}}}},
	}
	msgs := []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "What's the weather in Paris?"}}
	for range 10 {
		resp, err := client.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: model, Messages: msgs, Tools: tools})
		if err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		msg := resp.Choices[0].Message
		if len(msg.ToolCalls) == 0 {
			return
		}
		msgs = append(msgs, msg)
		for _, c := range msg.ToolCalls {
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: c.ID, Content: `{"ok":true}`})
		}
	}
	t.Fatalf("%s: no answer after 10 requests", model)
}

// promServer is a running Prometheus.
type promServer struct {
	url string
	log string // the file its output goes to
}

// startPrometheus starts prometheus scraping target, with the rules file
// (its `for` durations set to 0) evaluated every second, and waits until
// it is ready. It is stopped when the test ends.
func startPrometheus(t *testing.T, ctx context.Context, bin, target string) *promServer {
	dir := t.TempDir()
	writeRules(t, filepath.Join(dir, "rules.yml"))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), scrapeConfig(t, target), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &promServer{url: "http://" + freeAddr(t), log: filepath.Join(dir, "prometheus.log")}
	out, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+strings.TrimPrefix(p.url, "http://"), "--log.level=warn")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("prometheus output:\n%s", b)
		}
	})
	p.waitFor(t, ctx, "prometheus to be ready", func() (bool, string) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("prometheus exited: %v", err)
		default:
		}
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return p
}

// scrapeConfig is the shipped scrape config (the one deploy/compose.yaml
// gives Prometheus) with its gateway target replaced by target and every
// interval made 1s; the rest (job, metrics path, rule files) as shipped.
func scrapeConfig(t *testing.T, target string) []byte {
	t.Helper()
	b, err := os.ReadFile(scrapeFile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s: %v", scrapeFile, err)
	}
	if files, _ := cfg["rule_files"].([]any); len(files) != 1 || files[0] != filepath.Base(rulesFile) {
		t.Fatalf("%s: rule_files %v, want the shipped rules beside it, [%s]", scrapeFile, cfg["rule_files"], filepath.Base(rulesFile))
	}
	cfg["global"] = map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
	jobs, _ := cfg["scrape_configs"].([]any)
	if len(jobs) != 1 {
		t.Fatalf("%s: %d scrape configs, want the gateway's alone", scrapeFile, len(jobs))
	}
	sc, _ := jobs[0].(map[string]any)
	if sc["job_name"] != job {
		t.Fatalf("%s: job_name %v, want %s (the dashboard's job variable lists it)", scrapeFile, sc["job_name"], job)
	}
	statics, _ := sc["static_configs"].([]any)
	if len(statics) != 1 {
		t.Fatalf("%s: %d static configs, want 1", scrapeFile, len(statics))
	}
	statics[0].(map[string]any)["targets"] = []string{target}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// freeAddr returns a loopback address no one listens on.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitFor polls cond every 200 ms until it holds; it fails the test with
// what cond last said when ctx ends first.
func (p *promServer) waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, last := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: the test's %v ran out; last: %s", what, testBudget, last)
		case <-tick.C:
		}
	}
}

// query evaluates expr at the current time and returns its result: the
// series of a vector, with their values.
func (p *promServer) query(t *testing.T, ctx context.Context, expr string) []string {
	t.Helper()
	var res struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	p.api(t, ctx, "/api/v1/query?query="+url.QueryEscape(expr), &res)
	if res.ResultType != "vector" {
		t.Fatalf("%s: result type %q, want vector", expr, res.ResultType)
	}
	var out []string
	for _, r := range res.Result {
		out = append(out, fmt.Sprintf("%v=%v", r.Metric, r.Value[1]))
	}
	return out
}

// firing returns the names of the alerts pending or firing, sorted.
func (p *promServer) firing(t *testing.T, ctx context.Context) []string {
	t.Helper()
	var res struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	p.api(t, ctx, "/api/v1/alerts", &res)
	var names []string
	for _, a := range res.Alerts {
		if !slices.Contains(names, a.Labels["alertname"]) {
			names = append(names, a.Labels["alertname"])
		}
	}
	sort.Strings(names)
	return names
}

// api gets path from Prometheus's HTTP API and decodes its data into v.
func (p *promServer) api(t *testing.T, ctx context.Context, path string, v any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Status != "success" {
		t.Fatalf("GET %s: %s %s (%v)", path, resp.Status, env.Error, errors.Join(err))
	}
	if err := json.Unmarshal(env.Data, v); err != nil {
		t.Fatalf("GET %s: decode %s: %v", path, env.Data, err)
	}
}

// rulesDoc is the part of a rules file this test reads and rewrites.
type rulesDoc struct {
	Groups []struct {
		Name  string           `yaml:"name"`
		Rules []map[string]any `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleNames struct{ records, alerts []string }

func readRulesDoc(t *testing.T) rulesDoc {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc rulesDoc
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return doc
}

func readRules(t *testing.T) ruleNames {
	var n ruleNames
	for _, g := range readRulesDoc(t).Groups {
		for _, r := range g.Rules {
			if name, ok := r["record"].(string); ok {
				n.records = append(n.records, name)
			}
			if name, ok := r["alert"].(string); ok {
				n.alerts = append(n.alerts, name)
			}
		}
	}
	if len(n.records) == 0 || len(n.alerts) == 0 {
		t.Fatalf("%s: %d recording and %d alerting rules, want some of each", rulesFile, len(n.records), len(n.alerts))
	}
	for _, a := range wantFiring {
		if !slices.Contains(n.alerts, a) {
			t.Fatalf("alert %s is not in %s", a, rulesFile)
		}
	}
	return n
}

// writeRules writes the rules file to path with every alert's `for` at 0.
func writeRules(t *testing.T, path string) {
	doc := readRulesDoc(t)
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if _, ok := r["for"]; ok {
				r["for"] = "0s"
			}
		}
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

type panelQuery struct{ name, expr string }

// dashboardQueries returns the query of every target of every panel and
// the selector of every variable query of the dashboard, with Grafana's
// variables replaced as a dashboard showing everything would: every job,
// every provider, and a rate interval of a minute (at least four scrape
// intervals, as Grafana's $__rate_interval is).
func dashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	vars := strings.NewReplacer("$job", ".*", "$provider", ".*", "$profile", ".*", "$__rate_interval", "1m")
	var qs []panelQuery
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			qs = append(qs, panelQuery{name: p.Title + "/" + tg.RefID, expr: vars.Replace(tg.Expr)})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		sel, ok := strings.CutPrefix(v.Definition, "label_values(")
		if i := strings.LastIndexByte(sel, ','); ok && i > 0 {
			qs = append(qs, panelQuery{name: "variable " + v.Name, expr: vars.Replace(sel[:i])})
		} else {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, v.Definition)
		}
	}
	if len(qs) < 10 {
		t.Fatalf("%s: only %d queries found", dashboardFile, len(qs))
	}
	return qs
}
