package proxy_test

// End-to-end tests of GUARD_MODE=observe and of rolling the guard out by
// project: the go-openai client runs a looping agent through the real
// gateway in front of a scripted DeepSeek.

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
)

// obLoop is the loop of the tests: one listing, then the same build
// command, failing the same way, for ever.
func obLoop() ([]apStep, apLoop) { return apSession()[:1], apLoops["same command again"] }

// obGateway serves the guard (agent profile) with metrics, configured by
// cfg, in front of a DeepSeek that loops.
func obGateway(t *testing.T, cfg proxy.Config) string {
	t.Helper()
	lead, loop := obLoop()
	_, usrv := proxytest.NewServer(t, tsDeepSeek(t, apPersona(lead, loop)))
	cfg.Providers = []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1", APIKey: "sk-upstream"}}
	cfg.GuardProfile = protocol.ProfileAgent
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, []string{"deepseek"})
	gw := serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, Metrics: m, Gatherer: reg,
		TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{Metrics: m}, nil)})
	return gw.URL
}

// obClient is a go-openai client of the gateway at url that presents key
// and names project (none when "").
func obClient(url, key, project string) *openai.Client {
	c := openai.DefaultConfig(key)
	c.BaseURL = url + "/v1"
	c.HTTPClient = &http.Client{Transport: obProject{project}}
	return openai.NewClientWithConfig(c)
}

type obProject struct{ project string }

func (p obProject) RoundTrip(r *http.Request) (*http.Response, error) {
	if p.project != "" {
		r = r.Clone(r.Context())
		r.Header.Set("X-Project-Id", p.project)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// obRun is the agent's loop, bounded to n requests: it runs every call it
// gets. It returns the calls run, the answer (if the model gave one) and
// whether any content the client got was a guard notice.
func obRun(t *testing.T, client *openai.Client, n int) (ran []openai.ToolCall, answer string, notice bool) {
	t.Helper()
	lead, loop := obLoop()
	tools := []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "run_shell", Parameters: json.RawMessage(`{"type":"object"}`)}}}
	msgs := []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "Build it."}}
	for range n {
		m := obStream(t, client, openai.ChatCompletionRequest{Model: tsModel, Messages: msgs, Tools: tools, Stream: true})
		notice = notice || strings.Contains(m.Content, "System Notice")
		if len(m.ToolCalls) == 0 {
			return ran, m.Content, notice
		}
		c := m.ToolCalls[0]
		want := loop(len(ran) - len(lead))
		if len(ran) < len(lead) {
			want = lead[len(ran)]
		}
		if c.Function.Name != want.name || c.Function.Arguments != want.args {
			t.Errorf("call %d: the client got %s(%s), want the model's %s(%s)", len(ran), c.Function.Name, c.Function.Arguments, want.name, want.args)
		}
		msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ReasoningContent: m.ReasoningContent, ToolCalls: []openai.ToolCall{c}},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: c.ID, Content: want.result})
		ran = append(ran, c)
	}
	return ran, "", notice
}

// obStream sends req as a stream (the double streams only) and gathers
// the message it streams.
func obStream(t *testing.T, client *openai.Client, req openai.ChatCompletionRequest) openai.ChatCompletionMessage {
	t.Helper()
	st, err := client.CreateChatCompletionStream(tsContext(t), req)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	defer st.Close()
	var m openai.ChatCompletionMessage
	for {
		c, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return m
		}
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if len(c.Choices) == 0 {
			continue
		}
		d := c.Choices[0].Delta
		m.Content += d.Content
		m.ReasoningContent += d.ReasoningContent
		for _, tc := range d.ToolCalls {
			if tc.Index == nil || *tc.Index >= len(m.ToolCalls) {
				m.ToolCalls = append(m.ToolCalls, openai.ToolCall{ID: tc.ID, Type: openai.ToolTypeFunction})
			}
			last := &m.ToolCalls[len(m.ToolCalls)-1]
			last.Function.Name += tc.Function.Name
			last.Function.Arguments += tc.Function.Arguments
		}
	}
}

// obCounters scrapes /metrics: the value of each series of the counter
// name, by its verdict label.
func obCounters(t *testing.T, url, name string) map[string]float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(tsContext(t), http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), name+`{verdict="`)
		if !ok {
			continue
		}
		verdict, rest, _ := strings.Cut(line, `"} `)
		v, err := strconv.ParseFloat(rest, 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", sc.Text(), err)
		}
		out[verdict] = v
	}
	return out
}

