package protocol

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/envelope"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/tools"
)

// EnvelopeMode is whether the guard judges the orchestrator envelopes of
// an answer (the JSON envelopes, one per phase of its work, that package
// envelope defines), and whether an answer must carry one.
type EnvelopeMode string

// Envelope modes.
const (
	// EnvelopeOff leaves the answer's text alone.
	EnvelopeOff EnvelopeMode = ""
	// EnvelopeOptional judges an envelope the answer writes: a broken one
	// is asked again, a missing one is not.
	EnvelopeOptional EnvelopeMode = "optional"
	// EnvelopeRequired also asks again an answer that writes none.
	EnvelopeRequired EnvelopeMode = "required"
)

// ParseEnvelopeMode reads a mode as the X-Phasegate-Envelope header and
// the config file spell it: optional, required, or off ("" is off too).
func ParseEnvelopeMode(s string) (EnvelopeMode, error) {
	switch m := EnvelopeMode(strings.ToLower(strings.TrimSpace(s))); m {
	case EnvelopeOptional, EnvelopeRequired:
		return m, nil
	case "", "off":
		return EnvelopeOff, nil
	default:
		return EnvelopeOff, fmt.Errorf("must be optional, required or off, got %q", s)
	}
}

// DefaultMaxEnvelopeRetries is the number of re-asks phasegate starts with
// for an answer whose envelope is invalid, or missing when required.
const DefaultMaxEnvelopeRetries = 2

// MaxEnvelopeBytes bounds an envelope the answer's reader holds back: an
// envelope still open past it is judged invalid, so a model that never
// writes the end delimiter cannot make the gateway hold the whole answer.
const MaxEnvelopeBytes = 256 << 10

// Envelope outcomes, the outcome label of phasegate_envelopes_total.
const (
	envelopeValid    = "valid"    // as written
	envelopeRepaired = "repaired" // valid once repaired
	envelopeRetried  = "retried"  // invalid or missing, asked again
	envelopeFallback = "fallback" // budget spent; the keyword fallback matched
	envelopeInvalid  = "invalid"  // budget spent; nothing matched either
	envelopeMissing  = "missing"  // optional and not written
)

// EnvelopeReport is the verdict on a response's envelope, the "envelope"
// field of the phase metadata of its last chunks (and of a non-streaming
// answer's top-level phasegate object).
type EnvelopeReport struct {
	// Phase is the phase of the last envelope judged; "" when none.
	Phase envelope.Phase `json:"phase"`
	// Found is whether the answer wrote a complete envelope.
	Found bool `json:"found"`
	// Valid is whether the forwarded envelope satisfies its phase schema.
	Valid bool `json:"valid"`
	// Repaired is whether the forwarded envelope is the repaired JSON.
	Repaired bool `json:"repaired"`
	// Errors says what is wrong when not Valid.
	Errors []string `json:"errors"`
	// Retries is the number of re-asks the envelope took.
	Retries int `json:"retries"`
	// Fallback is the keyword fallback's verdict on the answer's text when
	// no valid envelope was forwarded (empty when no keyword matched);
	// null when one was.
	Fallback []envelope.Signal `json:"fallback"`
}

// envelopeRun is the envelope rule's state for one request: the policy
// the guard calls on the envelope steps of each answer (the answer's
// reader scans for envelopes beside the leak scan).
type envelopeRun struct {
	mode    EnvelopeMode
	set     *envelope.Set
	max     int
	retries int
	// report is the verdict on the answer being read; nil until an
	// envelope was judged or the answer ended.
	report *EnvelopeReport
	// open: the answer's reader reported an envelope open at a call or
	// the finish, and none closed since.
	open bool
	// said is the content of the answer last judged for a re-ask, as the
	// reader kept it.
	said string
	// repeat is the text the client already got from the answer last asked
	// again, not yet matched by the new answer: a model asked again
	// usually repeats what it wrote before its envelope, and the client
	// must not get it twice. matched is the new answer's text that matched
	// it so far, held back until the whole repeat matched (then dropped)
	// or the new answer says something else (then it goes out).
	repeat, matched string
}

func newEnvelopeRun(mode EnvelopeMode, set *envelope.Set, max int) *envelopeRun {
	if mode == EnvelopeOff {
		return nil
	}
	if set == nil {
		set = envelope.Default()
	}
	return &envelopeRun{mode: mode, set: set, max: max}
}

