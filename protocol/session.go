package protocol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
)

// FinishInsufficientResource is the finish reason DeepSeek gives when it
// dropped a request for lack of capacity: transient, worth a retry while
// the client has seen nothing.
const FinishInsufficientResource = "insufficient_system_resource"

// MaxTransientRetries bounds the retries of an answer that ended
// transiently before any byte reached the client.
const MaxTransientRetries = 2

// session is the stream hardening both strategies share, for one client
// request: it sends upstream calls (fitting again once after a
// context-length error), writes the events, sends the upstream's opening
// chunk at once, decides whether a transient end may be retried unseen,
// and sums the usage of every upstream call. It is owned by one request
// and not safe for concurrent use.
//
// Its ordering rules, each enforced here and nowhere else: KindStart comes
// first and once; one opening chunk at most reaches the client, the first
// answer's, before anything else it is sent; after a consumer stops,
// nothing more is yielded.
//
// An opening chunk carries the role and says nothing, so sending it
// commits nothing an answer asked again could contradict: a transient end
// after it is still retried unseen, and the answer asked again is written
// without its own opening (the proxy gives its chunks the first answer's
// identity). It does commit the headers: a failure after it is an in-band
// error, no longer a status.
type session struct {
	x       *Exchange
	yield   func(Event, error) bool
	tracer  Tracer
	metrics *metrics.Metrics

	gone    bool // the consumer stopped ranging
	started bool // KindStart yielded
	wrote   bool // a chunk past the opening, or [DONE], yielded
	// opened is that an opening chunk reached the client; again that an
	// answer was asked again after it.
	opened, again bool
	// transientLeft is how many transient ends may still be retried.
	transientLeft int
	refitted      bool // a context-length error was learned from once
	// fellBack is the fallback model the request switched to, "" while
	// it has not.
	fellBack string

	usage     json.RawMessage // summed over every upstream call
	estimated bool            // some of usage is the gateway's estimate
}

func newSession(x *Exchange, yield func(Event, error) bool, tracer Tracer, m *metrics.Metrics) *session {
	if tracer == nil {
		tracer = discardTracer{}
	}
	return &session{x: x, yield: yield, tracer: tracer, metrics: m, transientLeft: MaxTransientRetries, opened: x.Opened, again: x.Opened}
}

type discardTracer struct{}

func (discardTracer) Trace(context.Context, metrics.Trace) {}

// send makes one upstream call of req, whose count is *p. Before any byte
// reached the client, a context-length error is learned from and the
// request fitted again and sent once more (*p is then its new count), and
// a failure safe to retry is retried as the exchange's Retry allows.
func (s *session) send(ctx context.Context, req *chat.Request, p *Prompt) (*Response, error) {
	for attempt := 0; ; attempt++ {
		resp, err := s.x.Upstream.Send(ctx, req)
		if err == nil {
			return resp, nil
		}
		s.failed(err)
		if s.refit(ctx, req, p, err) {
			continue
		}
		wait, ok := s.retryWait(err, attempt)
		ok = ok && s.timeLeft(ctx, wait)
		if !ok {
			if !s.fallBack(ctx, req, p, err) {
				return nil, err
			}
			attempt = -1 // the fallback has retries of its own
			continue
		}
		f := Classify(err)
		s.trace(ctx, metrics.Trace{Kind: metrics.TraceUpstreamRetry, Verdict: f.UpstreamKind, Reason: wait.String()})
		s.metrics.UpstreamRetried(f.UpstreamKind)
		if !sleep(ctx, wait) {
			return nil, err
		}
	}
}

// fallBack switches the request to the exchange's fallback after err,
// when that is safe: nothing reached the client, err is one a new call may
// follow, and the fallback was not taken already. It reports whether it
// did.
func (s *session) fallBack(ctx context.Context, req *chat.Request, p *Prompt, err error) bool {
	fb := s.x.Fallback
	if fb == nil || s.fellBack != "" || s.wrote || s.opened || !Classify(err).RetrySafe || !s.timeLeft(ctx, 0) {
		return false
	}
	// The client's request too: the guard builds its later calls (re-asks)
	// from it, and they go to the fallback as well.
	for _, r := range []*chat.Request{req, s.x.Request} {
		if r.Set("model", fb.Model) != nil {
			return false
		}
		r.Model = fb.Model
	}
	if s.x.Tokens != nil {
		np, ferr := s.x.Tokens.Fit(req)
		if ferr != nil {
			return false // the fallback's window cannot hold it: the first failure stands
		}
		*p, s.x.Prompt = np, np
	}
	s.fellBack = fb.Model
	s.x.Upstream = fb.Upstream
	s.trace(ctx, metrics.Trace{Kind: metrics.TraceModelFallback, Verdict: Classify(err).UpstreamKind, Reason: fb.Model})
	s.metrics.ModelFallback()
	return true
}

