package proxy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// A single gateway keeps resumable streams in memory: the same API, no
// Redis.

const toolsBody = `"tools":[{"type":"function","function":{"name":"list_dir","parameters":{"type":"object","properties":{}}}}]`

func TestResumeInMemory(t *testing.T) {
	reply := sim.NewStream(testModel).Role().Content("Let me ", "look. ").ToolCall(0, "call_1", "list_dir", "{", "}").Finish("tool_calls").Done().Reply()
	up, usrv := proxytest.NewServer(t, proxytest.Script(reply))
	gw := serveGateway(t, config(usrv), proxy.Options{TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)})
	ctx := testContext(t)
	const id = "req-mem-1"
	body := `{"model":"` + testModel + `","stream":true,` + toolsBody + `,"messages":[{"role":"user","content":"List."}]}`
	live := readIDEvents(t, post(t, ctx, gw, "/two-stage/v1/chat/completions", body, resumableHeader(id)).Body, 0)
	if len(live) < 4 || live[len(live)-1].data != "[DONE]" {
		t.Fatalf("live stream: %v", ids(live))
	}
	replay := readIDEvents(t, get(t, ctx, gw, "/v1/phasegate/requests/"+id+"/events?starting_after=2", http.Header{"X-Phasegate-Event-Ids": {"true"}}).Body, 0)
	if fmt.Sprint(replay) != fmt.Sprint(live[2:]) {
		t.Errorf("starting_after=2 replayed %v, want %v", ids(replay), ids(live[2:]))
	}
	// The seed's form: from the first event of the tool phase (phase 2).
	first := -1
	for i, ev := range live {
		if strings.Contains(ev.data, `"phase_index":2`) {
			first = i
			break
		}
	}
	if first < 1 {
		t.Fatalf("no event of phase 2 after phase 1 in %v", live)
	}
	r := post(t, ctx, gw, "/two-stage/v1/resume", `{"requestId":"`+id+`","resumeFromPhaseIndex":2}`, http.Header{"X-Phasegate-Event-Ids": {"true"}})
	if r.StatusCode != http.StatusOK {
		t.Fatalf("resume from phase 2: %d %s", r.StatusCode, readAll(t, r.Body))
	}
	if got := readIDEvents(t, r.Body, 0); fmt.Sprint(got) != fmt.Sprint(live[first:]) {
		t.Errorf("resumeFromPhaseIndex 2 replayed %v, want %v", ids(got), ids(live[first:]))
	}
	if n := len(up.Received()); n != 1 {
		t.Errorf("upstream calls = %d, want 1", n)
	}
}

// TestResumeWithoutIDLines shows that the events of a resumable stream
// carry no id line unless asked: go-openai counts such lines against its
// limit of empty messages.
func TestResumeWithoutIDLines(t *testing.T) {
	_, gw := startUpstream(t, proxytest.Simulated())
	r := post(t, testContext(t), gw, "/v1/chat/completions", chatBody(true), http.Header{"X-Phasegate-Resumable": {"true"}})
	b := readAll(t, r.Body)
	if r.Header.Get("X-Phasegate-Resumable") != "true" || strings.Contains(string(b), "\nid:") || strings.HasPrefix(string(b), "id:") {
		t.Errorf("X-Phasegate-Resumable %q, body %s; want resumable, no id lines", r.Header.Get("X-Phasegate-Resumable"), b)
	}
}

func TestResumeCancelInMemory(t *testing.T) {
	events := sim.NewStream(testModel).Role().Content("one ").Events()
	up, usrv := proxytest.NewServer(t, proxytest.Script(sim.Reply{Events: events, Hang: true}))
	gw := newGateway(t, config(usrv))
	ctx := testContext(t)
	resp := post(t, ctx, gw, "/v1/chat/completions", chatBody(true), resumableHeader("req-mem-cancel"))
	if got := readIDEvents(t, resp.Body, 2); len(got) != 2 {
		t.Fatalf("read %v", got)
	}
	if r := post(t, ctx, gw, "/v1/phasegate/requests/req-mem-cancel/cancel", "", nil); r.StatusCode != http.StatusOK {
		t.Fatalf("cancel: %d", r.StatusCode)
	}
	select {
	case <-up.Cancelled():
	case <-time.After(time.Second):
		t.Fatal("upstream still open a second after the cancel")
	}
	if rest := readIDEvents(t, resp.Body, 0); len(rest) != 2 || !strings.Contains(rest[0].data, `"finish_reason":"stop"`) || rest[1].data != "[DONE]" {
		t.Errorf("after the cancel the stream got %v; want a finish and [DONE]", rest)
	}
	r := post(t, ctx, gw, "/two-stage/v1/resume", `{"requestId":"req-mem-cancel"}`, nil)
	if body := readAll(t, r.Body); r.StatusCode != http.StatusConflict || !strings.Contains(string(body), "request_cancelled") {
		t.Errorf("resume after cancel: %d %s; want 409 request_cancelled", r.StatusCode, body)
	}
}

