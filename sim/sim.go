// Package sim is a simulated OpenAI-compatible upstream: the built-in
// models the gateway serves when no provider is configured, so it starts
// with no key and no network, and the replies and chunk streams they are
// written in. Transport serves the models in process, behind BaseURL.
// Tests may use the package as a double: its replies speak the wire
// exactly as DeepSeek and OpenAI do (tool calls fragmented across deltas
// with index, id and type on the first fragment only, reasoning_content, a
// usage chunk when stream_options.include_usage is set, keep-alive
// comments), and every answer carries a fresh id.
package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/phasegate/phasegate/chat"
)

// Names of the simulated models.
const (
	// Model answers like a well-behaved model: it calls the declared tool
	// that fits the user's message best once, with arguments its schema
	// accepts, then answers from the tool result.
	Model = "phasegate-sim"
	// LoopingModel plays a looping DeepSeek: it bursts parallel calls,
	// repeats executed calls, sends malformed arguments and calls tools
	// that were never declared, and answers only once it has no tools,
	// or, when the request states the gateway's rules, after the first
	// refusal.
	LoopingModel = "phasegate-sim-looping"
)

// Models lists the simulated models, as /v1/models shows them.
var Models = []string{Model, LoopingModel, LeakyModel, TestsModel, OrchestratorModel, SessionModel, VerifyModel,
	AgentSessionModel, AgentLoopModel, AgentCosmeticModel, AgentThinkingModel}

// Answer is the simulated models' reply to a request with method, path and
// body. It needs no key and no network: it answers /models, GET
// /models/{id} and /chat/completions from the request alone, streaming or not, with usage
// when asked; any other path is a 404.
func Answer(method, path string, body []byte) Reply {
	switch {
	case strings.HasSuffix(path, "/models"):
		return modelList()
	case strings.Contains(path, "/models/") && method == http.MethodGet:
		return model(path[strings.LastIndex(path, "/models/")+len("/models/"):])
	case strings.HasSuffix(path, "/chat/completions") && method == http.MethodPost:
	default:
		return Error(http.StatusNotFound, "the simulated model does not serve "+path, "invalid_request_error", "unknown_url")
	}
	req, err := chat.ParseRequest(body)
	if err != nil {
		e := chat.AsError(err)
		return Reply{Status: e.Status, Body: e.Body()}
	}
	return answer(req)
}

// Handler serves the simulated models over HTTP, with Answer. It keeps no
// state: one Handler serves any number of requests at once.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil {
			var err error
			if body, err = io.ReadAll(r.Body); err != nil {
				Error(http.StatusBadRequest, "read the request body: "+err.Error(), "invalid_request_error", "bad_body").Serve(r.Context(), w)
				return
			}
		}
		Answer(r.Method, r.URL.Path, body).Serve(r.Context(), w)
	})
}

func modelList() Reply {
	data := make([]any, 0, len(Models))
	for _, m := range Models {
		data = append(data, modelObject(m))
	}
	b, _ := json.Marshal(map[string]any{"object": "list", "data": data})
	return Reply{Body: b}
}

// model answers GET /models/{id}: the model object of any name, since the
// simulated model serves every model name (deepseek-v4-flash as well as
// phasegate-sim); a path that names no model is 404 model_not_found, as
// OpenAI answers an unknown model.
func model(id string) Reply {
	if id == "" || strings.ContainsAny(id, "/?# ") {
		return Error(http.StatusNotFound, "the model `"+id+"` does not exist", "invalid_request_error", "model_not_found")
	}
	b, _ := json.Marshal(modelObject(id))
	return Reply{Body: b}
}

func modelObject(id string) map[string]any {
	return map[string]any{"id": id, "object": "model", "created": 1767225600, "owned_by": "phasegate (simulated)"}
}

// turn is what the simulated model decides to say.
type turn struct {
	reasoning string
	text      string
	call      *chat.ToolCall
	// more are parallel calls after call.
	more []chat.ToolCall
}

