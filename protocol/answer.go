package protocol

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"unsafe"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/deepseek"
	"github.com/phasegate/phasegate/envelope"
	"github.com/phasegate/phasegate/internal/jsonscan"
	"github.com/phasegate/phasegate/tools"
)

// StepKind is what one Step of an upstream answer carries.
type StepKind uint8

// Steps of an answer.
const (
	// StepOpening: the opening chunk, a role and nothing said; Data.
	StepOpening StepKind = iota + 1
	// StepChunk: a chunk of the pass-through reader, to forward as it is;
	// Data.
	StepChunk
	// StepText: content or reasoning, Text and Thought ("" is none). When
	// Raw, Data is the chunk that said them and may be forwarded byte for
	// byte; otherwise they are the text to write, what the hold-back
	// scanners let through.
	StepText
	// StepHeld: content a hold-back scanner held back (a '<' that might
	// have begun a marker or a delimiter) and let go at a tool call or the
	// finish, which comes next; Text.
	StepHeld
	// StepEnvelope: a complete orchestrator envelope in the content (read
	// only for a request with an envelope rule); Text is its body, between
	// the delimiters.
	StepEnvelope
	// StepEnvelopeOpen: an envelope is open at a tool call or the finish,
	// which comes next; after a call the answer may still close it.
	StepEnvelopeOpen
	// StepEnvelopeOver: the open envelope outgrew MaxEnvelopeBytes; the
	// reader drops it up to its end delimiter.
	StepEnvelopeOver
	// StepCall: the first tool call of the answer, complete; Call.
	StepCall
	// StepLeaked: the first tool call the model wrote into its content;
	// Leak.
	StepLeaked
	// StepFinish: the answer finished; Reason. Bare reports that no tool
	// call, native or leaked, was seen before it. What the finish settled
	// (held text, an open envelope, a leaked call, a call it made
	// complete) came before it as steps of their own.
	StepFinish
	// StepUsage: the usage object of a chunk; Usage.
	StepUsage
	// StepEnd: the events ended cleanly; End says how.
	StepEnd
)

// End is how the events of an answer ended cleanly.
type End uint8

// Ends of an answer.
const (
	// EndFinished: after a finish reason, without [DONE].
	EndFinished End = iota + 1
	// EndDone: [DONE] came.
	EndDone
	// EndTruncated: neither [DONE] nor a finish reason came.
	EndTruncated
)

// Step is one thing an upstream answer said, in the order it said it.
// Each kind sets the fields its comment names; the slices and strings of
// a step share the memory of the event that carried it, which the
// Response hands over to the reader (see Response.Events).
type Step struct {
	Kind          StepKind
	Data          []byte
	Raw           bool
	Text, Thought string
	Call          *chat.ToolCall
	Leak          *deepseek.LeakedCall
	Reason        string
	Bare          bool
	Usage         json.RawMessage
	End           End
}

// answer is one upstream answer, from the call that opens it to its
// settled usage; a strategy follows it here and nowhere else. It owns the
// upstream response: it reads it into Steps, closes it (early, when the
// strategy decided before its end), and settles its usage once — the last
// usage it reported (upstreams that repeat cumulative usage are counted
// once) or, for an answer stopped before it reported any, the gateway's
// estimate of what it cost. It is owned by one request.
type answer struct {
	s      *session
	req    *chat.Request
	prompt Prompt // the gateway's count of req
	resp   *Response
	rd     answerReader
	// usage is the last usage the answer reported; nil while it reported
	// none. DeepSeek reports usage on the finish chunk.
	usage   json.RawMessage
	closed  bool
	settled bool
}

// openAnswer sends req, whose count is p, through the session (retries,
// refit and fallback included) and opens its answer, read by rd. An
// answer without a stream is returned as it is: the strategy decides what
// a whole body is worth.
func openAnswer(ctx context.Context, s *session, req *chat.Request, p Prompt, rd answerReader) (*answer, error) {
	resp, err := s.send(ctx, req, &p)
	if err != nil {
		return nil, err
	}
	a := &answer{s: s, req: req, prompt: p, resp: resp, rd: rd}
	if resp.Events == nil {
		a.closed = true // a whole body holds nothing open
	}
	return a, nil
}

// steps reads the answer. Usage is the answer's own: it is kept here, for
// settling, and not yielded.
func (a *answer) steps() iter.Seq2[Step, error] {
	return func(yield func(Step, error) bool) {
		for st, err := range a.rd.steps(a.resp.Events) {
			if err == nil && st.Kind == StepUsage {
				a.usage = st.Usage
				continue
			}
			if !yield(st, err) {
				return
			}
		}
	}
}

