package protocol

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/envelope"
	"github.com/phasegate/phasegate/internal/jsonscan"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/tools"
)

// Phase is the phase of the guarded protocol a chunk belongs to (the
// "phase" of the phasegate metadata every chunk carries), as the wire
// spells it.
type Phase string

// Phases.
const (
	PhaseAction   Phase = "action_phase"
	PhaseTool     Phase = "tool_phase"
	PhaseComplete Phase = "complete"
)

// ExtensionKey is the top-level field of every chunk the guard writes that
// carries the phase metadata. OpenAI SDKs ignore fields they do not know.
const ExtensionKey = "phasegate"

// Tracer receives the trace events of the guard.
type Tracer interface {
	Trace(ctx context.Context, ev metrics.Trace)
}

// TwoStageConfig holds the guard's budgets and switches.
type TwoStageConfig struct {
	// MaxPhaseCycles is the number of tool executions a user turn may
	// hold; once reached, the final answer is forced. Default 3.
	MaxPhaseCycles int
	// MaxDuplicateAttempts is the number of refused calls (duplicates,
	// malformed, undeclared, off-schema, not allowed) one request may see
	// before the final answer is forced. Default 3.
	MaxDuplicateAttempts int
	// HideNotices keeps the "**System Notice**" content chunks from the
	// client; the model gets the notices either way.
	HideNotices bool
	// PlanTools is the read-only allowlist of plan mode.
	PlanTools []string
	// RepeatableTools are exempt from the duplicate rule while their
	// results change (run_tests, git_status, polling tools); the cycle
	// budget still counts them. The agent profile exempts every tool.
	RepeatableTools []string
	// StrictDuplicates is how the strict profile judges an exact repeat
	// (STRICT_DUPLICATES); "" is DuplicatesExact.
	StrictDuplicates Duplicates
	// MaxFailingStreak is the number of calls of one tool in a row that
	// may fail with the same error under the agent profile before the
	// next call of that tool is refused (MAX_FAILING_STREAK). Default
	// tools.DefaultMaxFailingStreak.
	MaxFailingStreak int
	// Profile is the rules of a request whose Limits name none; "" is
	// ProfileStrict.
	Profile Profile
	// AgentMaxPhaseCycles is MaxPhaseCycles under ProfileAgent. Default
	// DefaultAgentMaxPhaseCycles.
	AgentMaxPhaseCycles int
	// Envelopes are the phases orchestrator envelopes are judged by; nil
	// is the seed's five (envelope.Default).
	Envelopes *envelope.Set
	// MaxEnvelopeRetries is the number of re-asks an answer gets whose
	// envelope is invalid, or missing when required; 0 asks none again.
	// phasegate starts with DefaultMaxEnvelopeRetries.
	MaxEnvelopeRetries int
	// RulesNotice states the rules and budgets to the model in a system
	// message on every upstream call, before any violation
	// (GUARD_RULES_NOTICE); a request's Limits may turn it on.
	RulesNotice bool
	// WholeAnswers asks the upstream for a whole answer when the client
	// asked for one (GUARD_WHOLE_ANSWERS): one body read instead of a
	// stream of events, each rule applied to the whole answer as it is to
	// a stream. The guard then cannot stop the upstream at the first
	// complete tool call or cut a degenerate answer early: the upstream
	// generates, and bills, the whole answer. Off asks for a stream.
	WholeAnswers bool
	// Metrics counts the guard's decisions; nil counts nothing.
	Metrics *metrics.Metrics
}

// TwoStage is the tool-loop guard, the two-stage protocol: one tool call
// per response, no repeated call in a turn, a bounded number of refusals and a
// hard cycle budget. It keeps no state between requests: the history is
// the ledger. It is safe for concurrent use.
type TwoStage struct {
	cfg    TwoStageConfig
	tracer Tracer
}

// NewTwoStage returns the guard; zero budgets take their defaults and a
// nil tracer discards events.
func NewTwoStage(cfg TwoStageConfig, tracer Tracer) *TwoStage {
	if cfg.MaxPhaseCycles <= 0 {
		cfg.MaxPhaseCycles = 3
	}
	if cfg.MaxDuplicateAttempts <= 0 {
		cfg.MaxDuplicateAttempts = 3
	}
	if cfg.AgentMaxPhaseCycles <= 0 {
		cfg.AgentMaxPhaseCycles = DefaultAgentMaxPhaseCycles
	}
	if cfg.MaxFailingStreak <= 0 {
		cfg.MaxFailingStreak = tools.DefaultMaxFailingStreak
	}
	if cfg.Profile == "" {
		cfg.Profile = ProfileStrict
	}
	if tracer == nil {
		tracer = discardTracer{}
	}
	return &TwoStage{cfg: cfg, tracer: tracer}
}

