// Package metrics holds what the gateway shows operators: the trace events
// of every decision of the guard, and (with the Prometheus collectors) the
// counts of them. It imports none of the gateway's other packages, so any
// of them may use it.
package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/phasegate/phasegate/internal/redact"
)

// TraceKind names a trace event: the tool call events, and the start and
// end of each phase of the guarded protocol, as logs spell them.
type TraceKind string

// Trace event kinds.
const (
	TraceToolCall          TraceKind = "tool_call"
	TraceToolResult        TraceKind = "tool_result"
	TraceDuplicateToolCall TraceKind = "duplicate_tool_call"
	TraceToolCallRefused   TraceKind = "tool_call_refused"
	TracePhaseStart        TraceKind = "orchestration_phase_start"
	TracePhaseEnd          TraceKind = "orchestration_phase_end"
	TraceBudgetExhausted   TraceKind = "budget_exhausted"
	TraceFallback          TraceKind = "fallback"
	// TraceTransientFinish: an upstream answer ended transiently; Verdict
	// is "retried" or "passed_on", Reason the finish reason.
	TraceTransientFinish TraceKind = "transient_finish"
	// TraceLeakedToolCall: a tool call the model wrote into its content;
	// Verdict is "recovered" or "malformed".
	TraceLeakedToolCall TraceKind = "leaked_tool_call"
	// TraceRefit: the upstream answered a context-length error before any
	// byte reached the client; the gateway learned from its figures,
	// fitted the request again and sent it once more.
	TraceRefit TraceKind = "refit"
	// TraceUpstreamRetry: an upstream call failed in a way safe to retry
	// before any byte reached the client, and is made again; Verdict is
	// the failure's kind, Reason the wait.
	TraceUpstreamRetry TraceKind = "upstream_retry"
	// TraceModelFallback: the retries of an upstream call were spent
	// before any byte reached the client, and the request went to its
	// fallback model; Verdict is the failure's kind, Reason the model.
	TraceModelFallback TraceKind = "model_fallback"
	// TraceEnvelope: an orchestrator envelope was judged, or found
	// missing; Verdict is the outcome (valid, repaired, retried, fallback,
	// invalid, missing), Reason the phase and what was wrong.
	TraceEnvelope TraceKind = "envelope"
	// TraceObservedToolCall is the would-be verdict of a call the client
	// executed under GUARD_MODE=observe: the guard judged it and let it be.
	TraceObservedToolCall TraceKind = "observed_tool_call"
	// TraceRulesNotice: the guard's rules were stated to the model in a
	// system message before any violation (GUARD_RULES_NOTICE); Reason is
	// the profile.
	TraceRulesNotice TraceKind = "rules_notice"
	// TraceDegenerateText: an answer repeated one phrase over and over and
	// was cut; Reason is the field (content or reasoning_content), Verdict
	// what followed (reasked or finished).
	TraceDegenerateText TraceKind = "degenerate_text"
)

// Trace is one event of the guard. It never holds argument bodies, prompt
// text or credentials: tool names, verdicts and counts only.
type Trace struct {
	Kind       TraceKind
	RequestID  string
	ProjectID  string
	Phase      string
	PhaseIndex int
	CycleIndex int
	// Tool is the function name of the call the event is about, if any.
	Tool string
	// ToolCallID is the id of that call, if any.
	ToolCallID string
	// Verdict is the guard's verdict on the call (tools.Verdict spelling).
	Verdict string
	// Reason is a short explanation: why a phase ended, which budget ran
	// out.
	Reason string
}

// TraceLog writes trace events as structured log lines.
type TraceLog struct {
	h slog.Handler
}

// NewTraceLog returns a tracer that logs to log at Info level. Its lines
// pass through RedactingHandler (unless log's handler already is one):
// tool names, call ids and reasons come from the model's output and from
// upstream errors, so they are not trusted to be free of credentials.
func NewTraceLog(log *slog.Logger) *TraceLog {
	return &TraceLog{h: RedactingHandler(log.Handler())}
}

// Trace logs ev. The record goes to the handler without a caller's
// program counter, which slog.Logger would take with runtime.Callers
// for every line: no handler of the gateway writes the source.
func (t *TraceLog) Trace(ctx context.Context, ev Trace) {
	if ctx == nil {
		ctx = context.Background() // as slog.Logger does
	}
	if !t.h.Enabled(ctx, slog.LevelInfo) {
		return
	}
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "trace", 0)
	r.AddAttrs(slog.String("event", string(ev.Kind)), slog.String("request_id", ev.RequestID))
	if ev.ProjectID != "" {
		r.AddAttrs(slog.String("project_id", ev.ProjectID))
	}
	if ev.Phase != "" {
		r.AddAttrs(slog.String("phase", ev.Phase), slog.Int("phase_index", ev.PhaseIndex))
	}
	r.AddAttrs(slog.Int("cycle_index", ev.CycleIndex))
	if ev.Tool != "" {
		r.AddAttrs(slog.String("tool", ev.Tool))
	}
	if ev.ToolCallID != "" {
		r.AddAttrs(slog.String("tool_call_id", ev.ToolCallID))
	}
	if ev.Verdict != "" {
		r.AddAttrs(slog.String("verdict", ev.Verdict))
	}
	if ev.Reason != "" {
		r.AddAttrs(slog.String("reason", ev.Reason))
	}
	_ = t.h.Handle(ctx, r)
}

// Redacted replaces a credential in logs; proxy.Secret prints the same.
const Redacted = redact.Marker

// RedactingHandler wraps h so that API keys ("sk-" and at least eight key
// characters, the shape of OpenAI and DeepSeek keys) and bearer tokens
// ("Bearer " and what follows up to white space) never reach it (see
// redact.Handler, which also redacts the configured secrets by value).
// A handler already redacting is returned as it is.
func RedactingHandler(h slog.Handler) slog.Handler { return redact.Handler(h, nil) }

// Redact returns s with every API key and bearer token replaced by
// Redacted, as RedactingHandler writes them: for text that leaves the
// gateway by another way than its logs, such as a span attribute.
func Redact(s string) string { return redact.Patterns(s) }