// header is the id, created, model and fingerprint of the answer's first
// chunk; zero before it was read.
func (a *answer) header() chat.ChunkHeader { return a.rd.header }

// said decodes the content and reasoning the answer said so far.
func (a *answer) said() (content, reasoning string, err error) { return a.rd.saidText() }

// content is the content the envelope scan read, as it was written, up to
// MaxEnvelopeBytes: what the keyword fallback and a re-ask look at.
func (a *answer) content() string {
	if a.rd.env == nil {
		return ""
	}
	return a.rd.env.said.String()
}

// close releases the answer read to its end, or given up after an error:
// its usage is what it reported, nothing when it reported none. It may be
// called again, and after stop.
func (a *answer) close() {
	a.settle(false, "")
	a.release()
}

// stop closes the answer before its end, which stops the upstream
// generating: the strategy decided (a tool call, an envelope asked again),
// or the client left. Its usage is what it reported or, when it reported
// none yet, an estimate of what it generated: the text read, plus more,
// what was decided on (a call's name and arguments).
func (a *answer) stop(more string) {
	a.release()
	a.settle(true, more)
}

func (a *answer) release() {
	if !a.closed {
		a.closed = true
		a.resp.Close()
	}
}

// settle adds the answer's usage to the session's, once: what it reported,
// else, when estimate, the gateway's estimate.
func (a *answer) settle(estimate bool, more string) {
	switch {
	case a.settled:
	case a.usage != nil:
		a.settled = true
		a.s.addUsage(a.usage, a.prompt)
	case estimate:
		a.settled = true
		a.s.estimateUsage(a.req, a.prompt, string(a.rd.gen)+more)
	}
}

// answerReader turns the events of one upstream answer into Steps. It
// reads and never decides: what to forward, refuse or retry is the
// strategy's. The guard's reader (guard true) decodes what a decision
// needs — text, tool calls assembled from their deltas, the finish, usage
// — and passes the content through its hold-back scanners (calls leaked
// into the content; orchestrator envelopes when env is set), taking the
// byte-level fast paths where
// a chunk has the shape of the one before; the pass-through reader only
// finds the opening chunk, the finish and usage, and checks that every
// chunk is JSON. Not safe for concurrent use.
type answerReader struct {
	guard bool
	// slow reads every chunk whole, without the fast paths: the reference
	// the fast paths are fuzzed against.
	slow bool
	n    int // events read
	// header is the id, created, model and fingerprint of the first chunk.
	header chat.ChunkHeader
	acc    tools.Accumulator
	leak   leakScan
	// env is the envelope scan, nil when the request has no envelope
	// rule.
	env  *envelopeScan
	held [2][]Step // the hold-back scanners' buffers, reused
	// heldSpace backs held until an answer needs more.
	heldSpace [2][2]Step
	tpl       textTemplates
	args      argsTemplate
	// decoded: a chunk with choices was read; only then do the text fast
	// paths apply, so that the opening chunk is always read whole.
	decoded  bool
	opened   bool // StepOpening yielded
	called   bool // StepCall yielded
	leaked   bool // StepLeaked yielded
	finished bool
	// said are the chunks that carried content or reasoning, as they
	// came: decoded only when a refusal needs the text.
	said [][]byte
	// gen is the reasoning and content generated, as read, for the usage
	// estimate of an answer closed before it reported usage.
	gen []byte
}

// steps reads events to their end, or until the consumer stops. A read
// error is yielded wrapped with the event number; an event that is not a
// chat completion chunk is an *InvalidResponseError.
func (r *answerReader) steps(events iter.Seq2[[]byte, error]) iter.Seq2[Step, error] {
	return func(yield func(Step, error) bool) {
		for data, err := range events {
			if err != nil {
				if r.finished && errors.Is(err, ErrTruncated) {
					// Cut after the finish: nothing of the answer is
					// missing but the closing [DONE].
					r.end(false, yield)
					return
				}
				yield(Step{}, fmt.Errorf("read upstream event %d: %w", r.n+1, err))
				return
			}
			r.n++
			if string(data) == chat.Done {
				r.end(true, yield)
				return
			}
			read := r.passChunk
			if r.guard {
				read = r.guardChunk
			}
			if err := read(data, yield); err != nil {
				if err != errClientGone {
					yield(Step{}, err)
				}
				return
			}
		}
		r.end(false, yield)
	}
}