func (t turn) allCalls() []chat.ToolCall {
	if t.call == nil {
		return nil
	}
	return append([]chat.ToolCall{*t.call}, t.more...)
}

// loopDecide plays the looping model. Its moves depend only on the
// request: the tool results of the turn and the system notices appended
// after them, so it loops the same way through any gateway.
func loopDecide(req *chat.Request) turn {
	if len(req.Tools) == 0 || toolChoiceNone(req) {
		return turn{reasoning: "No tools left; answer.", text: "Final answer (simulated): here is what the tools returned, summed up."}
	}
	st := readTurn(req)
	if st.heeds() {
		return turn{reasoning: "The gateway said its rules; stop.", text: "Final answer (simulated): here is what the tools returned, summed up."}
	}
	executed, notices := st.executed, st.notices
	call := func(id, name, args string) *chat.ToolCall {
		return &chat.ToolCall{ID: id, Type: "function", Function: chat.FunctionCall{Name: name, Arguments: args}}
	}
	if len(executed) == 0 {
		// A burst: the same call twice and another tool, in one response.
		first, second := loopTools(req.Tools)
		args := exampleArguments(first.Parameters)
		t := turn{reasoning: "Call everything at once.", text: "Let me look that up. ", call: call("call_loop_1", first.Name, args)}
		t.more = append(t.more, *call("call_loop_2", first.Name, args))
		if second != nil {
			t.more = append(t.more, *call("call_loop_3", second.Name, exampleArguments(second.Parameters)))
		}
		return t
	}
	prev := executed[0]
	id := fmt.Sprintf("call_loop_%d", len(executed)+notices+10)
	switch notices % 4 {
	case 1:
		cut := prev.Function.Arguments
		if len(cut) > 1 {
			cut = cut[:len(cut)-1]
		}
		return turn{reasoning: "Try again.", call: call(id, prev.Function.Name, cut)}
	case 2:
		return turn{reasoning: "Search instead.", call: call(id, "search_web", `{"query":"the same thing again"}`)}
	default:
		// The executed call again, spelled differently: same signature.
		return turn{reasoning: "Check once more.", text: "Let me check that again. ", call: call(id, prev.Function.Name, respell(prev.Function.Arguments))}
	}
}

// loopTools are the looping model's tools: first the declared shell tool
// (FindTools), else the first declared tool not named for an agent, else
// the first declared; second, for its burst, another declared tool: the
// read tool when there is one, else the next not named for an agent, nil
// when there is none. A coding agent's first tool is often the one that
// starts a subagent, which would make every call a new agent's turn.
func loopTools(tools []chat.Tool) (first chat.FunctionDef, second *chat.FunctionDef) {
	tb := FindTools(tools)
	i := slices.IndexFunc(tools, func(t chat.Tool) bool { return t.Function.Name == tb.Shell.Name })
	if tb.Shell.Name == "" {
		i = max(0, slices.IndexFunc(tools, func(t chat.Tool) bool { return !namesAgent(strings.ToLower(t.Function.Name)) }))
	}
	j := -1
	for k, t := range tools {
		switch {
		case k == i || namesAgent(strings.ToLower(t.Function.Name)):
		case t.Function.Name == tb.Read.Name, j < 0:
			j = k
		}
	}
	if j < 0 {
		return tools[i].Function, nil
	}
	return tools[i].Function, &tools[j].Function
}

// respell re-encodes a JSON object with spaces and its keys reversed: the
// same arguments to a signature, different bytes on the wire.
func respell(args string) string {
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &m) != nil || len(m) == 0 {
		return args
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(keys)))
	var b strings.Builder
	b.WriteString("{ ")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" , ")
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteString(" : ")
		b.Write(m[k])
	}
	b.WriteString(" }")
	return b.String()
}

