package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/metrics"
)

// logLines decodes the JSON lines in buf, dropping the time.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for line := range bytes.Lines(buf.Bytes()) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		delete(m, slog.TimeKey)
		lines = append(lines, m)
	}
	return lines
}

func TestTraceLog(t *testing.T) {
	tests := []struct {
		name string
		ev   metrics.Trace
		want map[string]any
	}{
		{
			name: "every field",
			ev: metrics.Trace{Kind: metrics.TraceDuplicateToolCall, RequestID: "req-1", ProjectID: "proj-a",
				Phase: "action_phase", PhaseIndex: 1, CycleIndex: 2, Tool: "read_file", ToolCallID: "call_9",
				Verdict: "duplicate", Reason: "already executed in this turn"},
			want: map[string]any{"level": "INFO", "msg": "trace", "event": "duplicate_tool_call", "request_id": "req-1",
				"project_id": "proj-a", "phase": "action_phase", "phase_index": 1.0, "cycle_index": 2.0,
				"tool": "read_file", "tool_call_id": "call_9", "verdict": "duplicate", "reason": "already executed in this turn"},
		},
		{
			// Empty optional fields are left out; request_id and
			// cycle_index are always there.
			name: "fallback, no phase",
			ev:   metrics.Trace{Kind: metrics.TraceFallback, RequestID: "req-2", Reason: "guard: boom"},
			want: map[string]any{"level": "INFO", "msg": "trace", "event": "fallback", "request_id": "req-2",
				"cycle_index": 0.0, "reason": "guard: boom"},
		},
		{
			name: "budget exhausted",
			ev: metrics.Trace{Kind: metrics.TraceBudgetExhausted, RequestID: "req-3", Phase: "action_phase",
				PhaseIndex: 1, CycleIndex: 3, Reason: "MAX_PHASE_CYCLES"},
			want: map[string]any{"level": "INFO", "msg": "trace", "event": "budget_exhausted", "request_id": "req-3",
				"phase": "action_phase", "phase_index": 1.0, "cycle_index": 3.0, "reason": "MAX_PHASE_CYCLES"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			tl := metrics.NewTraceLog(slog.New(slog.NewJSONHandler(&buf, nil)))
			tl.Trace(context.Background(), tt.ev)
			lines := logLines(t, &buf)
			if len(lines) != 1 {
				t.Fatalf("got %d log lines, want 1: %s", len(lines), buf.String())
			}
			if diff := cmp.Diff(tt.want, lines[0]); diff != "" {
				t.Errorf("log line (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTraceLogDisabled(t *testing.T) {
	var buf bytes.Buffer
	tl := metrics.NewTraceLog(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	tl.Trace(context.Background(), metrics.Trace{Kind: metrics.TraceToolCall, RequestID: "r"})
	if buf.Len() != 0 {
		t.Errorf("logged below the handler's level: %s", buf.String())
	}
}

// The Trace struct has no field for credentials, but Tool and ToolCallID
// come from the model's output and Reason from upstream errors, so they
// pass through the redaction whatever logger the gateway hands over.
func TestTraceLogRedacts(t *testing.T) {
	const key = "sk-proj-Abc123_def-456ghi"
	var buf bytes.Buffer
	tl := metrics.NewTraceLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	tl.Trace(context.Background(), metrics.Trace{Kind: metrics.TraceFallback, RequestID: "req-1",
		Tool: "fetch " + key, ToolCallID: "call " + key,
		Reason: `upstream 401: {"error":"invalid Authorization: Bearer ` + key + `"}`})
	out := buf.String()
	if strings.Contains(out, "Abc123") {
		t.Fatalf("key in the log: %s", out)
	}
	lines := logLines(t, &buf)
	if len(lines) != 1 {
		t.Fatalf("got %d log lines, want 1", len(lines))
	}
	for field, want := range map[string]string{
		"tool":         "fetch [redacted]",
		"tool_call_id": "call [redacted]",
		"reason":       `upstream 401: {"error":"invalid Authorization: Bearer [redacted]"}`,
	} {
		if got := lines[0][field]; got != want {
			t.Errorf("%s = %q, want %q", field, got, want)
		}
	}
}

type tokenError struct{ token string }

func (e tokenError) Error() string { return "upstream said no to Bearer " + e.token }

type keyValuer string

func (k keyValuer) LogValue() slog.Value { return slog.StringValue("key=" + string(k)) }

func TestRedactingHandler(t *testing.T) {
	const key = "sk-Zx9Yw8Vu7Ts6"
	tests := []struct {
		name string
		log  func(*slog.Logger)
		want map[string]any
	}{
		{
			name: "message",
			log:  func(l *slog.Logger) { l.Info("sending Authorization: Bearer abc.def-ghi to upstream") },
			want: map[string]any{"level": "INFO", "msg": "sending Authorization: Bearer [redacted] to upstream"},
		},
		{
			name: "string attributes",
			log: func(l *slog.Logger) {
				l.Warn("x", "key", key, "header", "bearer eyJhbGciOi.x.y", "mixed", "a "+key+" b BEARER t0k3n c")
			},
			want: map[string]any{"level": "WARN", "msg": "x", "key": "[redacted]", "header": "bearer [redacted]",
				"mixed": "a [redacted] b BEARER [redacted] c"},
		},
		{
			name: "errors and LogValuers",
			log: func(l *slog.Logger) {
				l.Error("failed", "error", fmt.Errorf("send: %w", tokenError{"s3cr3t-token"}), "cfg", keyValuer(key))
			},
			want: map[string]any{"level": "ERROR", "msg": "failed", "error": "send: upstream said no to Bearer [redacted]",
				"cfg": "key=[redacted]"},
		},
		{
			name: "groups and With",
			log: func(l *slog.Logger) {
				l.With("auth", "Bearer abcdefgh").WithGroup("req").Info("m",
					slog.Group("hdr", "authorization", "Bearer zzz", "n", 3), "api_key", key)
			},
			want: map[string]any{"level": "INFO", "msg": "m", "auth": "Bearer [redacted]",
				"req": map[string]any{"hdr": map[string]any{"authorization": "Bearer [redacted]", "n": 3.0}, "api_key": "[redacted]"}},
		},
		{
			// Only the shapes of credentials: short sk- strings, words
			// ending in "sk-" and other values are left alone.
			name: "not credentials",
			log: func(l *slog.Logger) {
				l.Info("task-runner-01 ran", "flag", "sk-short", "id", "risk-assessment-report", "n", 42,
					"ok", true, "err", errors.New("plain failure"), "tool", "read_file")
			},
			want: map[string]any{"level": "INFO", "msg": "task-runner-01 ran", "flag": "sk-short",
				"id": "risk-assessment-report", "n": 42.0, "ok": true, "err": "plain failure", "tool": "read_file"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			tt.log(slog.New(metrics.RedactingHandler(slog.NewJSONHandler(&buf, nil))))
			lines := logLines(t, &buf)
			if len(lines) != 1 {
				t.Fatalf("got %d log lines, want 1: %s", len(lines), buf.String())
			}
			if diff := cmp.Diff(tt.want, lines[0]); diff != "" {
				t.Errorf("log line (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRedactingHandlerLevel(t *testing.T) {
	var buf bytes.Buffer
	h := metrics.RedactingHandler(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if h.Enabled(context.Background(), slog.LevelInfo) {
		t.Error("Enabled(Info) = true under a Warn handler")
	}
	if !h.Enabled(context.Background(), slog.LevelError) {
		t.Error("Enabled(Error) = false under a Warn handler")
	}
	if metrics.RedactingHandler(h) != h {
		t.Error("RedactingHandler wrapped a RedactingHandler again")
	}
}

type recorder struct {
	name string
	got  *[]string
}

func (r recorder) Trace(_ context.Context, ev metrics.Trace) {
	*r.got = append(*r.got, r.name+":"+string(ev.Kind)+":"+ev.RequestID)
}

// Tracers passes each event to every tracer, in order; none is no tracer.
func TestTracers(t *testing.T) {
	var got []string
	ts := metrics.Tracers{recorder{"a", &got}, recorder{"b", &got}}
	ts.Trace(context.Background(), metrics.Trace{Kind: metrics.TraceRefit, RequestID: "r1"})
	ts.Trace(context.Background(), metrics.Trace{Kind: metrics.TraceFallback, RequestID: "r2"})
	want := []string{"a:refit:r1", "b:refit:r1", "a:fallback:r2", "b:fallback:r2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	metrics.Tracers(nil).Trace(context.Background(), metrics.Trace{Kind: metrics.TraceToolCall})
}