// yieldFunc is the consumer of steps.
type yieldFunc = func(Step, error) bool

// emit passes st on; errClientGone means the consumer stopped.
func emit(yield yieldFunc, st Step) error {
	if !yield(st, nil) {
		return errClientGone
	}
	return nil
}

// end closes the answer. [DONE] without a finish reason still ends it
// cleanly: every call seen is complete, and the guard's reader settles it
// as a finish with "stop". Neither is a truncated answer: only an end
// with neither [DONE] nor a finish reason is.
func (r *answerReader) end(done bool, yield yieldFunc) {
	if !r.finished && done && r.guard {
		if r.finish(chat.FinishStop, yield) != nil {
			return
		}
	}
	end := EndFinished
	switch {
	case done:
		end = EndDone
	case !r.finished:
		end = EndTruncated
	}
	yield(Step{Kind: StepEnd, End: end}, nil)
}

// passChunk reads a chunk for the pass-through: usage, finish, then the
// chunk itself, so that a transient finish can be retried before the
// chunk is forwarded. The chunks before the first with choices are
// decoded; the others are only checked to be an object by their first and
// last bytes (a full validation would cost the pass-through more than all
// its other work on a chunk), which catches a line of text, an HTML page
// and a cut line.
func (r *answerReader) passChunk(data []byte, yield yieldFunc) error {
	if !looksLikeObject(data) {
		return invalidResponse(nil, "upstream event %d is not a JSON object", r.n)
	}
	if r.n == 1 || !r.decoded {
		c, err := chat.DecodeChunk(data)
		if err != nil {
			return r.notChunk(data, err)
		}
		if len(c.Choices) == 0 {
			if err := streamError(data); err != nil {
				return err
			}
		} else {
			r.decoded = true
		}
		if opening(&c) && !r.opened {
			r.opened = true
			return emit(yield, Step{Kind: StepOpening, Data: data})
		}
	}
	r.opened = true // what follows a forwarded chunk is no opening
	k := scanKeys(data)
	if k.error {
		if err := streamError(data); err != nil {
			return err
		}
	}
	if k.usage {
		if u := usageOf(data); u != nil {
			if err := emit(yield, Step{Kind: StepUsage, Usage: u}); err != nil {
				return err
			}
		}
	}
	if k.finish && !r.finished {
		if reason := finishReason(data); reason != "" {
			r.finished = true
			if err := emit(yield, Step{Kind: StepFinish, Reason: reason, Bare: true}); err != nil {
				return err
			}
		}
	}
	return emit(yield, Step{Kind: StepChunk, Data: data})
}

// guardChunk reads a chunk for the guard.
func (r *answerReader) guardChunk(data []byte, yield yieldFunc) error {
	if r.decoded && !r.finished && !r.slow {
		if r.acc.Len() > 0 {
			if td, ok := r.args.read(data); ok {
				// An argument fragment of the call being streamed.
				r.acc.Add(td)
				return r.firstCall(yield)
			}
		}
		if content, reasoning, ok := r.tpl.read(data); ok {
			// The hot path: a plain text chunk, read without decoding.
			return r.text(data, content, reasoning, true, yield)
		}
	}
	c, err := chat.DecodeChunk(data)
	if err != nil {
		return r.notChunk(data, err)
	}
	if r.header.ID == "" {
		r.header = chat.ChunkHeader{ID: c.ID, Created: c.Created, Model: c.Model, SystemFingerprint: c.SystemFingerprint}
	}
	if c.HasUsage() {
		if err := emit(yield, Step{Kind: StepUsage, Usage: c.Usage}); err != nil {
			return err
		}
	}
	if len(c.Choices) == 0 {
		return streamError(data) // a usage chunk; an error object is not
	}
	if r.finished {
		return nil // after the finish only usage matters
	}
	return r.guardDelta(data, &c, yield)
}

