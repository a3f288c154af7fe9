package proxy

import (
	"context"
	"log/slog"
	"slices"
)

// requestLogger returns l with attrs (alternating keys and values, or
// slog.Attrs, as slog.Logger.With takes them) on every line it logs, the
// lines written as l.With(args...) would write them. Unlike With, it does
// not format the attributes ahead for lines that may never come: a
// request logs its own fields (its id, door, model, ...) on one or two
// lines, and formatting them once at With cost as much as a line does.
// Later With calls on the result are deferred the same way. A LogValuer is
// resolved once, at With, as With does; any other value is formatted with
// each line, so one that changes after With (a pointer, a map) would be
// written as it is then: a request's fields are strings and booleans.
func requestLogger(l *slog.Logger, args ...any) *slog.Logger {
	return slog.New(deferredAttrs{next: l.Handler()}).With(args...)
}

// deferredAttrs adds attrs to each record before its own, which is where
// next.WithAttrs would have put them.
type deferredAttrs struct {
	next  slog.Handler
	attrs []slog.Attr
}

func (h deferredAttrs) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h deferredAttrs) Handle(ctx context.Context, rec slog.Record) error {
	if len(h.attrs) == 0 {
		return h.next.Handle(ctx, rec)
	}
	out := slog.NewRecord(rec.Time, rec.Level, rec.Message, rec.PC)
	out.AddAttrs(h.attrs...)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(a)
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs keeps attrs after h's: each handler has a slice of its own.
func (h deferredAttrs) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	out := append(slices.Clip(h.attrs), attrs...)
	for i := len(h.attrs); i < len(out); i++ {
		out[i] = resolved(out[i])
	}
	return deferredAttrs{next: h.next, attrs: out}
}

// resolved is a with its LogValuers resolved, in groups too, as a handler
// formatting it at With would resolve them.
func resolved(a slog.Attr) slog.Attr {
	a.Value = a.Value.Resolve()
	if a.Value.Kind() != slog.KindGroup {
		return a
	}
	members := a.Value.Group()
	out := make([]slog.Attr, len(members))
	for i, m := range members {
		out[i] = resolved(m)
	}
	a.Value = slog.GroupValue(out...)
	return a
}

// WithGroup gives next the attributes so far, outside the group, as With
// and then WithGroup would have.
func (h deferredAttrs) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	next := h.next
	if len(h.attrs) > 0 {
		next = next.WithAttrs(h.attrs)
	}
	return deferredAttrs{next: next.WithGroup(name)}
}
