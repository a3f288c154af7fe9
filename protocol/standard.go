package protocol

import (
	"context"
	"encoding/json"
	"errors"
	"iter"

	"github.com/phasegate/phasegate/metrics"
)

// Standard passes a request through unchanged: one upstream call, every
// event forwarded byte for byte, in order. What it shares with the guard —
// the opening chunk sent at once, transient retries before the first byte,
// truncation, usage — is the session's; what is its own is only that it
// forwards every chunk as it came, and whole answers too.
type Standard struct {
	// Tracer receives transient-finish events; nil discards them.
	Tracer Tracer
	// Metrics counts transient finishes; nil counts nothing.
	Metrics *metrics.Metrics
}

// Name returns "standard".
func (Standard) Name() string { return "standard" }

// Run sends the request upstream and yields its answer.
func (s Standard) Run(ctx context.Context, x *Exchange) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		ss := newSession(x, yield, s.Tracer, s.Metrics)
		if err := s.serve(ctx, ss); err != nil {
			ss.fail(err)
		}
	}
}

// serve makes the upstream call, again while it ends transiently unseen.
func (s Standard) serve(ctx context.Context, ss *session) error {
	x := ss.x
	p := x.Prompt
	for {
		a, err := openAnswer(ctx, ss, x.Request, p, answerReader{})
		if err != nil {
			return err
		}
		p = a.prompt
		var retry bool
		if a.resp.Events == nil {
			retry, err = s.whole(ctx, ss, a)
		} else {
			retry, err = s.pass(ctx, ss, a)
		}
		if !retry {
			return err
		}
	}
}

// whole passes on a non-streaming answer, once it is known to be a chat
// completion; one that ended transiently is retried as a stream's would be.
func (s Standard) whole(ctx context.Context, ss *session, a *answer) (retry bool, err error) {
	reason, usage, err := readCompletion(a.resp.Body)
	if err != nil {
		ss.failed(err)
		return false, err
	}
	if reason == FinishInsufficientResource && ss.transientFinish(ctx) {
		return true, nil
	}
	a.usage = usage
	a.close()
	return false, ss.put(Event{Kind: KindResponse, Status: a.resp.Status, Header: ss.withFallback(a.resp.Header), Data: a.resp.Body})
}

// pass forwards one streamed answer, and closes it however that ends. It
// reports retry when the answer ended transiently before a byte reached
// the client and the session allows another attempt.
func (s Standard) pass(ctx context.Context, ss *session, a *answer) (retry bool, err error) {
	defer a.close()
	if err := ss.start(a.resp.Header); err != nil {
		return false, err
	}
	for st, err := range a.steps() {
		if err != nil {
			// A connection cut before anything reached the client is as
			// transient as a clean end without [DONE].
			if errors.Is(err, ErrTruncated) && ss.retryUnseen(ctx, "stream cut") {
				return true, nil
			}
			ss.failed(err)
			return false, err
		}
		switch st.Kind {
		case StepOpening:
			if err := ss.open(st.Data, nil); err != nil {
				return false, err
			}
		case StepFinish:
			if st.Reason == FinishInsufficientResource && ss.transientFinish(ctx) {
				return true, nil
			}
		case StepChunk:
			if err := ss.emit(Event{Kind: KindChunk, Data: st.Data}); err != nil {
				return false, err
			}
		case StepEnd:
			return s.end(ctx, ss, st)
		}
	}
	return false, nil
}

// end closes a streamed answer. One cut short is retried unseen when it
// may be; else it is an error: a real status when not even the opening
// chunk went out, an in-band error after it.
func (s Standard) end(ctx context.Context, ss *session, st Step) (retry bool, err error) {
	switch {
	case st.End == EndTruncated && ss.retryUnseen(ctx, "no finish"):
		return true, nil
	case st.End == EndTruncated:
		ss.failed(ErrTruncated)
		return false, ErrTruncated
	case st.End == EndDone:
		return false, ss.emit(Event{Kind: KindDone})
	}
	return false, nil
}

// readCompletion checks that body is a chat completion and returns its
// first finish reason and its usage (nil when it has none).
func readCompletion(body []byte) (reason string, usage json.RawMessage, err error) {
	var c struct {
		Choices []struct {
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage json.RawMessage `json:"usage"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &c); err != nil {
		return "", nil, invalidResponse(err, "the upstream answer is not a JSON chat completion")
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		if err := errorObject(body, "with status 200"); err != nil {
			return "", nil, err
		}
	}
	if c.Choices == nil {
		return "", nil, invalidResponse(nil, "the upstream answer has no choices")
	}
	if len(c.Choices) > 0 && c.Choices[0].FinishReason != nil {
		reason = *c.Choices[0].FinishReason
	}
	if len(c.Usage) > 0 && string(c.Usage) != "null" {
		usage = c.Usage
	}
	return reason, usage, nil
}
