package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/phasegate/phasegate/internal/redact"
)

// redacting is the exit of spans: it hands its exporter each span with
// the string values of its name, status, attributes and events' names and
// attributes redacted, whatever set them (a request id or model name the
// client sent, a tool name the model wrote, a reason quoting an upstream
// error).
type redacting struct {
	sdktrace.SpanExporter
	r *redact.Redactor
}

func (e redacting) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	out := make([]sdktrace.ReadOnlySpan, len(spans))
	for i, s := range spans {
		out[i] = redactedSpan{ReadOnlySpan: s, r: e.r}
	}
	return e.SpanExporter.ExportSpans(ctx, out)
}

// redactedSpan is a span read through the redactor; it changes nothing of
// the span itself.
type redactedSpan struct {
	sdktrace.ReadOnlySpan
	r *redact.Redactor
}

func (s redactedSpan) Name() string { return s.r.String(s.ReadOnlySpan.Name()) }

func (s redactedSpan) Status() sdktrace.Status {
	st := s.ReadOnlySpan.Status()
	st.Description = s.r.String(st.Description)
	return st
}

func (s redactedSpan) Attributes() []attribute.KeyValue {
	return redactAttrs(s.ReadOnlySpan.Attributes(), s.r)
}

func (s redactedSpan) Events() []sdktrace.Event {
	evs := s.ReadOnlySpan.Events()
	out := make([]sdktrace.Event, len(evs))
	for i, ev := range evs {
		ev.Name = s.r.String(ev.Name)
		ev.Attributes = redactAttrs(ev.Attributes, s.r)
		out[i] = ev
	}
	return out
}

func redactAttrs(attrs []attribute.KeyValue, r *redact.Redactor) []attribute.KeyValue {
	out := make([]attribute.KeyValue, len(attrs))
	for i, a := range attrs {
		switch a.Value.Type() {
		case attribute.STRING:
			a.Value = attribute.StringValue(r.String(a.Value.AsString()))
		case attribute.STRINGSLICE:
			vs := a.Value.AsStringSlice()
			for j := range vs {
				vs[j] = r.String(vs[j])
			}
			a.Value = attribute.StringSliceValue(vs)
		}
		out[i] = a
	}
	return out
}