// reset starts the next answer: the rule applies to each answer, so the
// verdict on an earlier one (refused for its tool call, say) does not
// stand for the next.
func (e *envelopeRun) reset() {
	e.report, e.open = nil, false
}

// onEnvelope judges what the answer's reader found: a complete envelope,
// one that outgrew MaxEnvelopeBytes, or one left open at a call or the
// finish (judged by what comes next). It returns a refusal when the
// envelope must be asked again.
func (r *guardRun) onEnvelope(ctx context.Context, a *answer, st Step) (*refusal, bool, error) {
	if st.Kind == StepEnvelopeOpen {
		r.env.open = true
		return nil, false, nil
	}
	r.env.repeat, r.env.matched = "", "" // the envelope: what came before was a repeat
	r.env.open = false
	if st.Kind == StepEnvelope {
		return r.judgeEnvelope(ctx, a, st.Text)
	}
	// With no re-ask left, the reader drops the envelope up to its end.
	return r.envelopeFailed(ctx, a, envelope.Result{
		Errors: []string{fmt.Sprintf("the envelope is over %d bytes without its end delimiter %s", MaxEnvelopeBytes, envelope.EndDelimiter)}}, false)
}

// judgeEnvelope judges one complete envelope: a valid one is forwarded (the
// repaired JSON when it was repaired), an invalid one asked again or, with
// the budget spent, held back and reported.
func (r *guardRun) judgeEnvelope(ctx context.Context, a *answer, body string) (*refusal, bool, error) {
	res := r.env.set.Judge(body)
	if !res.Valid {
		return r.envelopeFailed(ctx, a, res, false)
	}
	outcome := envelopeValid
	text := envelope.StartDelimiter + body + envelope.EndDelimiter
	if res.Repaired {
		outcome = envelopeRepaired
		text = envelope.StartDelimiter + "\n" + res.JSON + "\n" + envelope.EndDelimiter
	}
	r.env.report = &EnvelopeReport{Phase: res.Phase, Found: true, Valid: true, Repaired: res.Repaired, Errors: []string{}, Retries: r.env.retries}
	r.countEnvelope(ctx, res.Phase, outcome, "")
	return nil, false, r.writeContent(text)
}

// envelopeAtEnd settles the envelope rule when the answer finished
// without a tool call: an envelope left open is invalid, and a missing one
// is asked again when required. A re-ask decided here is returned with
// done false: the answer is read on to its usage, which follows the
// finish, and the refusal is the caller's at its end.
func (r *guardRun) envelopeAtEnd(ctx context.Context, a *answer) (*refusal, bool, error) {
	if r.env == nil {
		return nil, false, nil
	}
	if r.env.open {
		return r.envelopeFailed(ctx, a, envelope.Result{Errors: []string{"missing end delimiter " + envelope.EndDelimiter}}, true)
	}
	r.env.repeat, r.env.matched = "", ""
	if r.env.report != nil {
		return nil, false, nil // judged, or given up on when it grew too long
	}
	missing := envelope.Result{Errors: []string{"missing start delimiter " + envelope.StartDelimiter}}
	if r.env.mode == EnvelopeRequired {
		return r.envelopeFailed(ctx, a, missing, true)
	}
	r.env.report = &EnvelopeReport{Errors: missing.Errors, Fallback: fallback(a.content())}
	r.countEnvelope(ctx, "", envelopeMissing, "")
	return nil, false, nil
}

// envelopeFailed asks an invalid or missing envelope again while the
// budget allows: the answer is closed and nothing of the envelope reached
// the client. With the budget spent, the envelope stays held back and the
// report carries its errors and the keyword fallback's verdict.
//
// atFinish is whether the answer has finished: it is then read on to its
// usage rather than closed, and the refusal returned with done false.
func (r *guardRun) envelopeFailed(ctx context.Context, a *answer, res envelope.Result, atFinish bool) (*refusal, bool, error) {
	if r.env.retries < r.env.max {
		if !atFinish {
			a.stop("")
		}
		r.countEnvelope(ctx, res.Phase, envelopeRetried, strings.Join(res.Errors, "; "))
		r.env.said = a.content()
		content, reasoning, err := a.said()
		if err != nil {
			return nil, false, &GuardError{Err: fmt.Errorf("decode what the answer said: %w", err)}
		}
		ref, err := refuse(chat.ToolCall{}, tools.Judgement{}, content, reasoning, "")
		if err != nil {
			return nil, false, err
		}
		ref.envelope = &res
		return ref, !atFinish, nil
	}
	signals := fallback(a.content())
	outcome := envelopeInvalid
	if len(signals) > 0 {
		outcome = envelopeFallback
	}
	r.env.report = &EnvelopeReport{Phase: res.Phase, Found: res.Found, Errors: res.Errors, Retries: r.env.retries, Fallback: signals}
	r.countEnvelope(ctx, res.Phase, outcome, strings.Join(res.Errors, "; "))
	return nil, false, nil
}

