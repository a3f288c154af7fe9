package replay_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/phasegate/phasegate/sim"
)

// replayModel is the model every replayed request names; the gateway
// routes it to the one provider, the double.
const replayModel = "gpt-replay"

// finalAnswer is what the double's model says when it is offered no
// tools: the gateway forced the final answer.
const finalAnswer = "Final answer from the results so far."

// requestID names a request of the replay: the configuration, the
// trajectory and the index of the assistant message the upstream is to
// play. The gateway takes it as the request's id, sends it upstream and
// puts it on its trace events.
func requestID(config string, traj, step int) string {
	return fmt.Sprintf("rp-%s-%d-%d", config, traj, step)
}

func parseRequestID(id string) (traj, step int, ok bool) {
	parts := strings.Split(id, "-")
	if len(parts) != 4 || parts[0] != "rp" {
		return 0, 0, false
	}
	traj, err1 := strconv.Atoi(parts[2])
	step, err2 := strconv.Atoi(parts[3])
	return traj, step, err1 == nil && err2 == nil
}

// double plays the recorded assistant turns: the request's id names the
// trajectory and the message. Asked again within a request (the guard
// refused the call), it plays the same turn again, as a model that pays
// no heed to the notice; offered no tools, it answers (the client sends
// "tools" last, and no recorded message or schema holds that key, so its
// absence from the body's end is the forced final answer). It keeps nothing
// of what it received: the histories of a replay add up to hundreds of
// megabytes.
func double(ts []*trajectory) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(r)
		if err != nil {
			return
		}
		play(ts, r.Header.Get("X-Request-Id"), body).Serve(r.Context(), w)
	})
}

// readBody reads a request's body into one buffer of its announced size:
// histories run to hundreds of kilobytes, and a buffer grown by doubling
// costs the race detector dearly.
func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength <= 0 {
		return io.ReadAll(r.Body)
	}
	body := make([]byte, r.ContentLength)
	_, err := io.ReadFull(r.Body, body)
	return body, err
}

func play(ts []*trajectory, id string, body []byte) sim.Reply {
	ti, step, ok := parseRequestID(id)
	if ok && ti < len(ts) && step == len(ts[ti].msgs) {
		// The request after the last recorded message: the model answers.
		return sim.NewStream(replayModel).Role().Content(finalAnswer).Finish("stop").Usage(100, 20, nil).Done().Reply()
	}
	if !ok || ti >= len(ts) || step >= len(ts[ti].msgs) {
		return sim.Error(http.StatusBadRequest, "replay double: no recorded turn for this request", "invalid_request_error", "invalid_request_error")
	}
	s := sim.NewStream(replayModel).Role()
	m := ts[ti].msgs[step]
	switch {
	case !bytes.Contains(body[max(len(body)-64<<10, 0):], []byte(`"tools":`)): // the gateway forced the final answer
		s.Content(finalAnswer).Finish("stop")
	case len(m.ToolCalls) == 0:
		s.Content(m.text()).Finish("stop")
	default:
		if m.text() != "" {
			s.Content(m.text())
		}
		for i, c := range m.ToolCalls {
			s.ToolCall(i, c.ID, c.Function.Name, c.Function.Arguments)
		}
		s.Finish("tool_calls")
	}
	return s.Usage(100, 20, nil).Done().Reply()
}

// answer is what the client read of one streamed response.
type answer struct {
	status  int
	content string
	calls   []toolCall
	finish  string
}

// send posts one request of the replay and reads the streamed answer.
func send(ctx context.Context, client *http.Client, url, id string, t *trajectory, upTo int) (answer, error) {
	body := requestBody(t, upTo)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-replay")
	req.Header.Set("X-Request-Id", id)
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return a, nil
	}
	return a, a.read(resp.Body)
}

// requestBody is the request the agent sends before message upTo: the
// recorded history so far, its tools, streamed.
func requestBody(t *trajectory, upTo int) []byte {
	size := 128 + len(t.Tools)
	for _, m := range t.Messages[:upTo] {
		size += len(m) + 1
	}
	b := bytes.NewBuffer(make([]byte, 0, size))
	b.WriteString(`{"model":"` + replayModel + `","stream":true,"messages":[`)
	for i, m := range t.Messages[:upTo] {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	b.WriteString(`]`)
	if len(t.Tools) > 0 && string(t.Tools) != "null" {
		b.WriteString(`,"tools":`)
		b.Write(t.Tools)
	}
	b.WriteString(`}`)
	return b.Bytes()
}

// read assembles a chat.completion.chunk stream.
func (a *answer) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	var content strings.Builder
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Error   json.RawMessage `json:"error"`
			Choices []struct {
				Delta struct {
					Content   *string `json:"content"`
					ToolCalls []struct {
						Index int `json:"index"`
						toolCall
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return fmt.Errorf("decode chunk: %w", err)
		}
		if len(c.Error) > 0 {
			return fmt.Errorf("in-band error: %s", c.Error)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				content.WriteString(*ch.Delta.Content)
			}
			for _, d := range ch.Delta.ToolCalls {
				for len(a.calls) <= d.Index {
					a.calls = append(a.calls, toolCall{})
				}
				tc := &a.calls[d.Index]
				if d.ID != "" {
					tc.ID = d.ID
				}
				tc.Function.Name += d.Function.Name
				tc.Function.Arguments += d.Function.Arguments
			}
			if ch.FinishReason != nil {
				a.finish = *ch.FinishReason
			}
		}
	}
	a.content = content.String()
	return sc.Err()
}

// same reports whether the answer is the recorded turn m, untouched.
func (a answer) same(m message) bool {
	if a.status != http.StatusOK || a.content != m.text() || len(a.calls) != len(m.ToolCalls) {
		return false
	}
	for i, c := range m.ToolCalls {
		if a.calls[i].ID != c.ID || a.calls[i].Function.Name != c.Function.Name || a.calls[i].Function.Arguments != c.Function.Arguments {
			return false
		}
	}
	want := "stop"
	if len(m.ToolCalls) > 0 {
		want = "tool_calls"
	}
	return a.finish == want
}
