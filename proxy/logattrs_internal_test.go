package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/phasegate/phasegate/internal/redact"
)

// TestRequestLoggerWritesAsWith: a request's logger writes each line byte
// for byte as slog.Logger.With would have, through the handlers the
// gateway logs with (the redactor, the throttle, the JSON handler):
// attributes in the same order, later With calls after earlier ones,
// groups after the attributes given before them, and a secret among the
// deferred attributes redacted.
func TestRequestLoggerWritesAsWith(t *testing.T) {
	const secret = "sk-test-requestlogger-0123456789"
	stamp := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	logger := func(buf *bytes.Buffer) *slog.Logger {
		json := slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug,
			ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey && len(groups) == 0 {
					a.Value = slog.TimeValue(stamp)
				}
				return a
			}})
		return slog.New(throttledLog(redact.Handler(json, redact.New(secret)), time.Second, time.Now))
	}
	lines := func(l *slog.Logger) {
		l.Info("request served", "status", 200, "duration_ms", 1.5)
		l = l.With("model", "gpt-4o", "provider", "openai", "stream", false, "key", "Bearer "+secret)
		l.Warn("stream failed after start", "error", errors.New("upstream said "+secret), "code", "upstream_error")
		l.With().Info("no attributes added")
		g := l.WithGroup("detail").With("cycle", 2)
		g.Info("grouped", "phase", "tool_phase")
		l.WithGroup("").Info("empty group name", slog.Group("empty"), slog.Group("g", "a", 1))
		l.Debug("eight and more", "a", 1, "b", 2, "c", 3, "d", 4, "e", 5, "f", 6, "g", 7, "h", 8)
	}
	var want, got bytes.Buffer
	lines(logger(&want).With("request_id", "pg-1", "door", "chat"))
	lines(requestLogger(logger(&got), "request_id", "pg-1", "door", "chat"))
	if got.String() != want.String() {
		t.Fatalf("lines differ from With's:\n got: %s\nwant: %s", got.String(), want.String())
	}
	if n := strings.Count(got.String(), "\n"); n != 6 {
		t.Fatalf("%d lines, want 6:\n%s", n, got.String())
	}
	if strings.Contains(got.String(), secret) {
		t.Fatalf("the secret reached the log:\n%s", got.String())
	}
	if !strings.Contains(got.String(), `"request_id":"pg-1","door":"chat","model":"gpt-4o"`) {
		t.Fatalf("the request's attributes are not in order before the line's:\n%s", got.String())
	}
}

// countingValuer counts the times it is asked for its value.
type countingValuer struct{ n int }

func (c *countingValuer) LogValue() slog.Value { c.n++; return slog.IntValue(c.n) }

// TestRequestLoggerResolvesOnce: a LogValuer among a request's fields,
// alone or in a group, is asked once, when the fields are given, as With
// asks it: every line carries that value.
func TestRequestLoggerResolvesOnce(t *testing.T) {
	for _, l := range []struct {
		name string
		mk   func(*slog.Logger, ...any) *slog.Logger
	}{{"With", (*slog.Logger).With}, {"requestLogger", requestLogger}} {
		var buf bytes.Buffer
		v, g := &countingValuer{}, &countingValuer{}
		log := l.mk(slog.New(slog.NewJSONHandler(&buf, nil)), "v", v, slog.Group("g", "w", g))
		log.Info("one")
		log.Info("two")
		if got := strings.Count(buf.String(), `"v":1,"g":{"w":1}`); got != 2 || v.n != 1 || g.n != 1 {
			t.Errorf("%s: asked %d and %d times, lines:\n%s", l.name, v.n, g.n, buf.String())
		}
	}
}

// TestRequestLoggerFormatsNothingAhead: deriving a request's logger, and
// adding its fields later, formats nothing; With did on every request.
func TestRequestLoggerFormatsNothingAhead(t *testing.T) {
	base := slog.New(throttledLog(redact.Handler(slog.NewJSONHandler(new(bytes.Buffer), nil), redact.New("sk-x-0123456789")), time.Second, time.Now))
	with := testing.AllocsPerRun(100, func() {
		_ = base.With("request_id", "pg-1", "door", "chat").With("model", "gpt-4o", "provider", "openai", "protocol", "two-stage", "stream", false)
	})
	deferred := testing.AllocsPerRun(100, func() {
		_ = requestLogger(base, "request_id", "pg-1", "door", "chat").With("model", "gpt-4o", "provider", "openai", "protocol", "two-stage", "stream", false)
	})
	if deferred >= with {
		t.Fatalf("a request's logger costs %.0f allocations, With %.0f", deferred, with)
	}
}

// BenchmarkRequestLogger: one request's logging as a guarded request
// does it, its fields given in two steps and its request line written
// through the gateway's handlers to a JSON handler: by slog.Logger.With
// and by requestLogger.
func BenchmarkRequestLogger(b *testing.B) {
	base := slog.New(throttledLog(redact.Handler(slog.NewJSONHandler(io.Discard, nil), redact.New("sk-x-0123456789")), time.Second, time.Now))
	served := func(l *slog.Logger) {
		l = l.With("model", "gpt-4o", "provider", "openai", "protocol", "two-stage", "stream", false)
		logServed(context.Background(), l, 200, 1500*time.Microsecond)
	}
	b.Run("with", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			served(base.With("request_id", "pg-0123456789abcdef01234567", "door", "chat"))
		}
	})
	b.Run("deferred", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			served(requestLogger(base, "request_id", "pg-0123456789abcdef01234567", "door", "chat"))
		}
	})
}
