package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// The mock upstream answers every scenario from bytes built once at start,
// so that its own cost is as close to nothing as a Go HTTP server allows:
// the figures measured direct to it are the floor the gateway is compared
// with. A request names its scenario in X-Bench-Scenario; a streaming
// request (the guard always streams upstream) gets the scenario's stream,
// any other its whole answer.

// chunkHead opens every chunk, as OpenAI's do.
const chunkHead = `{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","system_fingerprint":"fp_bench","choices":[{"index":0,"delta":`

func textChunk(s string) string {
	return chunkHead + `{"content":"` + s + `"},"logprobs":null,"finish_reason":null}]}`
}

// answer is one scenario's stream, event by event, and its whole form.
type answer struct {
	events [][]byte // "data: …\n\n", [DONE] last
	usage  []byte   // the usage event, sent before [DONE] when asked for
	whole  []byte
	pace   time.Duration // between events; 0 writes them as fast as it can
}

func event(data string) []byte { return []byte("data: " + data + "\n\n") }

// textAnswer is n content deltas of a few bytes each.
func textAnswer(n int, pace time.Duration) *answer {
	a := &answer{pace: pace}
	a.events = append(a.events, event(chunkHead+`{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}`))
	var text strings.Builder
	for i := range n {
		w := textWord(i)
		text.WriteString(w)
		a.events = append(a.events, event(textChunk(w)))
	}
	a.events = append(a.events, event(chunkHead+`{},"logprobs":null,"finish_reason":"stop"}]}`))
	a.usage = event(`{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","system_fingerprint":"fp_bench","choices":[],"usage":{"prompt_tokens":24,"completion_tokens":` +
		strconv.Itoa(n) + `,"total_tokens":` + strconv.Itoa(24+n) + `}}`)
	a.events = append(a.events, event("[DONE]"))
	a.whole = []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		text.String() + `","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":` +
		strconv.Itoa(n) + `,"total_tokens":` + strconv.Itoa(24+n) + `},"service_tier":"default","system_fingerprint":"fp_bench"}`)
	return a
}

// textWords are the words of a text answer, in turn.
var textWords = []string{"The", "handler", "closes", "the", "stream", "early,", "so", "tests"}

// textWord is the i-th word of a text answer, with its space. After the
// first round of textWords each word carries its round's number, so no
// phrase repeats: the same words over and over are degenerate text, which
// the guard cuts and asks again.
func textWord(i int) string {
	w := textWords[i%len(textWords)]
	if r := i / len(textWords); r > 0 {
		w += strconv.Itoa(r)
	}
	return w + " "
}

// toolAnswer is 20 content deltas, then a call of read_file whose
// arguments come in 10 fragments.
func toolAnswer() *answer {
	a := textAnswer(20, 0)
	a.events = a.events[:len(a.events)-2] // the finish and [DONE]
	args := []string{`{\"`, `path`, `\":`, ` \"`, `proxy`, `/handler`, `.go`, `\", \"`, `line\": `, `42}`}
	a.events = append(a.events, event(chunkHead+`{"tool_calls":[{"index":0,"id":"call_bench","type":"function","function":{"name":"read_file","arguments":""}}]},"logprobs":null,"finish_reason":null}]}`))
	for _, f := range args {
		a.events = append(a.events, event(chunkHead+`{"tool_calls":[{"index":0,"function":{"arguments":"`+f+`"}}]},"logprobs":null,"finish_reason":null}]}`))
	}
	a.events = append(a.events, event(chunkHead+`{},"logprobs":null,"finish_reason":"tool_calls"}]}`), event("[DONE]"))
	a.whole = []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_bench","type":"function","function":{"name":"read_file","arguments":"{\"path\": \"proxy/handler.go\", \"line\": 42}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":24,"completion_tokens":30,"total_tokens":54}}`)
	return a
}

// answers by scenario name.
func answers() map[string]*answer {
	return map[string]*answer{
		"small":  textAnswer(9, 0),
		"stream": textAnswer(200, 0),
		"paced":  textAnswer(50, 5*time.Millisecond),
		"tool":   toolAnswer(),
	}
}

var (
	streamTrue   = []byte(`"stream":true`)
	includeUsage = []byte(`"include_usage":true`)
)

type mock struct{ answers map[string]*answer }

func (m *mock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	a := m.answers[scenario(r.Header, body)]
	if a == nil || err != nil {
		http.Error(w, `{"error":{"message":"unknown scenario","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	if !bytes.Contains(body, streamTrue) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(a.whole)))
		_, _ = w.Write(a.whole)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	last := len(a.events) - 1
	for i, ev := range a.events {
		if i > 0 && a.pace > 0 {
			time.Sleep(a.pace)
		}
		if i == last && bytes.Contains(body, includeUsage) {
			_, _ = w.Write(a.usage)
		}
		if _, err := w.Write(ev); err != nil {
			return
		}
		// Each event is flushed on its own, as a model's tokens come.
		if rc.Flush() != nil {
			return
		}
	}
}

// scenario is the scenario a request names: in X-Bench-Scenario, else in
// its body after scenarioTag.
func scenario(h http.Header, body []byte) string {
	if s := h.Get("X-Bench-Scenario"); s != "" {
		return s
	}
	_, after, ok := bytes.Cut(body, []byte(scenarioTag))
	name, _, ok2 := bytes.Cut(after, []byte("]"))
	if !ok || !ok2 {
		return ""
	}
	return string(name)
}

// serveMock serves the mock on a free loopback port, prints its URL and
// serves until stdin closes.
func serveMock() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: &mock{answers: answers()}, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	fmt.Printf("http://%s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
	_ = srv.Close()
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
