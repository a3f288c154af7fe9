package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// rsWeather is a function tool as the Responses API declares it, strict
// with a $schema key, as the Agents SDK sends it.
const rsWeather = `{"type":"function","name":"get_weather","strict":true,"parameters":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}}`

// rsGateway serves the guard in front of an upstream playing the
// simulated models, with cfg's client keys, on a real listener.
func rsGateway(t *testing.T, respond proxytest.Responder, keys ...proxy.ClientKey) (*proxytest.Upstream, *httptest.Server) {
	t.Helper()
	up, usrv := proxytest.NewServer(t, respond)
	cfg := proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}, ClientKeys: keys}
	if len(keys) > 0 {
		cfg.Providers[0].APIKey = "sk-upstream"
	}
	return up, serveGateway(t, cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage,
		TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
}

// rsResponse is what the tests read of a response object.
type rsResponse struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Status string `json:"status"`
	Output []struct {
		Type      string `json:"type"`
		ID        string `json:"id"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Content   []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage *struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// calls returns the function calls of the response.
func (r *rsResponse) calls() (calls []string) {
	for _, o := range r.Output {
		if o.Type == "function_call" {
			calls = append(calls, o.Name+o.Arguments)
		}
	}
	return calls
}

// text returns the output text of the response.
func (r *rsResponse) text() string {
	var b strings.Builder
	for _, o := range r.Output {
		for _, c := range o.Content {
			if o.Type == "message" {
				b.WriteString(c.Text)
			}
		}
	}
	return b.String()
}

// rsRaw sends a raw HTTP/1.1 request over a fresh connection and
// returns the status and body as written on the wire (chunked framing
// undone).
func rsRaw(t *testing.T, gw *httptest.Server, method, path, key, body string) (int, http.Header, []byte) {
	t.Helper()
	return rsRawCtx(t, testContext(t), gw, method, path, key, body)
}

// rsRawCtx is rsRaw bounded by ctx: a request that makes the gateway read
// megabytes gets heavyContext's deadline.
func rsRawCtx(t *testing.T, ctx context.Context, gw *httptest.Server, method, path, key, body string) (int, http.Header, []byte) {
	t.Helper()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	req := method + " " + path + " HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\nContent-Type: application/json\r\n"
	if key != "" {
		req += "Authorization: Bearer " + key + "\r\n"
	}
	req += fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := readAll(t, resp.Body)
	return resp.StatusCode, resp.Header, b
}

// rsCreate creates a response without streaming and decodes it.
func rsCreate(t *testing.T, gw *httptest.Server, path, key string, req map[string]any) *rsResponse {
	t.Helper()
	body, _ := json.Marshal(req)
	status, _, b := rsRaw(t, gw, http.MethodPost, path, key, string(body))
	if status != http.StatusOK {
		t.Fatalf("POST %s: %d %s", path, status, b)
	}
	var r rsResponse
	if err := json.Unmarshal(b, &r); err != nil || r.Object != "response" {
		t.Fatalf("POST %s: not a response object (%v): %s", path, err, b)
	}
	return &r
}

// rsEvent is one event of a Responses stream.
type rsEvent struct {
	Name string
	Data map[string]any
}

// rsEvents reads a Responses stream, checking that every event has its
// event: line naming its type and that sequence numbers count from 0.
func rsEvents(t *testing.T, b []byte) []rsEvent {
	t.Helper()
	var out []rsEvent
	for _, block := range strings.Split(string(b), "\n\n") {
		if block == "" || strings.HasPrefix(block, ":") {
			continue
		}
		name, data, ok := strings.Cut(block, "\ndata: ")
		if !ok || !strings.HasPrefix(name, "event: ") {
			t.Fatalf("event without its event: line: %q", block)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("event data is not JSON: %v: %s", err, data)
		}
		name = strings.TrimPrefix(name, "event: ")
		if m["type"] != name || m["sequence_number"] != float64(len(out)) {
			t.Fatalf("event %d: event: %s, type %v, sequence_number %v", len(out), name, m["type"], m["sequence_number"])
		}
		out = append(out, rsEvent{name, m})
	}
	return out
}

// rsFinal is the response of a stream's last event.
func rsFinal(t *testing.T, evs []rsEvent) (string, *rsResponse) {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	last := evs[len(evs)-1]
	b, _ := json.Marshal(last.Data["response"])
	var r rsResponse
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return last.Name, &r
}

func TestResponsesText(t *testing.T) {
	_, gw := rsGateway(t, proxytest.Simulated())
	r := rsCreate(t, gw, "/v1/responses", "", map[string]any{"model": sim.Model, "input": "Say hello."})
	if r.Status != "completed" || r.text() == "" || r.Usage == nil || r.Usage.TotalTokens == 0 {
		t.Errorf("response = %+v", r)
	}
	status, hdr, b := rsRaw(t, gw, http.MethodPost, "/v1/responses", "", `{"model":"`+sim.Model+`","input":[{"role":"user","content":[{"type":"input_text","text":"Say hello."}]}],"stream":true}`)
	if status != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %s", status, hdr.Get("Content-Type"))
	}
	evs := rsEvents(t, b)
	name, final := rsFinal(t, evs)
	if evs[0].Name != "response.created" || evs[1].Name != "response.in_progress" || name != "response.completed" || final.text() == "" {
		t.Errorf("stream: first %s, %s, last %s, text %q", evs[0].Name, evs[1].Name, name, final.text())
	}
	var deltas string
	for _, e := range evs {
		if e.Name == "response.output_text.delta" {
			deltas += e.Data["delta"].(string)
		}
	}
	if deltas != final.text() {
		t.Errorf("deltas %q do not add up to the text %q", deltas, final.text())
	}
}

// A function call, its output sent back by previous_response_id: the
// upstream gets the chat history (the call as a tool_calls message, its
// result as a tool message) and the client an answer.
func TestResponsesFunctionCallRoundTrip(t *testing.T) {
	up, gw := rsGateway(t, proxytest.Simulated())
	first := rsCreate(t, gw, "/v1/responses", "", map[string]any{"model": sim.Model, "input": "Weather in Paris?", "tools": []json.RawMessage{json.RawMessage(rsWeather)}})
	if n := len(first.calls()); n != 1 {
		t.Fatalf("first response: %d calls, want 1: %+v", n, first)
	}
	call := first.Output[len(first.Output)-1]
	second := rsCreate(t, gw, "/v1/responses", "", map[string]any{"model": sim.Model, "previous_response_id": first.ID,
		"tools": []json.RawMessage{json.RawMessage(rsWeather)}, "input": []map[string]any{{"type": "function_call_output", "call_id": call.CallID, "output": "sunny"}}})
	if second.text() == "" || len(second.calls()) != 0 {
		t.Errorf("second response: %+v", second)
	}
	got := up.Received()
	var sent struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := got[len(got)-1].Decode(&sent); err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range sent.Messages {
		roles = append(roles, m.Role)
	}
	n := len(sent.Messages)
	if strings.Join(roles, ",") != "user,assistant,tool" || sent.Messages[n-2].ToolCalls[0].ID != call.CallID || sent.Messages[n-1].ToolCallID != call.CallID {
		t.Errorf("upstream got roles %v: %+v", roles, sent.Messages)
	}
}

// The AI SDK's second step: earlier items by item_reference, the call
// inline without its id.
func TestResponsesItemReference(t *testing.T) {
	up, gw := rsGateway(t, proxytest.Simulated())
	first := rsCreate(t, gw, "/v1/responses", "", map[string]any{"model": sim.Model, "input": "Weather in Paris?", "tools": []json.RawMessage{json.RawMessage(rsWeather)}})
	var input []map[string]any
	input = append(input, map[string]any{"role": "user", "content": []map[string]any{{"type": "input_text", "text": "Weather in Paris?"}}})
	for _, o := range first.Output {
		input = append(input, map[string]any{"type": "item_reference", "id": o.ID})
	}
	call := first.Output[len(first.Output)-1]
	input = append(input, map[string]any{"type": "function_call_output", "call_id": call.CallID, "output": "sunny"})
	second := rsCreate(t, gw, "/v1/responses", "", map[string]any{"model": sim.Model, "input": input, "tools": []json.RawMessage{json.RawMessage(rsWeather)}, "tool_choice": "auto"})
	if second.text() == "" {
		t.Errorf("second response: %+v", second)
	}
	got := up.Received()
	if body := string(got[len(got)-1].Body); !strings.Contains(body, `"tool_call_id":"`+call.CallID+`"`) || !strings.Contains(body, `"id":"`+call.CallID+`"`) {
		t.Errorf("upstream did not get the referenced call: %s", body)
	}
	// A reference the store does not hold is a 400 naming its place.
	status, _, b := rsRaw(t, gw, http.MethodPost, "/v1/responses", "", `{"model":"`+sim.Model+`","input":[{"role":"user","content":"x"},{"type":"item_reference","id":"msg_gone"}]}`)
	if e := rsError(t, b); status != http.StatusBadRequest || e.Param != "input[1].id" || !strings.Contains(e.Message, "msg_gone") {
		t.Errorf("unknown reference: %d %s", status, b)
	}
}

// rsErr is an error body in OpenAI's shape.
type rsErr struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func rsError(t *testing.T, b []byte) (e struct{ Message, Type, Param, Code string }) {
	t.Helper()
	var body struct {
		Error *rsErr `json:"error"`
	}
	if err := json.Unmarshal(b, &body); err != nil || body.Error == nil || body.Error.Message == "" || body.Error.Type == "" {
		t.Fatalf("not an OpenAI error: %s", b)
	}
	e.Message, e.Type = body.Error.Message, body.Error.Type
	if body.Error.Param != nil {
		e.Param = *body.Error.Param
	}
	if body.Error.Code != nil {
		e.Code = *body.Error.Code
	}
	return e
}

// store:false keeps nothing; a stored response is read, listed, deleted.
func TestResponsesStore(t *testing.T) {
	_, gw := rsGateway(t, proxytest.Simulated())
	kept := rsCreate(t, gw, "/v1/responses", "", map[string]any{"model": sim.Model, "input": "hi"})
	status, _, b := rsRaw(t, gw, http.MethodGet, "/v1/responses/"+kept.ID, "", "")
	var got rsResponse
	if status != http.StatusOK || json.Unmarshal(b, &got) != nil || got.ID != kept.ID || got.text() != kept.text() {
		t.Errorf("GET stored: %d %s", status, b)
	}
	status, _, b = rsRaw(t, gw, http.MethodGet, "/v1/responses/"+kept.ID+"/input_items", "", "")
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			Type, ID, Role string
		} `json:"data"`
	}
	if status != http.StatusOK || json.Unmarshal(b, &list) != nil || list.Object != "list" || len(list.Data) != 1 || list.Data[0].Role != "user" || list.Data[0].ID == "" {
		t.Errorf("input_items: %d %s", status, b)
	}
	if status, _, b = rsRaw(t, gw, http.MethodDelete, "/v1/responses/"+kept.ID, "", ""); status != http.StatusOK || !strings.Contains(string(b), `"deleted":true`) {
		t.Errorf("DELETE: %d %s", status, b)
	}
	if status, _, b = rsRaw(t, gw, http.MethodGet, "/v1/responses/"+kept.ID, "", ""); status != http.StatusNotFound || rsError(t, b).Code != "not_found" {
		t.Errorf("GET deleted: %d %s", status, b)
	}

	gone := rsCreate(t, gw, "/v1/responses", "", map[string]any{"model": sim.Model, "input": "hi", "store": false})
	if status, _, b = rsRaw(t, gw, http.MethodGet, "/v1/responses/"+gone.ID, "", ""); status != http.StatusNotFound {
		t.Errorf("GET of store:false: %d %s", status, b)
	}
	status, _, b = rsRaw(t, gw, http.MethodPost, "/v1/responses", "", `{"model":"`+sim.Model+`","input":"again","previous_response_id":"`+gone.ID+`"}`)
	if e := rsError(t, b); status != http.StatusBadRequest || e.Param != "previous_response_id" || e.Code != "previous_response_not_found" {
		t.Errorf("previous_response_id of store:false: %d %s", status, b)
	}
}

// A response belongs to the client key that made it: another key gets
// 404, and cannot continue it.
func TestResponsesOwnedByKey(t *testing.T) {
	_, gw := rsGateway(t, proxytest.Simulated(), proxy.ClientKey{Key: "key-a"}, proxy.ClientKey{Key: "key-b"})
	r := rsCreate(t, gw, "/v1/responses", "key-a", map[string]any{"model": sim.Model, "input": "hi"})
	if status, _, _ := rsRaw(t, gw, http.MethodGet, "/v1/responses/"+r.ID, "key-a", ""); status != http.StatusOK {
		t.Errorf("owner's GET: %d", status)
	}
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		if status, _, b := rsRaw(t, gw, m, "/v1/responses/"+r.ID, "key-b", ""); status != http.StatusNotFound {
			t.Errorf("another key's %s: %d %s", m, status, b)
		}
	}
	status, _, b := rsRaw(t, gw, http.MethodPost, "/v1/responses", "key-b", `{"model":"`+sim.Model+`","input":"more","previous_response_id":"`+r.ID+`"}`)
	if status != http.StatusBadRequest || rsError(t, b).Code != "previous_response_not_found" {
		t.Errorf("another key's previous_response_id: %d %s", status, b)
	}
}

// Background mode, conversations and prompt templates are refused by
// name, before any upstream call (hosted tools are dropped, see
// TestResponsesCodexLoopingModel, or refused under HOSTED_TOOLS=refuse).
func TestResponsesUnsupported(t *testing.T) {
	up, gw := rsGateway(t, proxytest.Simulated())
	for _, tc := range []struct{ body, param string }{
		{`{"model":"m","input":"hi","background":true}`, "background"},
		{`{"model":"m","input":"hi","conversation":"conv_1"}`, "conversation"},
		{`{"model":"m","input":"hi","prompt":{"id":"pmpt_1"}}`, "prompt"},
	} {
		status, _, b := rsRaw(t, gw, http.MethodPost, "/v1/responses", "", tc.body)
		if e := rsError(t, b); status != http.StatusBadRequest || e.Param != tc.param || e.Type != "invalid_request_error" {
			t.Errorf("%s: %d %s", tc.body, status, b)
		}
	}
	if n := len(up.Received()); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
}

// An upstream error before the first byte is the client's status and an
// OpenAI error body; a stream cut after it ends with an error event and
// response.failed.
func TestResponsesErrors(t *testing.T) {
	_, gw := rsGateway(t, proxytest.Script(sim.Error(http.StatusUnauthorized, "bad key", "authentication_error", "invalid_api_key")))
	status, _, b := rsRaw(t, gw, http.MethodPost, "/v1/responses", "", `{"model":"`+sim.Model+`","input":"hi","stream":true}`)
	if e := rsError(t, b); status != http.StatusUnauthorized || e.Code != "invalid_api_key" {
		t.Errorf("before the first byte: %d %s", status, b)
	}

	cut := sim.NewStream(sim.Model).Role().Content("Hello, ", "wor").Reply()
	cut.Cut = true
	_, gw = rsGateway(t, proxytest.Script(cut, cut, cut, cut, cut))
	status, _, b = rsRaw(t, gw, http.MethodPost, "/v1/responses", "", `{"model":"`+sim.Model+`","input":"hi","stream":true}`)
	evs := rsEvents(t, b)
	name, final := rsFinal(t, evs)
	if status != http.StatusOK || name != "response.failed" || final.Status != "failed" || final.Error == nil || final.Error.Code != "server_error" {
		t.Fatalf("after the first byte: %d, last event %s %+v", status, name, final)
	}
	if e := evs[len(evs)-2]; e.Name != "error" || e.Data["message"] == "" {
		t.Errorf("event before response.failed: %+v", e)
	}
}

// rsAgent runs an agent turn through path as a Responses client does
// with stored state: each call executed, its output sent back with
// previous_response_id, until the model answers or maxTurns requests were
// made. It returns the calls executed and the answer (empty when the
// model never answered).
func rsAgent(t *testing.T, gw *httptest.Server, path, model string, maxTurns int) (executed []string, answer string) {
	t.Helper()
	req := map[string]any{"model": model, "input": "What is the weather in Paris?", "tools": []json.RawMessage{json.RawMessage(rsWeather)}, "stream": true}
	for range maxTurns {
		body, _ := json.Marshal(req)
		status, _, b := rsRaw(t, gw, http.MethodPost, path, "", string(body))
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", path, status, b)
		}
		name, r := rsFinal(t, rsEvents(t, b))
		if name != "response.completed" {
			t.Fatalf("%s: stream ended with %s", path, name)
		}
		if len(r.calls()) == 0 {
			return executed, r.text()
		}
		var outputs []map[string]any
		for _, o := range r.Output {
			if o.Type == "function_call" {
				executed = append(executed, o.Name+o.Arguments)
				outputs = append(outputs, map[string]any{"type": "function_call_output", "call_id": o.CallID, "output": "sunny, 21 C"})
			}
		}
		req["previous_response_id"], req["input"] = r.ID, outputs
	}
	return executed, ""
}

// With the looping simulated model, the guarded route ends with an
// answer after one executed call (the model's repeats refused and re-asked
// within a response), while the standard route passes the loop on.
func TestResponsesGuardLoopingModel(t *testing.T) {
	_, gw := rsGateway(t, proxytest.Simulated())
	executed, answer := rsAgent(t, gw, "/v1/responses", sim.LoopingModel, 8)
	if len(executed) != 1 || answer == "" {
		t.Errorf("guarded: executed %d calls %v, answer %q; want 1 call and an answer", len(executed), executed, answer)
	}
	executed, answer = rsAgent(t, gw, "/standard/v1/responses", sim.LoopingModel, 4)
	if len(executed) < 2 || answer != "" {
		t.Errorf("standard: executed %d calls, answer %q; want the loop passed on", len(executed), answer)
	}
}

// On Redis, a response one replica stored is continued, read and
// referenced on another.
func TestResponsesAcrossReplicas(t *testing.T) {
	_, usrv := proxytest.NewServer(t, proxytest.Simulated())
	a, b, _ := replicas(t, proxy.Config{Providers: []proxy.Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1"}}})
	first := rsCreate(t, a, "/v1/responses", "", map[string]any{"model": sim.Model, "input": "Weather in Paris?", "tools": []json.RawMessage{json.RawMessage(rsWeather)}})
	call := first.Output[len(first.Output)-1]
	if status, _, body := rsRaw(t, b, http.MethodGet, "/v1/responses/"+first.ID, "", ""); status != http.StatusOK {
		t.Fatalf("GET on B: %d %s", status, body)
	}
	second := rsCreate(t, b, "/v1/responses", "", map[string]any{"model": sim.Model, "previous_response_id": first.ID,
		"tools": []json.RawMessage{json.RawMessage(rsWeather)}, "input": []map[string]any{{"type": "function_call_output", "call_id": call.CallID, "output": "sunny"}}})
	if second.text() == "" {
		t.Errorf("continued on B: %+v", second)
	}
	third := rsCreate(t, b, "/v1/responses", "", map[string]any{"model": sim.Model, "tools": []json.RawMessage{json.RawMessage(rsWeather)},
		"input": []map[string]any{{"role": "user", "content": "Weather in Paris?"}, {"type": "item_reference", "id": call.ID}, {"type": "function_call_output", "call_id": call.CallID, "output": "sunny"}}})
	if third.text() == "" {
		t.Errorf("referenced on B: %+v", third)
	}
}

// rsItemList is a page of GET /v1/responses/{id}/input_items.
type rsItemList struct {
	Object  string           `json:"object"`
	Data    []map[string]any `json:"data"`
	FirstID string           `json:"first_id"`
	LastID  string           `json:"last_id"`
	HasMore bool             `json:"has_more"`
}

func rsItems(t *testing.T, gw *httptest.Server, id, query string) rsItemList {
	t.Helper()
	status, _, b := rsRaw(t, gw, http.MethodGet, "/v1/responses/"+id+"/input_items"+query, "", "")
	var l rsItemList
	if status != http.StatusOK || json.Unmarshal(b, &l) != nil || l.Object != "list" {
		t.Fatalf("input_items%s: %d %s", query, status, b)
	}
	return l
}

// The input items of a response are listed as item resources: an id
// minted at store time on each (stable across reads), a message's
// content as typed parts, a status; newest first, or oldest with
// order=asc, in pages of limit after a cursor.
func TestResponsesInputItems(t *testing.T) {
	_, gw := rsGateway(t, proxytest.Simulated())
	tools := []json.RawMessage{json.RawMessage(rsWeather)}
	first := rsCreate(t, gw, "/v1/responses", "", map[string]any{"model": sim.Model, "tools": tools, "input": []map[string]any{
		{"role": "user", "content": "Hello."}, {"role": "assistant", "content": "Hello, how can I help?"}, {"role": "user", "content": "Weather in Paris?"}}})
	call := first.Output[len(first.Output)-1]
	second := rsCreate(t, gw, "/v1/responses", "", map[string]any{"model": sim.Model, "previous_response_id": first.ID, "tools": tools,
		"input": []map[string]any{{"type": "function_call_output", "call_id": call.CallID, "output": "sunny"}}})

	all := rsItems(t, gw, second.ID, "")
	if len(all.Data) != 3+len(first.Output)+1 || all.HasMore || all.FirstID != all.Data[0]["id"] || all.LastID != all.Data[len(all.Data)-1]["id"] {
		t.Fatalf("input_items: %+v", all)
	}
	if again := rsItems(t, gw, second.ID, ""); fmt.Sprint(again) != fmt.Sprint(all) {
		t.Errorf("a second read differs:\n%v\n%v", again, all)
	}
	newest, oldest := all.Data[0], all.Data[len(all.Data)-1]
	if newest["type"] != "function_call_output" || newest["call_id"] != call.CallID || newest["status"] != "completed" || !strings.HasPrefix(newest["id"].(string), "fco_") {
		t.Errorf("newest item: %v", newest)
	}
	if fmt.Sprint(oldest["content"]) != "[map[text:Hello. type:input_text]]" || oldest["status"] != "completed" || !strings.HasPrefix(oldest["id"].(string), "msg_") {
		t.Errorf("oldest item: %v", oldest)
	}
	assistant := all.Data[len(all.Data)-2]
	if fmt.Sprint(assistant["content"]) != "[map[annotations:[] logprobs:[] text:Hello, how can I help? type:output_text]]" || assistant["status"] != "completed" {
		t.Errorf("assistant message: %v", assistant)
	}
	for _, it := range all.Data {
		if it["type"] == "function_call" && (it["id"] != call.ID || it["status"] != "completed") {
			t.Errorf("function call: %v, want id %s", it, call.ID)
		}
	}

	var asc []map[string]any
	for after := ""; ; {
		page := rsItems(t, gw, second.ID, "?order=asc&limit=2"+after)
		asc = append(asc, page.Data...)
		if !page.HasMore {
			break
		}
		if len(page.Data) != 2 || len(asc) > len(all.Data) {
			t.Fatalf("page: %+v", page)
		}
		after = "&after=" + page.LastID
	}
	slices.Reverse(asc)
	if fmt.Sprint(asc) != fmt.Sprint(all.Data) {
		t.Errorf("pages in order asc, reversed:\n%v\nwant\n%v", asc, all.Data)
	}

	for query, param := range map[string]string{"?limit=0": "limit", "?limit=101": "limit", "?order=up": "order", "?after=msg_none": "after"} {
		status, _, b := rsRaw(t, gw, http.MethodGet, "/v1/responses/"+second.ID+"/input_items"+query, "", "")
		if e := rsError(t, b); status != http.StatusBadRequest || e.Param != param {
			t.Errorf("input_items%s: %d %s", query, status, b)
		}
	}
}

// A Responses stream that asks to be resumable is told it is
// (X-Phasegate-Resumable: true), its log is the door's, by response id,
// not the chat route's by request id (a resume of that is a 404), and a
// header that is neither true nor false is the chat route's 400.
func TestResponsesStreamResumableHeader(t *testing.T) {
	_, gw := rsGateway(t, proxytest.Simulated())
	body := `{"model":"` + sim.Model + `","input":"hi","stream":true}`
	req, _ := http.NewRequestWithContext(testContext(t), http.MethodPost, gw.URL+"/v1/responses", strings.NewReader(body))
	req.Header.Set("X-Phasegate-Resumable", "true")
	req.Header.Set("X-Request-Id", "rs-resume-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	evs := rsEvents(t, readAll(t, resp.Body))
	if name, _ := rsFinal(t, evs); resp.StatusCode != http.StatusOK || resp.Header.Get("X-Phasegate-Resumable") != "true" || name != "response.completed" {
		t.Errorf("stream: %d, X-Phasegate-Resumable %q, last event %s", resp.StatusCode, resp.Header.Get("X-Phasegate-Resumable"), name)
	}
	if status, _, b := rsRaw(t, gw, http.MethodGet, "/v1/phasegate/requests/rs-resume-1/events", "", ""); status != http.StatusNotFound || rsError(t, b).Code != "request_not_found" {
		t.Errorf("resume: %d %s", status, b)
	}
	req, _ = http.NewRequestWithContext(testContext(t), http.MethodPost, gw.URL+"/v1/responses", strings.NewReader(body))
	req.Header.Set("X-Phasegate-Resumable", "yes")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp.Body); resp.StatusCode != http.StatusBadRequest || !strings.Contains(rsError(t, b).Message, "X-Phasegate-Resumable") {
		t.Errorf("bad header: %d %s", resp.StatusCode, b)
	}
}
