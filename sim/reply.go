package sim

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
)

// Event is one thing a streamed reply writes.
type Event struct {
	// Data is written as "data: <Data>\n\n" when not empty.
	Data string
	// Comment is written as a comment line, e.g. ": keep-alive".
	Comment string
	// Delay is waited before the event; a client that leaves cuts it short.
	Delay time.Duration
	// Unflushed leaves the event in the writer's buffer: it reaches the
	// client with the next event flushed, in one write (see Stream.Burst).
	Unflushed bool
}

// Reply is one upstream answer.
type Reply struct {
	// Status defaults to 200.
	Status int
	Header http.Header
	// Body is written as the body of a non-streaming answer.
	Body []byte
	// Events, when set, make the answer a text/event-stream.
	Events []Event
	// Cut aborts the connection after the events, without [DONE].
	Cut bool
	// Hang holds the answer open after the events until the client leaves.
	Hang bool
}

// Serve writes r as the answer to a request whose context is ctx. It
// reports false when the client left before the reply was written in
// full. A Cut reply panics with http.ErrAbortHandler, as net/http expects
// of a handler that aborts its response.
func (r Reply) Serve(ctx context.Context, w http.ResponseWriter) (complete bool) {
	for k, vs := range r.Header {
		w.Header()[k] = vs
	}
	status := r.Status
	if status == 0 {
		status = http.StatusOK
	}
	if r.Events == nil && !r.Cut && !r.Hang {
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = w.Write(r.Body)
		return true
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	for _, ev := range r.Events {
		if !writeEvent(ctx, w, rc, ev) {
			return false
		}
	}
	if r.Hang {
		<-ctx.Done()
		return false
	}
	if r.Cut {
		panic(http.ErrAbortHandler)
	}
	return true
}

// writeEvent waits out ev's delay, writes it and flushes it unless it is
// Unflushed; it reports false when the client left first.
func writeEvent(ctx context.Context, w io.Writer, rc *http.ResponseController, ev Event) bool {
	if ev.Delay > 0 {
		t := time.NewTimer(ev.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
	}
	s := "data: " + strings.ReplaceAll(ev.Data, "\n", "\ndata: ") + "\n\n"
	if ev.Comment != "" {
		s = ev.Comment + "\n\n"
	}
	if _, err := io.WriteString(w, s); err != nil {
		return false
	}
	if ev.Unflushed {
		return ctx.Err() == nil
	}
	if err := rc.Flush(); err != nil {
		return false
	}
	return ctx.Err() == nil
}

// Error returns a reply with an OpenAI-style error body.
func Error(status int, message, typ, code string) Reply {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": message, "type": typ, "param": nil, "code": code}})
	return Reply{Status: status, Body: b}
}

// Completion returns a non-streaming chat.completion reply whose message is
// msg (role defaults to assistant) and whose usage is usage. It carries a
// fresh id and the current time, as an upstream's answer does.
func Completion(model string, msg map[string]any, finish string, usage map[string]any) Reply {
	if _, ok := msg["role"]; !ok {
		msg["role"] = "assistant"
	}
	if _, ok := msg["refusal"]; !ok {
		msg["refusal"] = nil // required by the message's schema; the simulated model never refuses
	}
	c := map[string]any{"id": newID(), "object": "chat.completion", "created": time.Now().Unix(), "model": model,
		"system_fingerprint": fingerprint,
		"choices":            []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}}}
	if usage != nil {
		c["usage"] = usage
	}
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // unreachable: plain maps and strings
	}
	return Reply{Body: b}
}

// fingerprint is the system_fingerprint of every simulated answer.
const fingerprint = "fp_phasegate_sim"

// newID returns a fresh completion id: "chatcmpl-" and 26 random
// characters, unique as OpenAI's are, so a client or log that keys
// answers by id never sees two the same.
func newID() string { return "chatcmpl-" + rand.Text() }