// guardDelta reads the first choice of a decoded chunk.
func (r *answerReader) guardDelta(data []byte, c *chat.Chunk, yield yieldFunc) error {
	r.decoded = true
	d := c.Choices[0].Delta
	text := d.Content != nil && *d.Content != ""
	thought := d.ReasoningContent != nil && *d.ReasoningContent != ""
	reason := c.FinishReason()
	switch {
	case text || thought:
		plain := len(d.ToolCalls) == 0 && reason == "" && !c.HasUsage() && len(c.Choices) == 1
		cs, rs, spans := span{}, span{}, false
		if plain {
			cs, rs, spans = textSpans(data)
		}
		if spans && !r.slow {
			r.tpl.learn(data, &d, cs, rs)
		}
		content, reasoning := "", ""
		if text {
			content = *d.Content
			if spans && spanIs(data, cs, content) {
				// The bytes as they came, as the template reads them: a
				// multi-byte character split across chunks reaches the
				// leak scan whole, not as two replacement characters.
				content = unsafe.String(&data[cs.start], cs.end-cs.start)
			}
		}
		if thought {
			reasoning = *d.ReasoningContent
		}
		if err := r.text(data, content, reasoning, plain, yield); err != nil {
			return err
		}
	case opening(c) && !r.opened:
		r.opened = true
		if err := emit(yield, Step{Kind: StepOpening, Data: data}); err != nil {
			return err
		}
	}
	if len(d.ToolCalls) > 0 {
		r.opened = true
		for _, td := range d.ToolCalls {
			r.acc.Add(td)
		}
		r.args.learn(data, c)
		if err := r.firstCall(yield); err != nil {
			return err
		}
	}
	if reason != "" {
		return r.finish(reason, yield)
	}
	return nil
}

// text reads the content and reasoning of a chunk: the content goes
// through the hold-back scanners, and a chunk whose content they left
// alone may be forwarded as it came when plain (nothing in it but text).
func (r *answerReader) text(data []byte, content, reasoning string, plain bool, yield yieldFunc) error {
	if content == "" && reasoning == "" {
		return nil // an empty chunk says nothing
	}
	r.opened = true // what follows text is no opening
	r.said = append(r.said, data)
	if r.gen == nil {
		r.gen = make([]byte, 0, 2048) // most answers before a tool call are shorter
	}
	r.gen = append(append(r.gen, reasoning...), content...)
	steps := r.hold(content, holdOn)
	if plain && whole(steps, content) {
		return emit(yield, Step{Kind: StepText, Data: data, Raw: true, Text: content, Thought: reasoning})
	}
	if reasoning != "" {
		// The reasoning goes with the first text let through, or alone
		// before what the scanners found.
		if len(steps) > 0 && steps[0].Kind == StepText {
			steps[0].Thought = reasoning
		} else {
			steps = append(steps, Step{})
			copy(steps[1:], steps)
			steps[0] = Step{Kind: StepText, Thought: reasoning}
		}
	}
	return r.emitHeld(steps, yield)
}

// whole reports whether the scanners let content through as it came.
func whole(steps []Step, content string) bool {
	if len(steps) == 0 {
		return content == ""
	}
	return len(steps) == 1 && steps[0].Kind == StepText && steps[0].Text == content
}

// emitHeld yields what the hold-back scanners gave, in order; of the
// calls leaked into the content, the first only.
func (r *answerReader) emitHeld(steps []Step, yield yieldFunc) error {
	for _, st := range steps {
		if st.Kind == StepLeaked {
			if r.leaked {
				continue
			}
			r.leaked = true
		}
		if err := emit(yield, st); err != nil {
			return err
		}
	}
	return nil
}

// firstCall yields the first tool call once it is complete.
func (r *answerReader) firstCall(yield yieldFunc) error {
	if r.called {
		return nil
	}
	if tc, complete := r.acc.First(); complete {
		// What the scanners held back was said before the call: it comes
		// first.
		if err := r.emitHeld(r.hold("", holdCall), yield); err != nil {
			return err
		}
		return r.call(tc, yield)
	}
	return nil
}

// call yields the first tool call.
func (r *answerReader) call(tc chat.ToolCall, yield yieldFunc) error {
	r.called = true
	call := tc // only a complete call reaches the heap
	return emit(yield, Step{Kind: StepCall, Call: &call})
}

// finish settles the answer at its finish reason: what the scanners held
// back (text, an open envelope, a call leaked into the content) and a
// call the finish made complete come first, each a step of its own, then
// the bare StepFinish.
func (r *answerReader) finish(reason string, yield yieldFunc) error {
	bare := r.acc.Len() == 0 && !r.leak.Leaked()
	r.finished = true
	if err := r.emitHeld(r.hold("", holdEnd), yield); err != nil {
		return err
	}
	r.acc.Finish()
	if !r.called && r.acc.Len() > 0 {
		tc, _ := r.acc.First()
		if err := r.call(tc, yield); err != nil {
			return err
		}
	}
	return emit(yield, Step{Kind: StepFinish, Reason: reason, Bare: bare})
}