// Name returns "two-stage".
func (*TwoStage) Name() string { return "two-stage" }

// Run serves one request. The upstream is asked to stream and to report
// usage (for a client that asked for a whole answer, with WholeAnswers, for
// a whole answer, read as the stream of it); the events yielded are the
// stream the client gets.
func (g *TwoStage) Run(ctx context.Context, x *Exchange) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		r := g.newRun(x, yield)
		defer func() {
			if v := recover(); v != nil {
				r.s.fail(&GuardError{Err: fmt.Errorf("panic: %v", v)})
			}
		}()
		if err := r.serve(ctx); err != nil {
			r.s.fail(err)
		}
	}
}

// guardRun is the state of one request. It is not safe for concurrent use.
type guardRun struct {
	g *TwoStage
	x *Exchange
	s *session

	guardRules
	refused int
	// rules is the rules notice every upstream call of the request
	// carries; "" when GUARD_RULES_NOTICE is off for it.
	rules string
	// env is the envelope rule and where it stands; nil when the request
	// has none.
	env *envelopeRun
	// degen is the degenerate text rule, of the answer being read; cut is
	// set once an answer of the request was cut for it.
	degen degenerateScan
	cut   bool
	// ref is the refusal the last step decided (see outcome).
	ref *refusal
	// extra are the messages the guard appends to the client's history
	// for its next upstream call: the assistant text of a refused answer,
	// then the notice.
	extra []chat.Message
	// held are notice lines for the client from before the response
	// started (the cycle-budget notice precedes the only upstream call):
	// an upstream error must still get a real status.
	held []string

	header chat.ChunkHeader
	stage  stage
	// unsaid is text the answer's scanners let go at a call or the
	// finish, written with the step that follows: an answer that said
	// nothing else and finished transiently is asked again unseen.
	unsaid []Step
	// afterNotice is whether the last content the client got was a notice.
	afterNotice bool
	// newlines is the number of newlines that end the content the client
	// got so far: a notice after text that ends its paragraph needs no
	// blank line of its own.
	newlines   int
	phase      Phase
	phaseIndex int
	ext        []byte
}

// stage is how far the response to the client got. It only moves on.
type stage uint8

const (
	// stageHolding: not started; notice lines are held, so that an
	// upstream error still gets a real status.
	stageHolding stage = iota
	// stageStarted: the headers are out, to go with the first chunk,
	// which carries the role.
	stageStarted
	// stageSaying: the role went out.
	stageSaying
)

func (g *TwoStage) newRun(x *Exchange, yield func(Event, error) bool) *guardRun {
	history := x.History
	if history == nil {
		history = x.Request.Messages
	}
	r := &guardRun{g: g, x: x, s: newSession(x, yield, g.tracer, g.cfg.Metrics), guardRules: g.rulesFor(x, history)}
	r.spent = x.Limits.Spent // the session's budget (package session), enforced only
	if x.Limits.Envelope != EnvelopeOff {
		r.env = &envelopeRun{rule: newEnvelopeRule(x.Limits.Envelope, g.cfg.Envelopes, g.cfg.MaxEnvelopeRetries)}
	}
	return r
}