// fallback is the keyword fallback's verdict on the answer's content: an
// empty list when nothing matched.
func fallback(content string) []envelope.Signal {
	if s := envelope.Fallback(content); s != nil {
		return s
	}
	return []envelope.Signal{}
}

// countEnvelope counts and traces one verdict. The phase label is a phase
// of the set or "none", so a model cannot grow the label space.
func (r *guardRun) countEnvelope(ctx context.Context, phase envelope.Phase, outcome, reason string) {
	label := string(phase)
	if !r.env.set.Known(phase) {
		label = "none"
	}
	r.g.cfg.Metrics.Envelope(label, outcome)
	if reason != "" {
		reason = "; " + reason
	}
	r.trace(ctx, metrics.Trace{Kind: metrics.TraceEnvelope, Verdict: outcome, Reason: "phase " + label + reason})
}

// reask puts an envelope refusal to the model: what it said, then the
// notice that says what was wrong and the exact format.
func (r *guardRun) reask(ref *refusal) error {
	r.env.retries++
	// The client got the answer's text up to its envelope (all of it when
	// it wrote none).
	r.env.repeat, _, _ = strings.Cut(r.env.said, envelope.StartDelimiter)
	r.env.matched = ""
	if ref.assistant != nil {
		r.extra = append(r.extra, *ref.assistant)
	}
	first := "the envelope is missing"
	if len(ref.envelope.Errors) > 0 {
		// Without the delimiters: the client's own parser must not find
		// an envelope in the notice line.
		first = strings.TrimSpace(withoutDelimiters(ref.envelope.Errors[0]))
	}
	shown := fmt.Sprintf("The orchestrator envelope could not be used (%s); asking the model again (%d of %d).", first, r.env.retries, r.env.max)
	return r.notice(r.env.set.Notice(*ref.envelope, ""), shown)
}

var delimiters = strings.NewReplacer(envelope.StartDelimiter, "", envelope.EndDelimiter, "")

// withoutDelimiters removes the delimiters from s until none is left: one
// pass would make one of a delimiter wrapped around another.
func withoutDelimiters(s string) string {
	for strings.Contains(s, envelope.StartDelimiter) || strings.Contains(s, envelope.EndDelimiter) {
		s = delimiters.Replace(s)
	}
	return s
}

// envelopeAtCall settles the envelope rule when the answer ends in a
// forwarded tool call: an envelope left open is counted invalid and never
// shown (unless it was given up on already).
func (r *guardRun) envelopeAtCall(ctx context.Context) {
	if r.env == nil {
		return
	}
	if r.env.open {
		r.countEnvelope(ctx, "", envelopeInvalid, "missing end delimiter before a tool call")
	}
	r.env.repeat, r.env.matched = "", ""
}

// writeText writes text of the answer outside its envelopes, less what
// repeats the text the client already got from the answer asked again.
func (r *guardRun) writeText(text string) error {
	if text = r.env.unrepeated(text); text == "" {
		return nil
	}
	return r.writeContent(text)
}

// unrepeated returns what of text, the next text of the answer, the client
// does not have yet: nothing while it repeats the answer asked again (held
// in matched), then the rest; all that was held once it says something
// else.
func (e *envelopeRun) unrepeated(text string) string {
	if e.repeat == "" {
		return text
	}
	n := 0
	for n < len(text) && n < len(e.repeat) && text[n] == e.repeat[n] {
		n++
	}
	switch {
	case n == len(e.repeat):
		e.repeat, e.matched = "", ""
		return text[n:]
	case n == len(text):
		e.repeat, e.matched = e.repeat[n:], e.matched+text
		return ""
	}
	out := e.matched + text
	e.repeat, e.matched = "", ""
	return out
}

// withEnvelope adds the envelope report to the phase metadata.
func (r *guardRun) withEnvelope(ext []byte) []byte {
	if r.env == nil || r.env.report == nil {
		return ext
	}
	b, err := json.Marshal(r.env.report)
	if err != nil {
		return ext
	}
	return chat.WithExtension(ext, "envelope", b)
}