// holdAt is when the hold-back scanners read.
type holdAt uint8

const (
	holdOn   holdAt = iota // the content goes on
	holdCall               // a tool call: let go of what is held
	holdEnd                // the finish: the content ended
)

// A holdBack scanner reads the content as it streams: it lets through the
// text that is safe to say now, holds back a tail that may begin what it
// looks for (a marker, a delimiter) until more text settles it, and
// reports what it found as steps, in the order of the text.
type holdBack interface {
	// feed appends to out what text lets through (StepText) and what it
	// completes.
	feed(out []Step, text string) []Step
	// flush appends what the scanner held back: the text, StepHeld, and
	// what it found in it. At a call (end false) the content may go on.
	flush(out []Step, end bool) []Step
}

// hold passes content through the hold-back scanners in turn, the leak
// scan first: the text one lets through goes to the next. The steps are
// valid until the next call.
func (r *answerReader) hold(content string, at holdAt) []Step {
	if r.held[0] == nil {
		r.held[0], r.held[1] = r.heldSpace[0][:0], r.heldSpace[1][:0]
	}
	in, out := r.held[0][:0], r.held[1][:0]
	if content != "" {
		in = append(in, Step{Kind: StepText, Text: content})
	}
	out = through(&r.leak, in, out, at)
	if r.env != nil {
		in, out = out, through(r.env, out, in[:0], at)
	}
	r.held[0], r.held[1] = in, out
	return out
}

// through passes the text of steps through h, and the rest on as it is.
func through(h holdBack, steps, out []Step, at holdAt) []Step {
	for _, st := range steps {
		if st.Kind != StepText && st.Kind != StepHeld {
			out = append(out, st)
			continue
		}
		n := len(out)
		out = h.feed(out, st.Text)
		if st.Kind == StepHeld {
			for i := n; i < len(out); i++ {
				if out[i].Kind == StepText {
					out[i].Kind = StepHeld // still what was held back
				}
			}
		}
	}
	if at != holdOn {
		out = h.flush(out, at == holdEnd)
	}
	return out
}

// leakScan is the scan for tool calls leaked into the content, as a
// hold-back scanner.
type leakScan struct{ deepseek.LeakScanner }

func (s *leakScan) feed(out []Step, text string) []Step {
	text, calls := s.Feed(text)
	return leakSteps(out, StepText, text, calls)
}

// flush lets go of the held text; at a call, a call the scan was still
// reading is not the first and is dropped.
func (s *leakScan) flush(out []Step, end bool) []Step {
	text, calls := s.Flush()
	if !end {
		calls = nil
	}
	return leakSteps(out, StepHeld, text, calls)
}

func leakSteps(out []Step, kind StepKind, text string, calls []deepseek.LeakedCall) []Step {
	if text != "" {
		out = append(out, Step{Kind: kind, Text: text})
	}
	for i := range calls {
		out = append(out, Step{Kind: StepLeaked, Leak: &calls[i]})
	}
	return out
}

// envelopeScan is the scan for orchestrator envelopes, as a hold-back
// scanner. An envelope that outgrows MaxEnvelopeBytes is reported once
// and dropped up to its end delimiter, so a model that never writes it
// cannot make the gateway hold the whole answer.
type envelopeScan struct {
	scan envelope.Scanner
	// said is the content read, up to MaxEnvelopeBytes.
	said strings.Builder
	// dropping: the open envelope outgrew MaxEnvelopeBytes and is dropped
	// up to its end delimiter.
	dropping bool
}

func (s *envelopeScan) feed(out []Step, text string) []Step {
	if n := MaxEnvelopeBytes - s.said.Len(); n > 0 {
		s.said.WriteString(text[:min(n, len(text))])
	}
	if !s.scan.Inside() && s.scan.Held() == 0 && strings.IndexByte(text, '<') < 0 {
		// Nothing open or held, and nothing that could start a delimiter:
		// the text goes as it is (what Feed would say, without its slice).
		return append(out, Step{Kind: StepText, Text: text})
	}
	for _, p := range s.scan.Feed(text) {
		switch {
		case !p.Envelope:
			out = append(out, Step{Kind: StepText, Text: p.Text})
		case s.dropping:
			s.dropping = false // the end of an envelope given up on
		default:
			out = append(out, Step{Kind: StepEnvelope, Text: p.Text})
		}
	}
	switch {
	case s.dropping:
		s.scan.Discard()
	case s.scan.Held() > MaxEnvelopeBytes:
		s.dropping = true
		s.scan.Discard()
		out = append(out, Step{Kind: StepEnvelopeOver})
	}
	return out
}