func decide(req *chat.Request) turn {
	switch req.Model {
	case LoopingModel:
		return loopDecide(req)
	case LeakyModel:
		return leakDecide(req)
	case TestsModel:
		return testsDecide(req)
	case OrchestratorModel:
		return orchestratorDecide(req)
	case SessionModel:
		return sessionDecide(req)
	case VerifyModel:
		return verifyDecide(req)
	case AgentSessionModel, AgentLoopModel, AgentCosmeticModel, AgentThinkingModel:
		return agentDecide(req)
	}
	last := req.Messages[len(req.Messages)-1]
	switch {
	case last.Role == chat.RoleTool:
		result := last.Text()
		if len(result) > 80 {
			cut := 80
			for cut > 0 && !utf8.RuneStart(result[cut]) {
				cut-- // never inside a UTF-8 sequence
			}
			result = result[:cut] + "…"
		}
		return turn{reasoning: "The tool answered; summarise it.", text: "Simulated answer from the tool result: " + result}
	case len(req.Tools) > 0 && !toolChoiceNone(req):
		t := bestTool(req)
		return turn{reasoning: "A tool can answer this; call it.", call: &chat.ToolCall{
			ID: "call_sim_1", Type: "function", Function: chat.FunctionCall{Name: t.Name, Arguments: exampleArguments(t.Parameters)}}}
	default:
		said := ""
		for i := len(req.Messages) - 1; i >= 0; i-- {
			if req.Messages[i].Role == chat.RoleUser {
				said = req.Messages[i].Text()
				break
			}
		}
		return turn{reasoning: "Answer directly.", text: "This is phasegate's simulated model (no upstream is configured). You said: " + said}
	}
}

func toolChoiceNone(req *chat.Request) bool {
	raw, ok := req.Field("tool_choice")
	return ok && string(raw) == `"none"`
}

// answer is the simulated models' answer to req. It names the model req
// asked for, whatever it is, as the Responses door does: one identity rule
// on every door. The scripted agents' calls are made calls of the tools
// req declares.
func answer(req *chat.Request) Reply {
	say := decide(req)
	model := req.Model
	if (req.Model == SessionModel || req.Model == VerifyModel) && say.call != nil {
		c := onDeclared(req, *say.call)
		say.call = &c
	}
	prompt, completion := 0, len(strings.Fields(say.text))+len(strings.Fields(say.reasoning))
	for _, m := range req.Messages {
		prompt += len(strings.Fields(m.Text())) + 4
	}
	if say.call != nil {
		completion += len(say.call.Function.Arguments) / 4
	}
	usage := map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
	if !req.Stream {
		msg := map[string]any{"content": say.text, "reasoning_content": say.reasoning}
		finish := chat.FinishStop
		if calls := say.allCalls(); len(calls) > 0 {
			if say.text == "" {
				msg["content"] = nil
			}
			msg["tool_calls"] = calls
			finish = chat.FinishToolCalls
		}
		return Completion(model, msg, finish, usage)
	}
	s := NewStream(model).Role().Reasoning(words(say.reasoning)...)
	finish := chat.FinishStop
	if req.Model == LeakyModel || req.Model == OrchestratorModel {
		s.Content(pieces(say.text, 7)...) // markers split across chunks, as DeepSeek splits them
	} else {
		s.Content(words(say.text)...)
	}
	for i, c := range say.allCalls() {
		s.ToolCall(i, c.ID, c.Function.Name, pieces(c.Function.Arguments, 8)...)
		finish = chat.FinishToolCalls
	}
	s.Finish(finish)
	if req.IncludeUsage {
		s.Usage(prompt, completion, nil)
	}
	return s.Done().Reply()
}

// words splits text into words that keep their trailing space, so the
// pieces concatenate back to text.
func words(text string) []string {
	var out []string
	for len(text) > 0 {
		i := strings.IndexByte(text, ' ')
		if i < 0 {
			out = append(out, text)
			break
		}
		out = append(out, text[:i+1])
		text = text[i+1:]
	}
	return out
}

// pieces cuts s into pieces of about n bytes, never inside a UTF-8
// sequence (each piece travels as a JSON string of its own).
func pieces(s string, n int) []string {
	if s == "" {
		return []string{""}
	}
	var out []string
	for len(s) > n {
		i := n
		for i < len(s) && !utf8.RuneStart(s[i]) {
			i++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return append(out, s)
}
