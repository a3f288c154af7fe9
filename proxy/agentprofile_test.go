package proxy_test

// End-to-end tests of the agent profile: a long legitimate session and
// cosmetic loops, run by the go-openai client through the real gateway in
// front of a scripted DeepSeek.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// apStep is one call of a scripted session and what the client's tool
// returns for it.
type apStep struct{ name, args, result string }

func apShell(cmd, result string) apStep {
	return apStep{"run_shell", fmt.Sprintf(`{"command":%q}`, cmd), result}
}

// apSession is a 20-call coding session: explore, read, then edit and
// re-run the same test command after every edit (the same output twice
// included), poll a build whose status changes.
func apSession() []apStep {
	s := []apStep{apShell("ls", "cmd pkg"), apShell("grep -rn Timeout cmd", ""), apShell("grep -rn Timeout pkg", "pkg/dial.go:9"),
		{"read_file", `{"path":"pkg/dial.go"}`, "v1"}, apShell("go test ./pkg", "FAIL TestDial")}
	for i := range 5 {
		s = append(s, apStep{"edit_file", fmt.Sprintf(`{"path":"pkg/dial.go","edit":%d}`, i), "edited"},
			apShell("go test ./pkg", map[bool]string{true: "ok", false: "FAIL TestDial"}[i == 4]))
	}
	s = append(s, apStep{"read_file", `{"path":"pkg/dial.go"}`, "v6"}, apShell("make release", "job 1"))
	for _, st := range []string{"queued", "running 50%", "done"} {
		s = append(s, apShell("make status", st))
	}
	return s
}

// apLoop is the loop a model falls into once it has run lead: call n of
// the loop, forever.
type apLoop func(n int) apStep

var apLoops = map[string]apLoop{
	// Code-interpreter agents on DeepSeek that keep "verifying" a finished
	// task with execute_code calls that differ a little (after
	// NousResearch/hermes-agent issue 37255). No two calls are written
	// alike, so the exact-duplicate rule alone never stops it.
	"cosmetic execute_code": func(n int) apStep {
		code := []string{"print('done')", `print("done")`, "print('done')  # verify", "print( 'done' )"}[n%4] + strings.Repeat(" ", n/4)
		return apStep{"execute_code", fmt.Sprintf(`{"code":%q}`, code), "done\n"}
	},
	// A model that says it will stop the loop and sends the same command.
	"same command again": func(int) apStep { return apShell("npm run build", "Error: Cannot find module 'x'") },
}

// apPersona follows script (the session, then loop forever when set):
// the next call is the one after those the turn executed, whatever the
// notices said. Offered no tools, it answers.
func apPersona(session []apStep, loop apLoop) tsPersona {
	return func(st tsState) *sim.Stream {
		s := sim.NewStream(tsModel).Role()
		k := len(st.executed)
		if !st.tools || (loop == nil && k >= len(session)) {
			return s.Content(fmt.Sprintf("Final answer after %d tool results.", k)).Finish("stop")
		}
		var next apStep
		if k < len(session) {
			next = session[k]
		} else {
			next = loop(k - len(session) + st.notices)
		}
		if st.notices > 0 {
			s = s.Content("Let me stop this loop.")
		}
		return s.Reasoning("Next step.").ToolCall(0, fmt.Sprintf("call_%d_%d", k, st.notices), next.name, next.args).Finish("tool_calls")
	}
}

// apGateway serves the guard with the given configured profile.
func apGateway(t *testing.T, persona tsPersona, profile protocol.Profile) *apClient {
	t.Helper()
	_, usrv := proxytest.NewServer(t, tsDeepSeek(t, persona))
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}, GuardProfile: profile}
	gw := serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
	c := openai.DefaultConfig("sk-client")
	c.BaseURL = gw.URL + "/v1"
	c.HTTPClient = gw.Client()
	return &apClient{client: openai.NewClientWithConfig(c), url: gw.URL}
}

type apClient struct {
	client *openai.Client
	url    string
}

// run is the agent's loop: send, run the one tool call, send again, until
// the model answers. It returns the calls the client ran and the answer.
func (a *apClient) run(t *testing.T, results func(k int, c openai.ToolCall) string) (ran []openai.ToolCall, answer string) {
	t.Helper()
	ctx := tsContext(t)
	var tools []openai.Tool
	for _, name := range []string{"run_shell", "read_file", "edit_file", "execute_code"} {
		tools = append(tools, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: name, Parameters: json.RawMessage(`{"type":"object"}`)}})
	}
	msgs := []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "Fix the dial timeout."}}
	for range 40 {
		resp, err := a.client.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: tsModel, Messages: msgs, Tools: tools})
		if err != nil {
			t.Fatalf("request %d: %v", len(ran)+1, err)
		}
		m := resp.Choices[0].Message
		if len(m.ToolCalls) == 0 {
			return ran, m.Content
		}
		c := m.ToolCalls[0]
		msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ReasoningContent: m.ReasoningContent, ToolCalls: []openai.ToolCall{c}},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: c.ID, Content: results(len(ran), c)})
		ran = append(ran, c)
	}
	t.Fatal("the agent loop did not end within 40 requests")
	return nil, ""
}

