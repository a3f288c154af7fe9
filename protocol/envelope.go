package protocol

import (
	"fmt"
	"strings"

	"github.com/phasegate/phasegate/envelope"
	"github.com/phasegate/phasegate/metrics"
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

// envelopeRule is the rule of orchestrator envelopes, for a request
// whose mode is not EnvelopeOff: the answer's reader finds the envelopes
// beside the leak scan, and the rule judges what it found. Its decisions,
// each with the envelope judged:
//   - on StepEnvelopeOpen, actHold: judged by what comes next;
//   - on StepEnvelope, actWrite of a valid envelope (the repaired JSON
//     when it was repaired), with its report;
//   - on an invalid envelope (StepEnvelope), one that outgrew
//     MaxEnvelopeBytes (StepEnvelopeOver), one left open at the finish, or
//     a missing one when required (StepFinish): actReask while re-asks are
//     left, with the notice; actReport of the verdict and the keyword
//     fallback's once they are spent (the envelope stays held back);
//   - at StepFinish, actReport of a missing one when optional;
//   - at a forwarded call (StepCall, StepLeaked), actReport of an envelope
//     left open, which is never shown;
//   - actPass otherwise.
type envelopeRule struct {
	mode EnvelopeMode
	set  *envelope.Set
	max  int
}

// envelopeState is where the envelope rule stands in a request.
type envelopeState struct {
	// retries is the number of re-asks so far.
	retries int
	// open: the answer's reader reported an envelope open at a call or
	// the finish, and none closed since.
	open bool
	// reported: the answer's envelope was judged (or given up on) already.
	reported bool
}

func newEnvelopeRule(mode EnvelopeMode, set *envelope.Set, max int) envelopeRule {
	if set == nil {
		set = envelope.Default()
	}
	return envelopeRule{mode: mode, set: set, max: max}
}

func (e envelopeRule) judge(st *Step, v *view) *decision {
	switch st.Kind {
	case StepEnvelopeOpen:
		return &decision{act: actHold}
	case StepEnvelope:
		return e.judgeBody(st.Text, v)
	case StepEnvelopeOver:
		// With no re-ask left, the reader drops the envelope up to its end.
		return e.failed(envelope.Result{
			Errors: []string{fmt.Sprintf("the envelope is over %d bytes without its end delimiter %s", MaxEnvelopeBytes, envelope.EndDelimiter)}}, v)
	case StepCall, StepLeaked:
		if v.env.open {
			return &decision{act: actReport, label: envelopeInvalid, reason: "missing end delimiter before a tool call"}
		}
	case StepFinish:
		return e.atEnd(v)
	}
	return nil
}

func (envelopeRule) labels() (decided, counted []string) {
	return []string{envelopeValid, envelopeRepaired, envelopeRetried, envelopeFallback, envelopeInvalid, envelopeMissing}, metrics.EnvelopeOutcomes
}

// judgeBody judges one complete envelope.
func (e envelopeRule) judgeBody(body string, v *view) *decision {
	res := e.set.Judge(body)
	if !res.Valid {
		return e.failed(res, v)
	}
	d := &decision{act: actWrite, label: envelopeValid, envelope: &res, text: envelope.StartDelimiter + body + envelope.EndDelimiter,
		report: &EnvelopeReport{Phase: res.Phase, Found: true, Valid: true, Repaired: res.Repaired, Errors: []string{}, Retries: v.env.retries}}
	if res.Repaired {
		d.label = envelopeRepaired
		d.text = envelope.StartDelimiter + "\n" + res.JSON + "\n" + envelope.EndDelimiter
	}
	return d
}

// atEnd settles the rule when the answer finished without a tool call:
// an envelope left open is invalid, and a missing one is asked again when
// required.
func (e envelopeRule) atEnd(v *view) *decision {
	if v.env.open {
		return e.failed(envelope.Result{Errors: []string{"missing end delimiter " + envelope.EndDelimiter}}, v)
	}
	if v.env.reported {
		return nil // judged, or given up on when it grew too long
	}
	missing := envelope.Result{Errors: []string{"missing start delimiter " + envelope.StartDelimiter}}
	if e.mode == EnvelopeRequired {
		return e.failed(missing, v)
	}
	return &decision{act: actReport, label: envelopeMissing, envelope: &missing,
		report: &EnvelopeReport{Errors: missing.Errors, Fallback: fallback(v.said.content())}}
}

// failed asks an invalid or missing envelope again while the budget
// allows; with the budget spent, the report carries its errors and the
// keyword fallback's verdict.
func (e envelopeRule) failed(res envelope.Result, v *view) *decision {
	reason := strings.Join(res.Errors, "; ")
	if v.env.retries < e.max {
		return &decision{act: actReask, label: envelopeRetried, reason: reason, envelope: &res,
			notice: e.set.Notice(res, ""), shown: envelopeShown(res, v.env.retries+1, e.max)}
	}
	signals := fallback(v.said.content())
	outcome := envelopeInvalid
	if len(signals) > 0 {
		outcome = envelopeFallback
	}
	return &decision{act: actReport, label: outcome, reason: reason, envelope: &res,
		report: &EnvelopeReport{Phase: res.Phase, Found: res.Found, Errors: res.Errors, Retries: v.env.retries, Fallback: signals}}
}

// envelopeShown is the client's line on the retry-th re-ask of max.
func envelopeShown(res envelope.Result, retry, max int) string {
	first := "the envelope is missing"
	if len(res.Errors) > 0 {
		// Without the delimiters: the client's own parser must not find
		// an envelope in the notice line.
		first = strings.TrimSpace(withoutDelimiters(res.Errors[0]))
	}
	return fmt.Sprintf("The orchestrator envelope could not be used (%s); asking the model again (%d of %d).", first, retry, max)
}

// fallback is the keyword fallback's verdict on the answer's content: an
// empty list when nothing matched.
func fallback(content string) []envelope.Signal {
	if s := envelope.Fallback(content); s != nil {
		return s
	}
	return []envelope.Signal{}
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

// unrepeated splits text, the next text of an answer asked again, by
// repeat, the text the client already got from the answer before it
// (matched of it held back so far): out is what the client does not have
// yet, nothing while text repeats (then held grows by it), the rest once
// the whole repeat matched, all that was held once it says something
// else. repeat and held are what is left to match and what is held.
func unrepeated(repeat, matched, text string) (out, rest, held string) {
	if repeat == "" {
		return text, "", matched
	}
	n := 0
	for n < len(text) && n < len(repeat) && text[n] == repeat[n] {
		n++
	}
	switch {
	case n == len(repeat):
		return text[n:], "", ""
	case n == len(text):
		return "", repeat[n:], matched + text
	}
	return matched + text, "", ""
}
