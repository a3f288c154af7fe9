package redact

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
)

// Handler wraps h so that no secret of r, and nothing the patterns match,
// reaches it: the message, string attribute values, error values, byte
// slices and LogValuer results, inside groups and in attributes added
// with With, are redacted; any other value (a struct, a map, a header) is
// looked at as its JSON (or, when it has none, its fmt text), and one
// that holds a secret is written as that text redacted. Numbers, times
// and durations pass unchanged. A handler Handler already wrapped is returned as it is,
// unless it applies the patterns only and r has secrets: its redaction is
// then r's. It is as safe for concurrent use as h.
func Handler(h slog.Handler, r *Redactor) slog.Handler {
	if rh, ok := h.(handler); ok {
		if rh.r.Len() > 0 || r.Len() == 0 {
			return rh
		}
		return handler{next: rh.next, r: r}
	}
	return handler{next: h, r: r}
}

type handler struct {
	next slog.Handler
	r    *Redactor
}

func (h handler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

// Handle passes rec on as it is when nothing in it is redacted, the usual
// case; else a copy with the redacted message and attributes.
func (h handler) Handle(ctx context.Context, rec slog.Record) error {
	msg := h.r.String(rec.Message)
	changed := msg != rec.Message
	var small [8]slog.Attr
	attrs := small[:0]
	rec.Attrs(func(a slog.Attr) bool {
		ra, ch := h.attr(a)
		changed = changed || ch
		attrs = append(attrs, ra)
		return true
	})
	if !changed {
		return h.next.Handle(ctx, rec)
	}
	out := slog.NewRecord(rec.Time, rec.Level, msg, rec.PC)
	out.AddAttrs(attrs...)
	return h.next.Handle(ctx, out)
}

func (h handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i], _ = h.attr(a)
	}
	return handler{next: h.next.WithAttrs(red), r: h.r}
}

func (h handler) WithGroup(name string) slog.Handler {
	return handler{next: h.next.WithGroup(name), r: h.r}
}

// attr returns a redacted, and whether that is another attribute than a
// (a LogValuer's value counts as another: it is resolved once, here).
func (h handler) attr(a slog.Attr) (slog.Attr, bool) {
	v := a.Value.Resolve()
	changed := a.Value.Kind() == slog.KindLogValuer
	switch v.Kind() {
	case slog.KindString:
		if s := v.String(); h.r.String(s) != s {
			v, changed = slog.StringValue(h.r.String(s)), true
		}
	case slog.KindGroup:
		g := v.Group()
		red := make([]slog.Attr, len(g))
		for i, ga := range g {
			var ch bool
			red[i], ch = h.attr(ga)
			changed = changed || ch
		}
		v = slog.GroupValue(red...)
	case slog.KindAny:
		// Errors are logged by their text, which may quote a request
		// header or an upstream answer.
		switch x := v.Any().(type) {
		case error:
			if x != nil {
				if s := x.Error(); h.r.String(s) != s {
					v, changed = slog.StringValue(h.r.String(s)), true
				}
			}
		case []byte:
			if s := string(x); h.r.String(s) != s {
				v, changed = slog.StringValue(h.r.String(s)), true
			}
		default:
			var ch bool
			v, ch = h.any(v)
			changed = changed || ch
		}
	}
	a.Value = v
	return a, changed
}

// any redacts a value of kind Any that is neither an error nor bytes: as
// its JSON when it has one (written back as JSON), else as its fmt text.
// A value that holds nothing to redact passes as it is.
func (h handler) any(v slog.Value) (slog.Value, bool) {
	if b, err := json.Marshal(v.Any()); err == nil {
		if s := string(b); h.r.String(s) != s {
			return slog.AnyValue(json.RawMessage(h.r.String(s))), true
		}
		return v, false
	}
	if s := fmt.Sprint(v.Any()); h.r.String(s) != s {
		return slog.StringValue(h.r.String(s)), true
	}
	return v, false
}