// envelopeRun is the envelope rule of a request and where it stands.
type envelopeRun struct {
	rule    envelopeRule
	retries int
	// open: see envelopeState.
	open bool
	// report is the verdict on the answer being read; nil until an
	// envelope was judged or the answer ended.
	report *EnvelopeReport
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

func (e *envelopeRun) state() envelopeState {
	return envelopeState{retries: e.retries, open: e.open, reported: e.report != nil}
}

// reset starts the next answer: the rule applies to each answer, so the
// verdict on an earlier one (refused for its tool call, say) does not
// stand for the next.
func (e *envelopeRun) reset() {
	e.report, e.open = nil, false
}

func (r *guardRun) budget() tools.Budget { return r.progressRule.budget(r.refused) }

func (r *guardRun) trace(ctx context.Context, ev metrics.Trace) {
	if ev.Phase == "" {
		ev.Phase, ev.PhaseIndex = string(r.phase), r.phaseIndex
	}
	ev.CycleIndex = r.ledger.CycleIndex()
	r.s.trace(ctx, ev)
}

// setPhase moves to phase p, numbering phases from 1, and rebuilds the
// metadata every chunk carries.
func (r *guardRun) setPhase(ctx context.Context, p Phase, reason string) {
	if r.phase == p {
		return
	}
	if r.phase != "" {
		r.trace(ctx, metrics.Trace{Kind: metrics.TracePhaseEnd, Reason: reason})
	}
	cycle := r.ledger.CycleIndex()
	if p == PhaseTool || r.phase == PhaseTool {
		cycle++ // the cycle the forwarded call starts
	}
	r.phase = p
	r.phaseIndex++
	r.ext = phaseExtension(p, r.x.RequestID, r.x.ProjectID, r.phaseIndex, cycle)
	r.trace(ctx, metrics.Trace{Kind: metrics.TracePhaseStart})
}

// phaseExtension is the metadata every chunk of a phase carries, as
// json.Marshal writes the struct of these five members in this order
// (FuzzPhaseExtension holds it to that). A new slice each time: events
// already emitted keep the one they were given.
func phaseExtension(p Phase, requestID, projectID string, phaseIndex, cycleIndex int) []byte {
	b := make([]byte, 0, 80+len(p)+len(requestID)+len(projectID))
	b = jsonscan.AppendString(append(b, `{"phase":`...), string(p), true)
	b = jsonscan.AppendString(append(b, `,"request_id":`...), requestID, true)
	b = jsonscan.AppendString(append(b, `,"project_id":`...), projectID, true)
	b = strconv.AppendInt(append(b, `,"phase_index":`...), int64(phaseIndex), 10)
	b = strconv.AppendInt(append(b, `,"cycle_index":`...), int64(cycleIndex), 10)
	return append(b, '}')
}

// serve is the guard's loop: action phases until a call is forwarded, the
// model answers, or a budget forces the final answer.
func (r *guardRun) serve(ctx context.Context) error {
	r.setPhase(ctx, PhaseAction, "")
	r.traceResults(ctx)
	b := r.budget()
	if r.g.cfg.RulesNotice || r.x.Limits.RulesNotice {
		r.rules = tools.RulesNotice(string(r.profile), r.profile == ProfileAgent, b)
		r.trace(ctx, metrics.Trace{Kind: metrics.TraceRulesNotice, Reason: string(r.profile)})
		r.g.cfg.Metrics.RulesNotice()
	}
	if d := r.progressRule.judge(&Step{}, &view{}); d != nil && d.act == actFinal {
		return r.exhausted(ctx, d)
	}
	for {
		ref, err := r.ask(ctx, false)
		if err != nil || ref == nil {
			return err
		}
		r.refused++
		b := r.budget()
		kind := metrics.TraceToolCallRefused
		if ref.judgement.Verdict == tools.VerdictDuplicate {
			kind = metrics.TraceDuplicateToolCall
		}
		r.trace(ctx, metrics.Trace{Kind: kind, Tool: ref.call.Function.Name, ToolCallID: ref.call.ID,
			Verdict: string(ref.judgement.Verdict), Reason: ref.judgement.Reason})
		if ref.assistant != nil {
			r.extra = append(r.extra, *ref.assistant)
		}
		if err := r.notice(tools.Notice(ref.judgement, b), tools.Shown(ref.judgement, b)); err != nil {
			return err
		}
		if d := r.progressRule.judge(&Step{}, &view{refused: r.refused}); d != nil && d.act == actFinal {
			return r.exhausted(ctx, d)
		}
	}
}

// traceResults emits a tool_result event for each tool result the request
// brings: those answering the calls of the last assistant message.
func (r *guardRun) traceResults(ctx context.Context) {
	history := r.x.History
	if history == nil {
		history = r.x.Request.Messages
	}
	last := -1
	for i := len(history) - 1; i >= 0 && history[i].Role != chat.RoleUser; i-- {
		if history[i].Role == chat.RoleAssistant {
			last = i
			break
		}
	}
	if last < 0 {
		return
	}
	names := make(map[string]string, len(history[last].ToolCalls))
	for _, tc := range history[last].ToolCalls {
		names[tc.ID] = tc.Function.Name
	}
	for _, m := range history[last+1:] {
		if name, ok := names[m.ToolCallID]; ok && m.Role == chat.RoleTool {
			r.trace(ctx, metrics.Trace{Kind: metrics.TraceToolResult, Tool: name, ToolCallID: m.ToolCallID})
		}
	}
}

// exhausted applies a spent budget, the progress rule's actFinal: the
// final instruction, then exactly one final call with no tools.
func (r *guardRun) exhausted(ctx context.Context, d *decision) error {
	r.trace(ctx, metrics.Trace{Kind: metrics.TraceBudgetExhausted, Reason: d.label})
	r.g.cfg.Metrics.BudgetExhausted(d.label)
	if err := r.notice(d.notice, d.shown); err != nil {
		return err
	}
	_, err := r.ask(ctx, true)
	return err
}

// ask makes calls until the answer's envelope passes, or its re-asks are
// spent, and asks once more after an answer cut for degenerate text: an
// envelope refusal and a cut are put to the model here, a tool call's
// refusal is the caller's.
func (r *guardRun) ask(ctx context.Context, final bool) (*refusal, error) {
	for {
		ref, err := r.call(ctx, final)
		switch {
		case err != nil || ref == nil:
			return ref, err
		case ref.act == actCut:
			if done, err := r.onDegenerate(ctx, ref.decision); done || err != nil {
				return nil, err
			}
		case ref.act == actReask:
			if err := r.reask(ref); err != nil {
				return nil, err
			}
		default:
			return ref, nil
		}
	}
}

// onDegenerate applies the degenerate text rule's actCut, once the
// answer was closed: the model is asked again with the notice (the
// repeated text is not sent back: a model that sees itself repeat repeats
// more), or, final, the response is finished with the client's line. It
// reports whether the response is done.
func (r *guardRun) onDegenerate(ctx context.Context, d decision) (bool, error) {
	r.trace(ctx, metrics.Trace{Kind: metrics.TraceDegenerateText, Verdict: d.label, Reason: d.reason})
	r.g.cfg.Metrics.DegenerateText(d.field, d.label)
	if !d.final {
		r.cut = true
		return false, r.notice(d.notice, d.shown)
	}
	if !r.g.cfg.HideNotices {
		if err := r.writeNotice(d.shown); err != nil {
			return true, err
		}
	}
	if err := r.finish(ctx, chat.FinishStop); err != nil {
		return true, err
	}
	return true, r.closeStream()
}

// notice appends the full notice text for the model and shows the client
// its one line, shown ("" shows nothing).
func (r *guardRun) notice(text, shown string) error {
	r.extra = append(r.extra, chat.NewMessage(chat.RoleSystem, text))
	if r.g.cfg.HideNotices || shown == "" {
		return nil
	}
	if r.stage == stageHolding {
		r.held = append(r.held, shown)
		return nil
	}
	return r.writeNotice(shown)
}

// writeNotice shows the client a notice line as a paragraph of its own;
// lines that follow each other are one paragraph apart, not two.
func (r *guardRun) writeNotice(shown string) error {
	after, newlines := r.afterNotice, r.newlines
	if err := r.writeContent(noticeText(shown, after, newlines)); err != nil {
		return err
	}
	r.afterNotice = true
	return nil
}

// noticeText is a notice line as a paragraph of its own: a blank line
// before it, less the newlines the content before it already ends with.
func noticeText(text string, afterNotice bool, newlines int) string {
	if afterNotice {
		newlines = 2
	}
	return strings.Repeat("\n", max(2-newlines, 0)) + "**System Notice**: " + text + "\n\n"
}

// wrote notes content the client got: it ends any run of notices, and
// the newlines it ends with count towards the next notice's blank line.
func (r *guardRun) wrote(content string) {
	r.afterNotice = false
	if content == "" {
		return
	}
	trimmed := strings.TrimRight(content, "\n")
	if trimmed == "" {
		r.newlines += len(content)
		return
	}
	r.newlines = len(content) - len(trimmed)
}

// refusal is an answer the guard did not let end: the decision that
// refused it (a call refused, an envelope asked again, degenerate text
// cut) and what the model is shown it said.
type refusal struct {
	decision
	// call is the refused call (actRefuse).
	call chat.ToolCall
	// assistant holds what the model said before the call, with its
	// reasoning_content, for the next upstream call; nil when it said
	// nothing.
	assistant *chat.Message
}

// call makes one upstream call and passes its text on to the client; an
// answer that ended transiently unseen is asked again, as the next
// iteration. It returns a refusal when the model's first tool call was not
// forwarded, nil when the response is complete (a call forwarded, or an
// answer).
func (r *guardRun) call(ctx context.Context, final bool) (*refusal, error) {
	req, p, err := r.upstreamRequest(final)
	if err != nil {
		return nil, err
	}
	for {
		ref, retry, err := r.attempt(ctx, req, &p, final)
		if !retry {
			return ref, err
		}
	}
}

// attempt makes one upstream call and reads its answer. The answer is
// closed however reading ends, a panic included (the fallback must not
// leave it generating); a client that left stops it.
func (r *guardRun) attempt(ctx context.Context, req *chat.Request, p *Prompt, final bool) (ref *refusal, retry bool, err error) {
	a, err := r.open(ctx, req, *p)
	if err != nil {
		return nil, false, err
	}
	*p = a.prompt
	defer a.close()
	if r.env != nil {
		r.env.reset() // what a closed answer held is gone with it
	}
	r.degen = degenerateScan{}
	ref, retry, err = r.read(ctx, a, final)
	if errors.Is(err, errClientGone) {
		a.stop("")
	}
	return ref, retry, err
}

// open sends one upstream call and, on the first, starts the response:
// the upstream's headers with the phase metadata, then any held notice.
func (r *guardRun) open(ctx context.Context, req *chat.Request, p Prompt) (*answer, error) {
	rd := answerReader{guard: true}
	if r.env != nil {
		rd.env = &envelopeScan{}
	}
	a, err := openAnswer(ctx, r.s, req, p, rd)
	if err != nil {
		return nil, err
	}
	if a.resp.Events == nil && r.whole() {
		a.resp.Events = wholeEvents(a.resp.Body)
	}
	if a.resp.Events == nil {
		err := invalidResponse(nil, "the upstream answered a stream request without a stream")
		r.s.failed(err)
		return nil, err
	}
	if r.stage != stageHolding {
		return a, nil
	}
	if err := r.s.start(r.headers(a.resp.Header)); err != nil {
		a.close()
		return nil, err
	}
	r.stage = stageStarted
	for _, text := range r.held {
		if err := r.writeNotice(text); err != nil {
			a.close()
			return nil, err
		}
	}
	r.held = nil
	return a, nil
}

// read is the guard's loop over the steps of one answer. It reports retry
// when the answer ended transiently unseen.
func (r *guardRun) read(ctx context.Context, a *answer, final bool) (ref *refusal, retry bool, err error) {
	// pending is an envelope re-ask decided at the finish: the answer is
	// read on to its usage first.
	var pending *refusal
	r.unsaid = r.unsaid[:0]
	for st, err := range a.steps() {
		if err != nil && pending != nil {
			a.stop("")
			return pending, false, nil
		}
		if err != nil {
			// The proxy's transport reports a connection cut as a read
			// error wrapping ErrTruncated: as transient as a clean end
			// without [DONE].
			if errors.Is(err, ErrTruncated) && r.s.retryUnseen(ctx, "stream cut") {
				return nil, true, nil
			}
			r.s.failed(err)
			return nil, false, err
		}
		if r.header.ID == "" {
			r.header = a.header() // the upstream's, once its first chunk is read
		}
		switch {
		case st.Kind == StepHeld:
			r.unsaid = append(r.unsaid, st)
			continue
		case st.Kind == StepFinish && r.transient(ctx, st):
			return nil, true, nil
		case st.Kind == StepEnd && pending != nil:
			a.stop("")
			return pending, false, nil
		}
		for _, h := range r.unsaid {
			if err := r.text(h); err != nil {
				return nil, false, err
			}
		}
		r.unsaid = r.unsaid[:0]
		switch o, err := r.step(ctx, a, st, final); o {
		case deferred:
			pending = r.ref
		case refused:
			return r.ref, false, nil
		case retried:
			return nil, true, nil
		case answered:
			return nil, false, err
		}
	}
	return nil, false, nil
}

// outcome is what one step of an answer leaves the guard's loop to do.
type outcome uint8

const (
	// readOn: read the answer's next step.
	readOn outcome = iota
	// answered: the response is complete (a call forwarded, an answer
	// finished, or the answer read to its end).
	answered
	// refused: r.ref holds what was refused (a call, an envelope, a
	// degenerate answer, already stopped): the model is asked again.
	refused
	// deferred: r.ref holds an envelope re-ask decided at the finish; the
	// answer is read on to its usage first.
	deferred
	// retried: the answer ended transiently, unseen: it is asked again.
	retried
)

// step acts on one step of the answer: the rule of its kind decides (the
// degenerate text rule on text, the envelope rule on envelopes and the
// finish, the call policy on the first call), and apply acts on that.
func (r *guardRun) step(ctx context.Context, a *answer, st Step, final bool) (outcome, error) {
	r.ref = nil
	switch st.Kind {
	case StepOpening:
		if r.stage != stageStarted {
			return readOn, nil
		}
		r.stage = stageSaying
		return r.wroteStep(r.s.open(st.Data, r.ext))
	case StepEnd:
		retry, err := r.onEnd(ctx, a, st)
		if retry && err == nil {
			return retried, nil
		}
		return answered, err
	}
	return r.apply(ctx, a, &st, r.decide(&st, a, final))
}

// decide asks the rule of the step's kind for its decision; nil passes.
func (r *guardRun) decide(st *Step, a *answer, final bool) *decision {
	v := view{final: final, refused: r.refused, cut: r.cut}
	switch st.Kind {
	case StepText:
		return r.degen.judge(st, &v)
	case StepCall, StepLeaked:
		return r.calls.judge(st, &v)
	case StepEnvelope, StepEnvelopeOpen, StepEnvelopeOver, StepFinish:
		if r.env != nil {
			v.env, v.said = r.env.state(), a
			return r.env.rule.judge(st, &v)
		}
	}
	return nil
}

// apply acts on a rule's decision on st: it writes, counts, stops the
// answer and leaves the re-ask to the loop.
func (r *guardRun) apply(ctx context.Context, a *answer, st *Step, d *decision) (outcome, error) {
	if r.env != nil {
		r.envelopeStep(st)
	}
	if d == nil {
		return r.pass(ctx, st)
	}
	switch d.act {
	case actHold:
		r.env.open = true
	case actWrite:
		r.reportEnvelope(ctx, d)
		return r.wroteStep(r.writeContent(d.text))
	case actReport:
		r.reportEnvelope(ctx, d)
		return r.pass(ctx, st)
	case actReask:
		return r.reaskEnvelope(ctx, a, st, d)
	case actForward, actRefuse, actDrop:
		return r.onCall(ctx, a, st, d)
	case actCut:
		a.stop("")
		r.ref = &refusal{decision: *d}
		return refused, nil
	case actPass:
		return r.pass(ctx, st)
	}
	return readOn, nil
}

// pass lets a step go on as no rule stopped it: text is written, the one
// finish chunk written (the final call's tool calls were dropped).
func (r *guardRun) pass(ctx context.Context, st *Step) (outcome, error) {
	switch st.Kind {
	case StepText:
		return r.wroteStep(r.text(*st))
	case StepFinish:
		reason := st.Reason
		if reason == chat.FinishToolCalls {
			reason = chat.FinishStop
		}
		return r.wroteStep(r.finish(ctx, reason))
	}
	return readOn, nil
}

// wroteStep is the outcome of a step that wrote: the answer is read on,
// unless the write failed.
func (r *guardRun) wroteStep(err error) (outcome, error) {
	if err != nil {
		return answered, err
	}
	return readOn, nil
}

// envelopeStep keeps the envelope rule's standing as steps pass: a
// closed or given-up envelope is no longer open, and what came before it,
// like the text before a finish with none open, was a repeat or not.
func (r *guardRun) envelopeStep(st *Step) {
	switch {
	case st.Kind == StepEnvelope || st.Kind == StepEnvelopeOver:
		r.env.open = false
		r.env.repeat, r.env.matched = "", ""
	case st.Kind == StepFinish && !r.env.open:
		r.env.repeat, r.env.matched = "", ""
	}
}

// reportEnvelope keeps the envelope rule's report, when it made one, and
// counts and traces its decision. The phase label is a phase of the set
// or "none", so a model cannot grow the label space.
func (r *guardRun) reportEnvelope(ctx context.Context, d *decision) {
	if d.report != nil {
		r.env.report = d.report
	}
	var phase envelope.Phase
	if d.envelope != nil {
		phase = d.envelope.Phase
	}
	label := string(phase)
	if !r.env.rule.set.Known(phase) {
		label = "none"
	}
	r.g.cfg.Metrics.Envelope(label, d.label)
	reason := d.reason
	if reason != "" {
		reason = "; " + reason
	}
	r.trace(ctx, metrics.Trace{Kind: metrics.TraceEnvelope, Verdict: d.label, Reason: "phase " + label + reason})
}

// reaskEnvelope applies the envelope rule's actReask: the answer is
// closed, nothing of the envelope reached the client, and the refusal
// carries what the model said. At the finish the answer is read on to its
// usage first: the refusal is deferred to its end.
func (r *guardRun) reaskEnvelope(ctx context.Context, a *answer, st *Step, d *decision) (outcome, error) {
	atFinish := st.Kind == StepFinish
	if !atFinish {
		a.stop("")
	}
	r.reportEnvelope(ctx, d)
	r.env.said = a.content()
	content, reasoning, err := a.said()
	if err != nil {
		return answered, &GuardError{Err: fmt.Errorf("decode what the answer said: %w", err)}
	}
	if r.ref, err = refuse(*d, chat.ToolCall{}, content, reasoning, ""); err != nil {
		return answered, err
	}
	if atFinish {
		return deferred, nil
	}
	return refused, nil
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
	return r.notice(ref.notice, ref.shown)
}

// text writes text: a raw chunk byte for byte with the phase metadata
// added, unless it may repeat what the client got from an answer asked
// again; else rebuilt, the content less any such repeat.
func (r *guardRun) text(st Step) error {
	if st.Raw && (r.env == nil || r.env.repeat == "") {
		r.stage = stageSaying
		r.wrote(st.Text)
		return r.s.emit(Event{Kind: KindChunk, Data: st.Data, Ext: r.ext})
	}
	content, reasoning := optional(st.Text), optional(st.Thought)
	if r.env == nil {
		return r.writeDelta(chat.OutDelta{Content: content, ReasoningContent: reasoning})
	}
	if reasoning != nil {
		if err := r.writeDelta(chat.OutDelta{ReasoningContent: reasoning}); err != nil {
			return err
		}
	}
	// Less what repeats the text the client already got from the answer
	// asked again.
	var text string
	text, r.env.repeat, r.env.matched = unrepeated(r.env.repeat, r.env.matched, st.Text)
	if text == "" {
		return nil
	}
	return r.writeContent(text)
}

// optional is s, nil when empty: a delta's field that is absent.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// onCall applies the call policy's decision on the answer's first call,
// native (StepCall) or written into the content (StepLeaked): the forced
// final answer drops it (the reader yields one of each kind at most);
// else the upstream is done with (its later calls are never forwarded,
// and stopping it now stops the model generating before anything is
// written), and the call forwarded, ending the response, or refused.
func (r *guardRun) onCall(ctx context.Context, a *answer, st *Step, d *decision) (outcome, error) {
	if d.act == actDrop {
		r.trace(ctx, metrics.Trace{Kind: metrics.TraceToolCallRefused, Verdict: d.label, Reason: d.reason})
		r.g.cfg.Metrics.ToolCallJudged(d.label)
		return readOn, nil
	}
	tc, leaked := r.callOf(ctx, st)
	a.stop(tc.Function.Name + tc.Function.Arguments)
	logSchemaErr(ctx, r.x.RequestID, d.judgement)
	r.trace(ctx, metrics.Trace{Kind: metrics.TraceToolCall, Tool: tc.Function.Name, ToolCallID: tc.ID, Verdict: d.label})
	r.g.cfg.Metrics.ToolCallJudged(d.label)
	if d.act == actForward {
		return answered, r.forward(ctx, st, tc)
	}
	content, reasoning, err := a.said()
	if err != nil {
		return answered, &GuardError{Err: fmt.Errorf("decode what the answer said: %w", err)}
	}
	if r.ref, err = refuse(*d, tc, content, reasoning, leaked); err != nil {
		return answered, err
	}
	return refused, nil
}

// callOf is the call of st. A leaked call gets an id, is counted and
// traced, and comes with the content text it was read from, which is cut
// out of what the model is shown it said, so the re-ask does not hand the
// model its own broken markup back.
func (r *guardRun) callOf(ctx context.Context, st *Step) (tc chat.ToolCall, leaked string) {
	if st.Kind != StepLeaked {
		return *st.Call, ""
	}
	tc = st.Leak.Call
	tc.ID = newCallID()
	outcome := "recovered"
	if st.Leak.Err != nil {
		outcome = "malformed"
	}
	r.trace(ctx, metrics.Trace{Kind: metrics.TraceLeakedToolCall, Tool: tc.Function.Name, Verdict: outcome})
	r.g.cfg.Metrics.LeakedToolCall(outcome)
	return tc, st.Leak.Raw
}

// transient decides on an insufficient_system_resource finish: asked
// again unseen when nothing but text was said (and nothing reached the
// client, the text held back included); passed on (and counted)
// otherwise.
func (r *guardRun) transient(ctx context.Context, st Step) bool {
	if st.Reason != FinishInsufficientResource {
		return false
	}
	if st.Bare {
		return r.s.transientFinish(ctx)
	}
	r.s.passedOn(ctx)
	return false
}

// onEnd closes an answer read to its end: one cut short is asked again
// unseen (retry) when it may be, else it fails as truncated.
func (r *guardRun) onEnd(ctx context.Context, a *answer, st Step) (retry bool, err error) {
	if st.End == EndTruncated {
		// Neither [DONE] nor a finish reason: the answer was cut off, and
		// so were the arguments of any call still open: such a call is
		// never forwarded.
		if r.s.retryUnseen(ctx, "no finish") {
			return true, nil
		}
		r.s.failed(ErrTruncated)
		return false, ErrTruncated
	}
	a.close() // the usage chunk the client gets sums this answer's too
	return false, r.closeStream()
}

// refuse builds the refusal d decided, of tc when a call: what the model
// said before it goes back to the model with the notice, less leaked,
// the text of a leaked call.
func refuse(d decision, tc chat.ToolCall, content, reasoning, leaked string) (*refusal, error) {
	if leaked != "" {
		content = strings.TrimSpace(strings.Replace(content, leaked, "", 1))
	}
	ref := &refusal{decision: d, call: tc}
	if content == "" && reasoning == "" {
		return ref, nil
	}
	fields := map[string]any{"role": chat.RoleAssistant, "content": content}
	if reasoning != "" {
		fields["reasoning_content"] = reasoning
	}
	m, err := chat.NewMessageFields(fields)
	if err != nil {
		return nil, &GuardError{Err: err}
	}
	ref.assistant = &m
	return ref, nil
}

// forward writes tc, the call of st, as the response's only tool call,
// and ends it. An envelope left open is counted invalid and never shown
// (unless it was given up on already).
func (r *guardRun) forward(ctx context.Context, st *Step, tc chat.ToolCall) error {
	if tc.ID == "" {
		tc.ID = newCallID()
	}
	if tc.Type == "" {
		tc.Type = "function"
	}
	if r.env != nil {
		if d := r.env.rule.judge(st, &view{env: r.env.state()}); d != nil && d.act == actReport {
			r.reportEnvelope(ctx, d)
		}
		r.env.repeat, r.env.matched = "", ""
	}
	r.setPhase(ctx, PhaseTool, "tool call forwarded")
	td := chat.ToolCallDelta{Index: 0, ID: tc.ID, Type: tc.Type}
	td.Function.Name, td.Function.Arguments = tc.Function.Name, tc.Function.Arguments
	if err := r.writeDelta(chat.OutDelta{ToolCalls: []chat.ToolCallDelta{td}}); err != nil {
		return err
	}
	if err := r.finish(ctx, chat.FinishToolCalls); err != nil {
		return err
	}
	return r.closeStream()
}

// finish writes the one finish chunk of the response; a response that is
// not a tool call ends the turn.
func (r *guardRun) finish(ctx context.Context, reason string) error {
	r.setPhase(ctx, PhaseComplete, "finish: "+reason)
	r.ext = r.withEnvelope(r.ext)
	r.trace(ctx, metrics.Trace{Kind: metrics.TracePhaseEnd, Reason: "finish: " + reason})
	if reason != chat.FinishToolCalls {
		r.g.cfg.Metrics.TurnEnded(string(r.profile), r.ledger.CycleIndex())
	}
	c := r.header.NewChunk()
	c.Choices = []chat.OutChoice{{Index: 0, FinishReason: &reason}}
	c.Extension = r.ext
	return r.writeChunk(c)
}

// closeStream writes the usage chunk (when the client asked for usage) and
// [DONE].
func (r *guardRun) closeStream() error {
	// A non-streaming client always gets usage, as OpenAI gives it.
	if (r.x.Request.IncludeUsage || !r.x.Request.Stream) && len(r.s.usage) > 0 {
		c := r.header.NewChunk()
		c.Choices = []chat.OutChoice{}
		c.Usage = r.s.usage
		ext := r.ext
		if r.s.estimated {
			ext = chat.WithExtension(ext, "usage_estimated", []byte("true"))
		}
		c.Extension = ext
		if err := r.writeChunk(c); err != nil {
			return err
		}
	}
	return r.s.emit(Event{Kind: KindDone})
}

func (r *guardRun) writeContent(text string) error {
	return r.writeDelta(chat.OutDelta{Content: &text})
}

func (r *guardRun) writeDelta(d chat.OutDelta) error {
	if d.Content != nil {
		r.wrote(*d.Content)
	} else {
		r.afterNotice = false
	}
	if r.stage < stageSaying {
		d.Role, r.stage = chat.RoleAssistant, stageSaying
	}
	c := r.header.NewChunk()
	c.Choices = []chat.OutChoice{{Index: 0, Delta: d}}
	c.Extension = r.ext
	return r.writeChunk(c)
}

func (r *guardRun) writeChunk(c chat.OutChunk) error {
	if c.ID == "" {
		// The guard writes before any upstream chunk: it mints the
		// response's identity, once, for every chunk it writes.
		c.ID = "chatcmpl-" + newCallID()[5:]
		r.header.ID = c.ID
	}
	if c.Created == 0 {
		c.Created = time.Now().Unix()
		r.header.Created = c.Created
	}
	if c.Model == "" {
		c.Model = r.x.Request.Model
		r.header.Model = c.Model
	}
	b, err := c.AppendJSON(nil)
	if err != nil {
		return &GuardError{Err: err}
	}
	return r.s.emit(Event{Kind: KindChunk, Data: b})
}

func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
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