// flush lets go of a held tail that is no delimiter and reports an open
// envelope (not one being dropped). At a call an open envelope stays
// open: the forced final answer reads on.
func (s *envelopeScan) flush(out []Step, end bool) []Step {
	if s.scan.Inside() {
		if !s.dropping {
			out = append(out, Step{Kind: StepEnvelopeOpen})
		}
		if end {
			s.scan = envelope.Scanner{}
		}
		return out
	}
	parts, _ := s.scan.Flush() // outside an envelope: at most a tail
	for _, p := range parts {
		out = append(out, Step{Kind: StepHeld, Text: p.Text})
	}
	return out
}

// saidText decodes the content and reasoning the answer said so far.
func (r *answerReader) saidText() (content, reasoning string, err error) {
	var cb, rb strings.Builder
	for _, data := range r.said {
		c, err := chat.DecodeChunk(data)
		if err != nil {
			return "", "", err
		}
		if len(c.Choices) == 0 {
			continue
		}
		if d := c.Choices[0].Delta; d.Content != nil {
			cb.WriteString(*d.Content)
		}
		if d := c.Choices[0].Delta; d.ReasoningContent != nil {
			rb.WriteString(*d.ReasoningContent)
		}
	}
	return cb.String(), rb.String(), nil
}

// notChunk explains an event that does not decode as a chunk.
func (r *answerReader) notChunk(data []byte, err error) error {
	if e := streamError(data); e != nil {
		return e
	}
	return invalidResponse(err, "upstream event %d is not a chat completion chunk", r.n)
}

// streamError returns an *InvalidResponseError when data is an error
// object, as upstreams send one inside a stream that failed after its
// headers, and nil otherwise.
func streamError(data []byte) error { return errorObject(data, "inside the stream") }

// errorObject returns an *InvalidResponseError when data is an object
// with a non-null "error", saying where it came.
func errorObject(data []byte, where string) error {
	if !scanKeys(data).error {
		return nil
	}
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &v) != nil || len(v.Error) == 0 || string(v.Error) == "null" {
		return nil
	}
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(v.Error, &e) != nil || e.Message == "" {
		return invalidResponse(nil, "the upstream sent an error %s", where)
	}
	return invalidResponse(nil, "the upstream sent an error %s: %s", where, e.Message)
}

// opening reports whether a chunk says nothing yet: the role, an empty
// content, no finish and no usage.
func opening(c *chat.Chunk) bool {
	if c.HasUsage() || len(c.Choices) != 1 || c.FinishReason() != "" {
		return false
	}
	d := c.Choices[0].Delta
	return len(d.ToolCalls) == 0 && (d.Content == nil || *d.Content == "") && (d.ReasoningContent == nil || *d.ReasoningContent == "")
}

// keys are the keys of a chunk the pass-through looks at.
type keys struct {
	finish bool // "finish_reason" with a string value
	usage  bool
	error  bool
}

// scanKeys finds the keys the pass-through decodes a chunk for: most
// chunks carry none of them (and "finish_reason":null), so they are
// forwarded without decoding. The keys are found as clients read the
// wire, spelled as written (whitespace around the colon or not), never
// inside a string; the proxy's finish detectors read them the same way.
func scanKeys(data []byte) keys {
	var k keys
	k.finish = jsonscan.HasString(data, "finish_reason")
	k.usage = jsonscan.FindKey(data, "usage", 0) >= 0
	k.error = jsonscan.FindKey(data, "error", 0) >= 0
	return k
}

// finishReason returns a chunk's non-null finish reason, or "".
func finishReason(data []byte) string {
	c, err := chat.DecodeChunk(data)
	if err != nil {
		return ""
	}
	return c.FinishReason()
}

// usageOf returns the usage object of a chunk or a completion body, nil
// when it has none.
func usageOf(data []byte) json.RawMessage {
	var v struct {
		Usage json.RawMessage `json:"usage"`
	}
	if json.Unmarshal(data, &v) != nil || len(v.Usage) == 0 || string(v.Usage) == "null" {
		return nil
	}
	return v.Usage
}

// looksLikeObject reports whether data, space aside, starts with '{' and
// ends with '}'.
func looksLikeObject(data []byte) bool {
	b := bytes.TrimSpace(data)
	return len(b) >= 2 && b[0] == '{' && b[len(b)-1] == '}'
}