// timeLeft reports whether a new upstream call started after wait would
// still start before the request's deadline and, while the client has no
// byte yet, before the exchange's FirstByteBy.
func (s *session) timeLeft(ctx context.Context, wait time.Duration) bool {
	at := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && !at.Before(d) {
		return false
	}
	return s.wrote || s.opened || s.x.FirstByteBy.IsZero() || at.Before(s.x.FirstByteBy)
}

// retryWait reports whether the failure err of attempt (from 0) may be
// retried, and after how long.
func (s *session) retryWait(err error, attempt int) (time.Duration, bool) {
	r := s.x.Retry
	if s.wrote || attempt >= r.Attempts || !Classify(err).RetrySafe {
		return 0, false
	}
	var ue *UpstreamError
	if errors.As(err, &ue) {
		if d, ok := retryAfter(ue.Header, time.Now()); ok {
			return d, r.MaxWait <= 0 || d <= r.MaxWait
		}
	}
	backoff := r.Base << min(attempt, 20)
	if r.MaxWait > 0 && (backoff > r.MaxWait || backoff <= 0) {
		backoff = r.MaxWait
	}
	if backoff <= 0 {
		return 0, true
	}
	return time.Duration(rand.Int64N(int64(backoff) + 1)), true
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date. A
// number of seconds too large for a time.Duration (18446744074, or a
// hundred digits) is the longest duration, not one that wrapped around to
// a short or negative wait.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if err != nil || n > uint64(math.MaxInt64/int64(time.Second)) {
			return time.Duration(math.MaxInt64), true
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// sleep waits d, or less when ctx ends first; it reports whether the wait
// ran out rather than ctx.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// refit reports whether err is a context-length error the request could
// now be fitted past.
func (s *session) refit(ctx context.Context, req *chat.Request, p *Prompt, err error) bool {
	var ue *UpstreamError
	if s.wrote || s.refitted || s.x.Tokens == nil || !errors.As(err, &ue) || ue.Status != http.StatusBadRequest {
		return false
	}
	if p.Counted == 0 {
		*p = s.x.Tokens.Prompt(req) // learning needs the count the fit skipped
	}
	if !s.x.Tokens.Learn(req, *p, ue.Body) {
		return false
	}
	s.refitted = true
	np, ferr := s.x.Tokens.Fit(req)
	// A fit that did not count kept the request as it was.
	if ferr != nil || np.Counted == 0 || np.Counted >= p.Counted {
		return false // no smaller fit is possible: the upstream's 400 stands
	}
	*p = np
	s.trace(ctx, metrics.Trace{Kind: metrics.TraceRefit, Reason: "context_length_exceeded"})
	return true
}

// failed tells the meter an upstream call failed.
func (s *session) failed(err error) {
	if s.x.Meter != nil {
		s.x.Meter.Failed(err)
	}
}

func (s *session) trace(ctx context.Context, ev metrics.Trace) {
	ev.RequestID, ev.ProjectID = s.x.RequestID, s.x.ProjectID
	s.tracer.Trace(ctx, ev)
	if m, ok := s.x.Meter.(RefusalMeter); ok && (ev.Kind == metrics.TraceToolCallRefused || ev.Kind == metrics.TraceDuplicateToolCall) {
		m.Refused(ev.Verdict)
	}
}

// start opens the response with the headers h; only the first call does.
func (s *session) start(h http.Header) error {
	if s.started {
		return nil
	}
	s.started = true
	return s.put(Event{Kind: KindStart, Header: s.withFallback(h)})
}

// withFallback names the fallback model in a copy of h when the request
// fell back.
func (s *session) withFallback(h http.Header) http.Header {
	if s.fellBack == "" {
		return h
	}
	h = h.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set("X-Phasegate-Fallback-Model", s.fellBack)
	return h
}

// open writes an answer's opening chunk at once, the first answer's only:
// the client has its role, and the opening of an answer asked again would
// be a second.
func (s *session) open(data, ext []byte) error {
	if s.opened || s.wrote {
		return nil
	}
	if err := s.emit(Event{Kind: KindChunk, Data: data, Ext: ext, Opening: true}); err != nil {
		return err
	}
	s.wrote, s.opened = false, true
	return nil
}

// emit writes ev. Nothing is written before the start event: that would
// be a broken invariant of the strategy, a guard failure the standard
// protocol can still take over. A chunk of an answer asked again after the
// opening went out is marked Again.
func (s *session) emit(ev Event) error {
	if !s.started {
		return &GuardError{Err: fmt.Errorf("%s event before the start event", ev.Kind)}
	}
	if ev.Kind == KindChunk || ev.Kind == KindDone {
		s.wrote = true
		ev.Again = ev.Kind == KindChunk && s.again
	}
	return s.put(ev)
}

func (s *session) put(ev Event) error {
	if s.gone {
		return errClientGone
	}
	if !s.yield(ev, nil) {
		s.gone = true
		return errClientGone
	}
	return nil
}

// fail ends the sequence with err. A guard failure after more than the
// opening chunk reached the client is no longer one the standard protocol
// could take over.
func (s *session) fail(err error) {
	if s.gone || errors.Is(err, errClientGone) {
		return
	}
	var ge *GuardError
	if s.wrote && errors.As(err, &ge) {
		err = ge.Err
	}
	s.gone = true
	s.yield(Event{}, err)
}

// retryUnseen reports whether an answer that ended transiently may be
// asked again unseen: nothing reached the client and retries are left. It
// counts the retry.
func (s *session) retryUnseen(ctx context.Context, reason string) bool {
	if s.wrote || s.transientLeft == 0 {
		return false
	}
	s.transientLeft--
	s.again = s.opened
	s.trace(ctx, metrics.Trace{Kind: metrics.TraceTransientFinish, Verdict: "retried", Reason: reason})
	s.metrics.TransientFinish("retried")
	return true
}

// transientFinish decides on an insufficient_system_resource finish:
// retried when retryUnseen allows, else passed on and counted.
func (s *session) transientFinish(ctx context.Context) bool {
	if s.retryUnseen(ctx, FinishInsufficientResource) {
		return true
	}
	s.passedOn(ctx)
	return false
}

// passedOn counts an insufficient_system_resource finish passed on to the
// client as it came.
func (s *session) passedOn(ctx context.Context) {
	s.trace(ctx, metrics.Trace{Kind: metrics.TraceTransientFinish, Verdict: "passed_on", Reason: FinishInsufficientResource})
	s.metrics.TransientFinish("passed_on")
}

// addUsage adds the usage an upstream call reported; p is the gateway's
// count of that call's prompt.
func (s *session) addUsage(raw json.RawMessage, p Prompt) {
	sum, err := chat.AddUsage(s.usage, raw)
	if err != nil {
		return // not an object: the client's usage stays what it was
	}
	s.usage = sum
	if s.x.Meter != nil {
		var u struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
			Hit        int `json:"prompt_cache_hit_tokens"` // DeepSeek
			Details    struct {
				Cached int `json:"cached_tokens"` // OpenAI
			} `json:"prompt_tokens_details"`
		}
		_ = json.Unmarshal(raw, &u)
		s.x.Meter.Usage(Usage{Prompt: p, PromptTokens: u.Prompt, CompletionTokens: u.Completion, CacheHitTokens: max(u.Hit, u.Details.Cached)})
	}
}

// estimateUsage stands in for the usage of a call closed before the
// upstream reported it: the gateway's count of the call's prompt (the
// learned ratio applied) and the tokenizer's count of what it generated.
// A prompt the fit did not count is counted now. Without a tokenizer it
// falls back to four bytes a token.
func (s *session) estimateUsage(req *chat.Request, p Prompt, generated string) {
	if p.Counted == 0 && s.x.Tokens != nil {
		p = s.x.Tokens.Prompt(req)
	}
	prompt, completion := p.Estimate, (len(generated)+3)/4
	if prompt == 0 {
		prompt = req.EncodedLen() / 4
	}
	if s.x.Tokens != nil {
		completion = s.x.Tokens.Count(req.Model, generated)
	}
	u, _ := json.Marshal(map[string]int{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
	s.usage, _ = chat.AddUsage(s.usage, u)
	s.estimated = true
	if s.x.Meter != nil {
		s.x.Meter.Usage(Usage{Prompt: p, PromptTokens: prompt, CompletionTokens: completion, Estimated: true})
	}
}