// TestObserveMode: the loop that enforce mode ends with a refusal and a
// final answer is forwarded call after call in observe mode, unchanged,
// and each call after the build failed three times in a row the same way
// is counted as the failing_streak the guard would have given it; the
// guard's own verdicts stay at 0.
func TestObserveMode(t *testing.T) {
	const requests = 8
	enforce := obGateway(t, proxy.Config{})
	ran, answer, notice := obRun(t, obClient(enforce, "sk-client", ""), requests)
	if answer == "" || !notice || len(ran) >= requests {
		t.Fatalf("enforce: the client ran %d calls, answer %q, notice %v; want the loop refused and a final answer", len(ran), answer, notice)
	}
	if got := obCounters(t, enforce, "phasegate_tool_calls_total"); got["failing_streak"] == 0 {
		t.Errorf("enforce: tool calls by verdict %v, want failing_streak refusals", got)
	}

	observe := obGateway(t, proxy.Config{GuardMode: protocol.ModeObserve})
	ran, answer, notice = obRun(t, obClient(observe, "sk-client", ""), requests)
	if len(ran) != requests || answer != "" || notice {
		t.Fatalf("observe: the client ran %d calls, answer %q, notice %v; want all %d calls forwarded, no notice", len(ran), answer, notice, requests)
	}
	// The requests judged the calls before them: the listing, the build
	// three times (each failing the same way), then three more of a
	// failing streak.
	want := map[string]float64{"forward": 4, "failing_streak": requests - 1 - 4}
	got := obCounters(t, observe, "phasegate_observed_tool_calls_total")
	for _, v := range metrics.ObservedVerdicts {
		if got[v] != want[v] {
			t.Errorf("observe: observed %s = %v, want %v (all: %v)", v, got[v], want[v], got)
		}
	}
	for v, n := range obCounters(t, observe, "phasegate_tool_calls_total") {
		if n != 0 {
			t.Errorf("observe: the guard judged %v calls %s itself; want none", n, v)
		}
	}
}

// TestObserveRollOutByProject: observe for every project but those the
// config file lists for enforcement; with client keys the project is the
// key's, so X-Project-Id cannot move a request into enforcement or out of
// it. A project's rule comes before its model's.
func TestObserveRollOutByProject(t *testing.T) {
	const requests = 8
	keys := []proxy.ClientKey{{Key: "sk-pay", Project: "payments"}, {Key: "sk-search", Project: "search"}, {Key: "sk-own"}}
	byProject := obGateway(t, proxy.Config{GuardMode: protocol.ModeObserve, MetricsOpen: true, ClientKeys: keys,
		GuardProjectModes: map[string]protocol.Mode{"payments": protocol.ModeEnforce}})
	byModel := obGateway(t, proxy.Config{GuardMode: protocol.ModeObserve, MetricsOpen: true, ClientKeys: keys,
		GuardModes:        []proxy.ModeRule{{Pattern: tsModel[:2] + "*", Mode: protocol.ModeEnforce}},
		GuardProjectModes: map[string]protocol.Mode{"key-3": protocol.ModeObserve}})
	tests := []struct {
		name, gw, key, project string
		enforced               bool
	}{
		{"listed project", byProject, "sk-pay", "", true},
		{"listed project, another named", byProject, "sk-pay", "search", true},
		{"project not listed", byProject, "sk-search", "", false},
		{"key of its own, naming a listed project", byProject, "sk-own", "payments", false},
		{"the model's rule", byModel, "sk-pay", "", true},
		{"the project's rule before the model's", byModel, "sk-own", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := obCounters(t, tt.gw, "phasegate_observed_tool_calls_total")
			ran, answer, notice := obRun(t, obClient(tt.gw, tt.key, tt.project), requests)
			after := obCounters(t, tt.gw, "phasegate_observed_tool_calls_total")
			observed := 0.0
			for v := range after {
				observed += after[v] - before[v]
			}
			if enforced := answer != "" && notice && len(ran) < requests; enforced != tt.enforced {
				t.Errorf("enforced = %v (the client ran %d calls, answer %q), want %v", enforced, len(ran), answer, tt.enforced)
			}
			if want := map[bool]float64{true: 0, false: requests - 1}[tt.enforced]; observed != want {
				t.Errorf("%v calls observed, want %v", observed, want)
			}
		})
	}
}