// TestAgentProfileSession: a 20-call session whose test command repeats
// after every edit (its output the same twice in a row) runs to its end
// untouched under the agent profile; the strict profile cuts it at 3.
func TestAgentProfileSession(t *testing.T) {
	session := apSession()
	if len(session) != 20 {
		t.Fatalf("the session has %d calls, want 20", len(session))
	}
	results := func(k int, c openai.ToolCall) string {
		if c.Function.Name != session[k].name || c.Function.Arguments != session[k].args {
			t.Errorf("call %d: the client got %s(%s), want %s(%s)", k, c.Function.Name, c.Function.Arguments, session[k].name, session[k].args)
		}
		return session[k].result
	}
	ran, answer := apGateway(t, apPersona(session, nil), protocol.ProfileAgent).run(t, results)
	if len(ran) != 20 || answer != "Final answer after 20 tool results." {
		t.Errorf("agent profile: the client ran %d calls and got %q; want all 20 and the final answer", len(ran), answer)
	}
	ran, answer = apGateway(t, apPersona(session, nil), protocol.ProfileStrict).run(t, results)
	if len(ran) != 3 || !strings.Contains(answer, "Final answer after 3") {
		t.Errorf("strict profile: the client ran %d calls and got %q; want 3 and the forced answer", len(ran), answer)
	}
}

// TestAgentProfileLoops: each kind of loop ends with a final answer
// within 3 wasted executions (executions of the loop whose call, up to
// form, and result the turn had seen already), and the client was shown
// why.
func TestAgentProfileLoops(t *testing.T) {
	lead := apSession()[:5]
	for name, loop := range apLoops {
		t.Run(name, func(t *testing.T) {
			wasted := 0
			seen := map[string]bool{}
			results := func(k int, c openai.ToolCall) string {
				s := apStep{}
				if k < len(lead) {
					s = lead[k]
				} else {
					s = loop(k - len(lead))
					if seen[s.name+s.result] {
						wasted++
					}
					seen[s.name+s.result] = true
				}
				return s.result
			}
			ran, answer := apGateway(t, apPersona(lead, loop), protocol.ProfileAgent).run(t, results)
			if wasted > 3 || len(ran) > len(lead)+4 {
				t.Errorf("the client ran %d calls, %d of them wasted; want at most 3 wasted", len(ran), wasted)
			}
			if !strings.Contains(answer, "**System Notice**: refused \"") {
				t.Errorf("answer %q shows no notice of the refused repeat", answer)
			}
			if !strings.Contains(answer, "Final answer after") {
				t.Errorf("answer %q: want the model's final answer", answer)
			}
		})
	}
}

// TestAgentProfileHeader: a request may tighten the configured profile
// (agent to strict), never loosen it; a loosening or bad value is an
// OpenAI-style 400 whose param names the header and whose message says
// what to send.
func TestAgentProfileHeader(t *testing.T) {
	session := apSession()
	strict := apGateway(t, apPersona(session, nil), protocol.ProfileStrict)
	agent := apGateway(t, apPersona(session, nil), protocol.ProfileAgent)
	body := `{"model":"` + tsModel + `","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"run_shell"}}]}`
	tests := []struct {
		name, url, header string
		status            int
		profile, errText  string
	}{
		{"agent tightened to strict", agent.url, "strict", http.StatusOK, "strict", ""},
		{"agent kept", agent.url, "", http.StatusOK, "agent", ""},
		{"strict loosened", strict.url, "agent", http.StatusBadRequest, "", "agent would loosen the guard of model " + tsModel + ", which runs under the strict profile; a request may only tighten its guard: send strict, or leave the header out"},
		{"not a profile", agent.url, "lenient", http.StatusBadRequest, "", "must be strict or agent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(tsContext(t), http.MethodPost, tt.url+"/v1/chat/completions", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if tt.header != "" {
				req.Header.Set(proxy.ProfileHeader, tt.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			if got := resp.Header.Get(proxy.ProfileHeader); got != tt.profile {
				t.Errorf("profile header %q, want %q", got, tt.profile)
			}
			if tt.errText != "" {
				var e struct {
					Error struct{ Message, Type, Param string }
				}
				if json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error.Message, tt.errText) || e.Error.Type != "invalid_request_error" ||
					e.Error.Param != proxy.ProfileHeader {
					t.Errorf("error body %s, want an invalid_request_error saying %q, its param %s", b, tt.errText, proxy.ProfileHeader)
				}
			}
		})
	}
}
