// Command upstreamdouble serves a scripted OpenAI-compatible upstream
// (proxytest.Upstream) on 127.0.0.1 for the real-client tests in e2e/.
//
// It listens on a free loopback port, prints its root URL
// ("http://127.0.0.1:PORT") as the first line on standard output, and serves
// until its standard input closes: the test that starts it holds the pipe,
// so the double never outlives the test, even one that crashed.
//
// Each chat completion request names its scenario in the X-Test-Scenario
// header, or else in its last user message as "scenario:NAME". Scenarios
// are listed in scenarios below; an unknown or missing one answers 400, so
// a test that forgot to pick one fails loudly, except that a request for
// one of the simulated models (sim.Models) naming no scenario is answered
// by that model, as a DeepSeek serving it would. GET /v1/models answers a
// fixed list. GET /_double/requests?request_id=ID returns, as a JSON array,
// the requests the double received with that X-Request-Id header (every
// request when the parameter is empty), so a test can check what the
// gateway sent upstream.
//
// With -record=false it keeps nothing of what it received (and
// /_double/requests answers an empty array): for load runs, whose millions
// of requests would otherwise fill its memory.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
	"github.com/phasegate/phasegate/tokens"
)

func main() {
	record := flag.Bool("record", true, "keep every request received, for GET /_double/requests")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, *record); err != nil {
		fmt.Fprintln(os.Stderr, "upstreamdouble:", err)
		os.Exit(1)
	}
}

// run serves until stdin reaches EOF (or fails), then closes the server.
// record says whether requests are kept for /_double/requests.
func run(stdin io.Reader, stdout io.Writer, record bool) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: newHandler(record), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if _, err := fmt.Fprintf(stdout, "http://%s\n", ln.Addr()); err != nil {
		_ = srv.Close()
		<-served
		return fmt.Errorf("print address: %w", err)
	}
	_, _ = io.Copy(io.Discard, stdin)
	// Close, not Shutdown: a scenario may hold a stream open, and the test
	// that owned this double is gone.
	_ = srv.Close()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