func TestResumeBadInput(t *testing.T) {
	_, gw := startUpstream(t, proxytest.Simulated())
	ctx := testContext(t)
	post(t, ctx, gw, "/v1/chat/completions", chatBody(true), resumableHeader("req-known")).Body.Close()
	tests := []struct {
		name, method, path, body string
		header                   http.Header
		status                   int
		code                     string
	}{
		{"resumable header not a boolean", http.MethodPost, "/v1/chat/completions", chatBody(true), http.Header{"X-Phasegate-Resumable": {"yes please"}}, 400, ""},
		{"starting_after negative", http.MethodGet, "/v1/phasegate/requests/req-known/events?starting_after=-1", "", nil, 400, ""},
		{"starting_after not a number", http.MethodGet, "/v1/phasegate/requests/req-known/events?starting_after=x", "", nil, 400, ""},
		{"unknown id", http.MethodGet, "/v1/phasegate/requests/nope/events", "", nil, 404, "request_not_found"},
		{"cancel unknown id", http.MethodPost, "/v1/phasegate/requests/nope/cancel", "", nil, 404, "request_not_found"},
		{"resume body not JSON", http.MethodPost, "/two-stage/v1/resume", "{", nil, 400, ""},
		{"resume without requestId", http.MethodPost, "/two-stage/v1/resume", `{"resumeFromPhaseIndex":1}`, nil, 400, ""},
		{"resume negative phase", http.MethodPost, "/two-stage/v1/resume", `{"requestId":"req-known","resumeFromPhaseIndex":-1}`, nil, 400, ""},
		{"resume unknown phase", http.MethodPost, "/two-stage/v1/resume", `{"requestId":"req-known","resumeFromPhaseIndex":9}`, nil, 400, ""},
		{"request id in use", http.MethodPost, "/v1/chat/completions", chatBody(true), resumableHeader("req-known"), 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r *http.Response
			if tt.method == http.MethodGet {
				r = get(t, ctx, gw, tt.path, tt.header)
			} else {
				r = post(t, ctx, gw, tt.path, tt.body, tt.header)
			}
			body := readAll(t, r.Body)
			if r.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", r.StatusCode, tt.status, body)
			}
			if tt.status == 200 {
				// A reused X-Request-Id cannot take over a stream: served,
				// but not resumable.
				if got := r.Header.Get("X-Phasegate-Resumable"); got != "false" {
					t.Errorf("X-Phasegate-Resumable = %q, want false", got)
				}
				return
			}
			var e struct {
				Error struct{ Message, Type, Code string } `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Errorf("body %s is not an OpenAI-style error", body)
			}
			if tt.code != "" && e.Error.Code != tt.code {
				t.Errorf("code %q, want %q", e.Error.Code, tt.code)
			}
		})
	}
}

func TestRateLimitTokens(t *testing.T) {
	_, usrv := proxytest.NewServer(t, proxytest.Simulated())
	cfg := config(usrv)
	cfg.RateLimits = proxy.RateLimits{ProjectTokens: 5}
	gw := newGateway(t, cfg)
	ctx := testContext(t)
	project := http.Header{"X-Project-Id": {"p1"}}
	r := post(t, ctx, gw, "/v1/chat/completions", `{"model":"`+testModel+`","messages":[{"role":"user","content":"`+strings.Repeat("word ", 50)+`"}]}`, project)
	body := readAll(t, r.Body)
	if r.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `"type":"tokens"`) || r.Header.Get("Retry-After") == "" {
		t.Errorf("a prompt over the project's tokens per minute: %d %s (Retry-After %q); want 429 of type tokens", r.StatusCode, body, r.Header.Get("Retry-After"))
	}
	if r.Header.Get("X-Ratelimit-Limit-Tokens") != "5" {
		t.Errorf("x-ratelimit-limit-tokens = %q, want 5", r.Header.Get("X-Ratelimit-Limit-Tokens"))
	}
	// Without a project id the project's limit does not apply.
	if r := post(t, ctx, gw, "/v1/chat/completions", chatBody(false), nil); r.StatusCode != http.StatusOK {
		t.Errorf("no project: %d, want 200", r.StatusCode)
	}
}

func TestResumeMaxBytes(t *testing.T) {
	reply, _ := slowStream(40, time.Millisecond)
	for _, leave := range []bool{false, true} {
		t.Run(fmt.Sprintf("client leaves=%v", leave), func(t *testing.T) {
			up, usrv := proxytest.NewServer(t, proxytest.Script(reply))
			cfg := config(usrv)
			cfg.Resume.MaxBytes = 2000 // about ten chunks
			gw := newGateway(t, cfg)
			ctx := testContext(t)
			id := fmt.Sprintf("req-big-%v", leave)
			resp := post(t, ctx, gw, "/v1/chat/completions", chatBody(true), resumableHeader(id))
			if leave {
				readIDEvents(t, resp.Body, 2)
				resp.Body.Close()
				select {
				case <-up.Cancelled():
				case <-time.After(wait):
					t.Fatal("the upstream of a stream past RESUME_MAX_BYTES, its client gone, was never closed")
				}
			} else if live := readIDEvents(t, resp.Body, 0); live[len(live)-1].data != "[DONE]" || len(live) != 43 {
				t.Errorf("the connected client got %d events ending %q; want all 43, to [DONE]", len(live), live[len(live)-1].data)
			}
			kept := readIDEvents(t, get(t, ctx, gw, "/v1/phasegate/requests/"+id+"/events", http.Header{"X-Phasegate-Event-Ids": {"true"}}).Body, 0)
			if len(kept) < 6 || len(kept) > 16 || !strings.Contains(kept[len(kept)-2].data, `"code":"resume_too_large"`) || kept[len(kept)-1].data != "[DONE]" {
				t.Errorf("replay: %d events ending %v; want about ten, then the resume_too_large error and [DONE]", len(kept), kept[max(len(kept)-2, 0):])
			}
		})
	}
}

func TestRateLimitTokensCorrected(t *testing.T) {
	reply := sim.Completion(testModel, map[string]any{"content": "A long answer."}, "stop",
		map[string]any{"prompt_tokens": 10, "completion_tokens": 500, "total_tokens": 510})
	_, usrv := proxytest.NewServer(t, func(proxytest.Received) sim.Reply { return reply })
	cfg := config(usrv)
	cfg.RateLimits = proxy.RateLimits{KeyTokens: 1000}
	gw := newGateway(t, cfg)
	ctx := testContext(t)
	first := post(t, ctx, gw, "/v1/chat/completions", chatBody(false), nil)
	readAll(t, first.Body)
	second := post(t, ctx, gw, "/v1/chat/completions", chatBody(false), nil)
	readAll(t, second.Body)
	before, _ := strconv.Atoi(first.Header.Get("X-Ratelimit-Remaining-Tokens"))
	after, _ := strconv.Atoi(second.Header.Get("X-Ratelimit-Remaining-Tokens"))
	// The first request's estimate was taken before the call; the 510
	// tokens it reported are charged after it, before the second.
	if spent := before - after; spent < 490 || spent > 520 {
		t.Errorf("remaining tokens %d then %d: %d spent between; want the 510 reported beyond the estimate and the second estimate", before, after, spent)
	}
}

// A resumable stream the upstream refuses before its first event: a
// resume answers what its client got, the same status and OpenAI error
// body, on the replica that served it and on another.
func TestResumeOfStreamFailedBeforeFirstEvent(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "replicas"}[shared], func(t *testing.T) {
			_, usrv := proxytest.NewServer(t, proxytest.Script(sim.Error(400, "bad model", "invalid_request_error", "model_not_found")))
			a := newGateway(t, config(usrv))
			b := a
			if shared {
				a, b, _ = replicas(t, config(usrv))
			}
			ctx := testContext(t)
			r := post(t, ctx, a, "/v1/chat/completions", chatBody(true), resumableHeader("req-fail"))
			orig := readAll(t, r.Body)
			if r.StatusCode != 400 || r.Header.Get("X-Phasegate-Resumable") != "true" {
				t.Fatalf("original: %d, resumable %q: %s", r.StatusCode, r.Header.Get("X-Phasegate-Resumable"), orig)
			}
			var rr *http.Response
			var body []byte
			for deadline := time.Now().Add(5 * time.Second); ; {
				// The log is written as the request ends, just after its answer.
				rr = get(t, ctx, b, "/v1/phasegate/requests/req-fail/events", nil)
				body = readAll(t, rr.Body)
				if rr.StatusCode != 200 || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if rr.StatusCode != 400 || string(body) != string(orig) || rr.Header.Get("Content-Type") != "application/json" {
				t.Errorf("resume: %d %q %s; want the original's 400 %s", rr.StatusCode, rr.Header.Get("Content-Type"), body, orig)
			}
			var e struct {
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != "model_not_found" {
				t.Errorf("resume body %s: code %q, %v; want model_not_found", body, e.Error.Code, err)
			}
		})
	}
}