func newHandler(record bool) http.Handler {
	up := proxytest.NewUpstream(respond)
	mux := http.NewServeMux()
	if !record {
		mux.HandleFunc("GET /_double/requests", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, "[]\n")
		})
		mux.HandleFunc("/", serveUnrecorded)
		return mux
	}
	mux.HandleFunc("GET /_double/requests", func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("request_id")
		out := []received{}
		for _, rec := range up.Received() {
			if id != "" && rec.Header.Get("X-Request-Id") != id {
				continue
			}
			out = append(out, newReceived(rec))
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.Handle("/", up)
	return mux
}

// serveUnrecorded answers as proxytest.Upstream does, keeping nothing.
func serveUnrecorded(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rec := proxytest.Received{Method: r.Method, Path: r.URL.Path, Header: r.Header, Body: body}
	respond(rec).Serve(r.Context(), w)
}

// received is a recorded request as /_double/requests shows it. Body is the
// body as it came when it is JSON, else a JSON string of it.
type received struct {
	Method string              `json:"method"`
	Path   string              `json:"path"`
	Header map[string][]string `json:"header"`
	Body   json.RawMessage     `json:"body"`
}

func newReceived(rec proxytest.Received) received {
	body := json.RawMessage(rec.Body)
	if !json.Valid(body) {
		body, _ = json.Marshal(string(rec.Body))
	}
	return received{Method: rec.Method, Path: rec.Path, Header: rec.Header, Body: body}
}

// Header and message prefix that pick a scenario.
const (
	scenarioHeader = "X-Test-Scenario"
	scenarioPrefix = "scenario:"
)

// The scripted data. The tests in e2e/test hold the same values as
// literals: change both together.
var (
	// textPieces is the content of the text scenario, one delta each.
	textPieces = []string{"Hello", ", ", "wörld", "! ", "🚀", " done."}
	// reasoningPieces and reasoningAnswer make the reasoning scenario.
	reasoningPieces = []string{"The user ", "wants ", "a check."}
	reasoningAnswer = "Checked."
	// toolArgPieces are the arguments of the tool-call scenario, split as a
	// model splits them: inside keys, numbers, escapes and non-ASCII text.
	// Their odd spacing, key order and the number 2.50 must reach the
	// client byte for byte.
	toolArgPieces = []string{
		`{"ci`, `ty": "Zü`, `rich", "when":{"d`, `ays":3,"from":"2026-01-01"},`,
		`"units":"metric" ,"limit":2.5`, `0,"note":"say \`, `"hi\"\n\`, `tthen ☃`,
		` 🚀 <b>&amp;</b>","tags":[],`, `"extra":null}`,
	}
	toolCallID   = "call_e2e_0001"
	toolCallName = "get_weather"
	// duplicateAnswer is the text answer of the duplicate scenario.
	duplicateAnswer = "Using the earlier result: sunny."
	// usage is what every scenario reports, with DeepSeek's cache fields,
	// which a lossy gateway would drop.
	usageExtra = map[string]any{"prompt_cache_hit_tokens": 5, "prompt_cache_miss_tokens": 6,
		"completion_tokens_details": map[string]any{"reasoning_tokens": 3}}
	usagePrompt, usageCompletion = 11, 7
	// models is what GET /v1/models lists.
	models = []string{"e2e-model-a", "e2e-model-b"}
)

// scenario answers one parsed chat completion request.
type scenario func(req *chat.Request) sim.Reply

var scenarios = map[string]scenario{
	// text: plain content, with a keep-alive comment mid-stream.
	"text": func(req *chat.Request) sim.Reply {
		if !req.Stream {
			return sim.Completion(req.Model, map[string]any{"content": strings.Join(textPieces, "")}, chat.FinishStop, usage())
		}
		s := sim.NewStream(req.Model).Role().Content(textPieces[:3]...).KeepAlive().Content(textPieces[3:]...)
		return finish(req, s, chat.FinishStop)
	},
	// reasoning: DeepSeek thinking mode, reasoning_content before content.
	"reasoning": func(req *chat.Request) sim.Reply {
		if !req.Stream {
			return sim.Completion(req.Model, map[string]any{"content": reasoningAnswer,
				"reasoning_content": strings.Join(reasoningPieces, "")}, chat.FinishStop, usage())
		}
		s := sim.NewStream(req.Model).Role().Reasoning(reasoningPieces...).Content(reasoningAnswer)
		return finish(req, s, chat.FinishStop)
	},
	// tool-call: one tool call, its arguments fragmented across deltas.
	"tool-call": func(req *chat.Request) sim.Reply {
		if !req.Stream {
			call := chat.ToolCall{ID: toolCallID, Type: "function",
				Function: chat.FunctionCall{Name: toolCallName, Arguments: strings.Join(toolArgPieces, "")}}
			return sim.Completion(req.Model, map[string]any{"content": nil, "tool_calls": []chat.ToolCall{call}},
				chat.FinishToolCalls, usage())
		}
		s := sim.NewStream(req.Model).Role().ToolCall(0, toolCallID, toolCallName, toolArgPieces...)
		return finish(req, s, chat.FinishToolCalls)
	},
	// duplicate: a model that repeats a call. Asked with a history whose
	// last message is the client's, it calls get_weather for Paris again
	// (spaced differently from any earlier call); asked again after the
	// gateway appended a message of its own (a notice, as the two-stage
	// guard does), it answers in text.
	"duplicate": func(req *chat.Request) sim.Reply {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == chat.RoleSystem {
			return finish(req, sim.NewStream(req.Model).Role().Content(duplicateAnswer), chat.FinishStop)
		}
		s := sim.NewStream(req.Model).Role().ToolCall(0, "call_e2e_dup_2", toolCallName, `{"city":`, ` "Paris"}`)
		return finish(req, s, chat.FinishToolCalls)
	},
	// rate-limit: OpenAI's 429, with its headers; its Retry-After is longer
	// than the gateway waits before a retry (UPSTREAM_RETRY_MAX_WAIT), so
	// the gateway relays it at once.
	"rate-limit": func(*chat.Request) sim.Reply {
		r := sim.Error(http.StatusTooManyRequests, "Rate limit reached for requests", "requests", "rate_limit_exceeded")
		r.Header = http.Header{
			"Retry-After":                    {"60"},
			"X-Ratelimit-Limit-Requests":     {"60"},
			"X-Ratelimit-Remaining-Requests": {"0"},
		}
		return r
	},
	// truncated: the body ends cleanly mid-answer, without a finish or
	// [DONE].
	"truncated": func(req *chat.Request) sim.Reply {
		return sim.NewStream(req.Model).Role().Content("partial ").Reply()
	},
	// cut: the connection drops mid-answer, without a finish or [DONE].
	"cut": func(req *chat.Request) sim.Reply {
		r := sim.NewStream(req.Model).Role().Content("partial ").Reply()
		r.Cut = true
		return r
	},
	// history: says what it received, for the truncation tests. The
	// content is a JSON object {"messages": N, "prompt_tokens": T}, T the
	// o200k_base count of the messages and tools (what the gateway counts
	// for gpt-4o), which is also the usage's prompt_tokens: an upstream
	// whose tokenizer is tiktoken, so the gateway's learned ratio stays 1.
	"history": func(req *chat.Request) sim.Reply {
		prompt, err := historyTokens(req)
		if err != nil {
			return sim.Error(http.StatusInternalServerError, "upstreamdouble: count: "+err.Error(), "server_error", "count_failed")
		}
		b, _ := json.Marshal(map[string]int{"messages": len(req.Messages), "prompt_tokens": prompt})
		u := map[string]any{"prompt_tokens": prompt, "completion_tokens": usageCompletion, "total_tokens": prompt + usageCompletion}
		if !req.Stream {
			return sim.Completion(req.Model, map[string]any{"content": string(b)}, chat.FinishStop, u)
		}
		s := sim.NewStream(req.Model).Role().Content(string(b)).Finish(chat.FinishStop)
		if req.IncludeUsage {
			s.Usage(prompt, usageCompletion, nil)
		}
		return s.Done().Reply()
	},
	// agent-text: a long answer for load runs, agentChunks content deltas,
	// each agentDelay after the one before.
	"agent-text": func(req *chat.Request) sim.Reply {
		s := sim.NewStream(req.Model).Role().Content(agentPieces(agentChunks)...)
		return paced(finish(req, s, chat.FinishStop))
	},
	// agent-tool: an agent's turn for load runs: agentToolText content
	// deltas, then get_weather with toolArgPieces, each delta agentDelay
	// after the one before.
	"agent-tool": func(req *chat.Request) sim.Reply {
		s := sim.NewStream(req.Model).Role().Content(agentPieces(agentToolText)...).
			ToolCall(0, toolCallID, toolCallName, toolArgPieces...)
		return paced(finish(req, s, chat.FinishToolCalls))
	},
	// leaked-call: DeepSeek writes its tool call into the content as V3
	// special tokens, split across deltas, and finishes with stop.
	"leaked-call": func(req *chat.Request) sim.Reply {
		if !req.Stream {
			return sim.Completion(req.Model, map[string]any{"content": leakedText + strings.Join(leakedPieces, "")}, chat.FinishStop, usage())
		}
		s := sim.NewStream(req.Model).Role().Content(leakedText).Content(leakedPieces...)
		return finish(req, s, chat.FinishStop)
	},
	// run-tests: a model that runs the tests again; once the gateway
	// appended a notice of its own, it answers in text.
	"run-tests": func(req *chat.Request) sim.Reply {
		if req.Messages[len(req.Messages)-1].Role == chat.RoleSystem {
			if !req.Stream {
				return sim.Completion(req.Model, map[string]any{"content": runTestsAnswer}, chat.FinishStop, usage())
			}
			return finish(req, sim.NewStream(req.Model).Role().Content(runTestsAnswer), chat.FinishStop)
		}
		if !req.Stream {
			call := chat.ToolCall{ID: runTestsCallID, Type: "function", Function: chat.FunctionCall{Name: "run_tests", Arguments: "{}"}}
			return sim.Completion(req.Model, map[string]any{"content": nil, "tool_calls": []chat.ToolCall{call}}, chat.FinishToolCalls, usage())
		}
		s := sim.NewStream(req.Model).Role().ToolCall(0, runTestsCallID, "run_tests", "{", "}")
		return finish(req, s, chat.FinishToolCalls)
	},
	// thinking: DeepSeek's thinking mode. An assistant tool-call message
	// without reasoning_content gets DeepSeek's 400. After a tool result
	// it answers with the reasoning_content it got back for the call;
	// otherwise it reasons and calls get_weather.
	"thinking": func(req *chat.Request) sim.Reply {
		got := ""
		for i, m := range req.Messages {
			if m.Role != chat.RoleAssistant || len(m.ToolCalls) == 0 {
				continue
			}
			if m.ReasoningContent == nil {
				return sim.Error(http.StatusBadRequest,
					fmt.Sprintf("Missing `reasoning_content` field in the assistant message at message index %d. For more information, please refer to https://api-docs.deepseek.com/guides/thinking_mode#tool-calls", i),
					"invalid_request_error", "invalid_request_error")
			}
			got = *m.ReasoningContent
		}
		if req.Messages[len(req.Messages)-1].Role == chat.RoleTool {
			if !req.Stream {
				return sim.Completion(req.Model, map[string]any{"content": thinkingEcho + got, "reasoning_content": "Answer."}, chat.FinishStop, usage())
			}
			s := sim.NewStream(req.Model).Role().Reasoning("Answer.").Content(thinkingEcho + got)
			return finish(req, s, chat.FinishStop)
		}
		if !req.Stream {
			call := chat.ToolCall{ID: thinkingCallID, Type: "function", Function: chat.FunctionCall{Name: toolCallName, Arguments: `{"city": "Oslo"}`}}
			return sim.Completion(req.Model, map[string]any{"content": nil, "reasoning_content": strings.Join(thinkingPieces, ""),
				"tool_calls": []chat.ToolCall{call}}, chat.FinishToolCalls, usage())
		}
		s := sim.NewStream(req.Model).Role().Reasoning(thinkingPieces...).
			ToolCall(0, thinkingCallID, toolCallName, `{"city":`, ` "Oslo"}`)
		return finish(req, s, chat.FinishToolCalls)
	},
	// busy-once: the first request with a given body ends at once with
	// DeepSeek's insufficient_system_resource; the same body again is
	// answered.
	"busy-once": func(req *chat.Request) sim.Reply {
		first := firstTime("busy-once", req)
		switch {
		case !req.Stream && first:
			return sim.Completion(req.Model, map[string]any{"content": ""}, "insufficient_system_resource", usage())
		case !req.Stream:
			return sim.Completion(req.Model, map[string]any{"content": transientAnswer}, chat.FinishStop, usage())
		case first:
			return finish(req, sim.NewStream(req.Model).Role(), "insufficient_system_resource")
		}
		return finish(req, sim.NewStream(req.Model).Role().Content(transientAnswer), chat.FinishStop)
	},
	// cut-once: the first request with a given body has its connection
	// cut after the opening chunk (before any byte when not streaming);
	// the same body again is answered.
	"cut-once": func(req *chat.Request) sim.Reply {
		if firstTime("cut-once", req) {
			r := sim.Reply{Cut: true}
			if req.Stream {
				r = sim.NewStream(req.Model).Role().Reply()
				r.Cut = true
			}
			return r
		}
		if !req.Stream {
			return sim.Completion(req.Model, map[string]any{"content": transientAnswer}, chat.FinishStop, usage())
		}
		return finish(req, sim.NewStream(req.Model).Role().Content(transientAnswer), chat.FinishStop)
	},
}

// The data of the DeepSeek scenarios, also literals in
// e2e/test/deepseek.test.mjs.
var (
	leakedText   = "Let me check the weather."
	leakedPieces = []string{"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "function", "<｜tool▁sep｜>", "get_weather",
		"\n```json\n", `{"city": `, `"Paris"}`, "\n```", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"}
	runTestsCallID  = "call_e2e_run_tests"
	runTestsAnswer  = "The tests still fail the same way."
	thinkingPieces  = []string{"The user wants ", "the weather in Oslo."}
	thinkingCallID  = "call_e2e_think_1"
	thinkingEcho    = "reasoning_content received: "
	transientAnswer = "Answered after a transient end."
)

// The load scenarios: agent-text streams agentChunks content deltas,
// agent-tool agentToolText and a tool call, every delta agentDelay after the
// one before, so a stream lasts about 2.4 s (agent-text) or 1.8 s (agent-tool)
// at the double and anything longer is the path in between.
const (
	agentChunks   = 120
	agentToolText = 80
	agentDelay    = 20 * time.Millisecond
)

// agentText is what the load scenarios say, word by word, over and over.
var agentText = strings.Fields("I'll start by reading the failing test to see what it expects, " +
	"then look at the handler it calls. The error says the response was closed early, " +
	"so the stream is probably not flushed before the deadline. Let me check the config " +
	"and the retry path — 3 places set the timeout, and one of them uses `time.Second * 0`.")

// agentPieces returns n deltas of agentText, each a word and its space.
func agentPieces(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = agentText[i%len(agentText)] + " "
	}
	return out
}

// paced makes every event of r after the first wait agentDelay.
func paced(r sim.Reply) sim.Reply {
	for i := 1; i < len(r.Events); i++ {
		r.Events[i].Delay = agentDelay
	}
	return r
}

// seen holds the bodies the *-once scenarios answered already.
var seen sync.Map

// firstTime reports whether scenario sees this request body for the first
// time.
func firstTime(scenario string, req *chat.Request) bool {
	_, loaded := seen.LoadOrStore(scenario+"\x00"+string(req.Encode()), true)
	return !loaded
}

// historyCounter counts for the history scenario; built on first use, so
// the other scenarios do not load an encoding.
var historyCounter = sync.OnceValues(func() (*tokens.Counter, error) {
	return tokens.New(tokens.Config{Default: tokens.Limits{ContextWindow: 1 << 30, Encoding: tokens.EncodingO200K}})
})

// historyTokens is the o200k_base count of a request's messages and tools,
// with the message framing.
func historyTokens(req *chat.Request) (int, error) {
	c, err := historyCounter()
	if err != nil {
		return 0, err
	}
	f, err := c.Fit(req.Model, req.Messages, req.Tools, 0, 0)
	if err != nil {
		return 0, err
	}
	return f.PromptTokens + f.DroppedTokens, nil
}

// finish ends a stream: the finish reason, the usage chunk when the client
// asked for it, [DONE].
func finish(req *chat.Request, s *sim.Stream, reason string) sim.Reply {
	s.Finish(reason)
	if req.IncludeUsage {
		s.Usage(usagePrompt, usageCompletion, usageExtra)
	}
	return s.Done().Reply()
}

func usage() map[string]any {
	u := map[string]any{"prompt_tokens": usagePrompt, "completion_tokens": usageCompletion, "total_tokens": usagePrompt + usageCompletion}
	for k, v := range usageExtra {
		u[k] = v
	}
	return u
}

// respond is the double's proxytest.Responder.
func respond(r proxytest.Received) sim.Reply {
	switch {
	case r.Method == http.MethodGet && r.Path == "/v1/models":
		data := make([]any, 0, len(models))
		for _, m := range models {
			data = append(data, map[string]any{"id": m, "object": "model", "created": 1767225600, "owned_by": "upstreamdouble"})
		}
		b, _ := json.Marshal(map[string]any{"object": "list", "data": data})
		return sim.Reply{Body: b}
	case r.Method == http.MethodPost && r.Path == "/v1/chat/completions":
	default:
		return sim.Error(http.StatusNotFound, "upstreamdouble does not serve "+r.Method+" "+r.Path, "invalid_request_error", "unknown_url")
	}
	req, err := chat.ParseRequest(r.Body)
	if err != nil {
		e := chat.AsError(err)
		return sim.Reply{Status: e.Status, Body: e.Body()}
	}
	name := scenarioOf(r.Header, req)
	if name == "" && slices.Contains(sim.Models, req.Model) {
		// A simulated model behind a DeepSeek provider: the agent suites'
		// thinking session, which needs the gateway's DeepSeek repairs.
		return sim.Answer(r.Method, r.Path, r.Body)
	}
	s, ok := scenarios[name]
	if !ok {
		return sim.Error(http.StatusBadRequest,
			fmt.Sprintf("upstreamdouble: unknown scenario %q: set the %s header or end the last user message with %sNAME", name, scenarioHeader, scenarioPrefix),
			"invalid_request_error", "unknown_scenario")
	}
	return s(req)
}

// scenarioOf reads the scenario from the header, or else from the last user
// message.
func scenarioOf(h http.Header, req *chat.Request) string {
	if s := h.Get(scenarioHeader); s != "" {
		return s
	}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == chat.RoleUser {
			text := strings.TrimSpace(req.Messages[i].Text())
			if i := strings.LastIndex(text, scenarioPrefix); i >= 0 {
				return strings.TrimSpace(text[i+len(scenarioPrefix):])
			}
			return ""
		}
	}
	return ""
}
