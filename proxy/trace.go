package proxy

import (
	"context"
	"iter"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/phasegate/phasegate/internal/jsonscan"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
)

// The OpenTelemetry GenAI semantic conventions' attributes
// (opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/).
const (
	attrOperation    = attribute.Key("gen_ai.operation.name")
	attrProvider     = attribute.Key("gen_ai.provider.name")
	attrRequestModel = attribute.Key("gen_ai.request.model")
	attrFinish       = attribute.Key("gen_ai.response.finish_reasons")
	attrInputTokens  = attribute.Key("gen_ai.usage.input_tokens")
	attrOutputTokens = attribute.Key("gen_ai.usage.output_tokens")
	attrRequestID    = attribute.Key("phasegate.request_id")
	attrProtocol     = attribute.Key("phasegate.protocol")
	attrDoor         = attribute.Key("phasegate.door")
	attrEstimated    = attribute.Key("phasegate.usage.estimated")
	attrErrorType    = attribute.Key("error.type")
	attrStatusCode   = attribute.Key("http.response.status_code")
)

// requestTrace is the span of one client request and of its current
// upstream call. Spans of upstream calls are children of the request's,
// so retries and re-asks are siblings. It is owned by one request; a nil
// *requestTrace traces nothing.
type requestTrace struct {
	tracer trace.Tracer
	span   trace.Span
	// call is the span of the latest upstream call, ended when the next
	// call starts or the request ends: usage estimated for a call the guard
	// closed early arrives after its close. callEnd is when it was closed
	// (zero: still open).
	call     trace.Span
	callEnd  time.Time
	callFin  []string
	in, out  int
	finishes []string
}

// startTrace starts the span of a client request, a child of the
// client's own trace when its headers carry one, and returns its context.
// The span names the door the request came by (phasegate.door); its
// operation is chat whichever door, as the upstream call's is.
func (c *chatRequest) startTrace(ctx context.Context) context.Context {
	h := c.h
	ctx = h.propagator.Extract(ctx, propagation.HeaderCarrier(c.r.Header))
	var span trace.Span
	ctx, span = h.otel.Start(ctx, "chat", trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attrOperation.String("chat"), attrDoor.String(c.door.name), attrProtocol.String(c.strategy.Name()), attrRequestID.String(c.id)))
	c.trace = &requestTrace{tracer: h.otel, span: span}
	return ctx
}

// prepared names the request's span after its model, once it is known.
func (t *requestTrace) prepared(provider, model, protocol string) {
	if t != nil {
		t.span.SetName("chat " + model)
		t.span.SetAttributes(attrProvider.String(provider), attrRequestModel.String(model), attrProtocol.String(protocol))
	}
}

// startCall starts the span of an upstream call of model to provider.
func (t *requestTrace) startCall(ctx context.Context, provider, model string) context.Context {
	t.endCall()
	ctx, t.call = t.tracer.Start(ctx, "chat "+model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attrOperation.String("chat"), attrProvider.String(provider), attrRequestModel.String(model)))
	return ctx
}

// callFailed marks the current call failed with err.
func (t *requestTrace) callFailed(err error) {
	f := protocol.Classify(err)
	t.call.SetStatus(codes.Error, errorType(f))
	t.call.SetAttributes(attrErrorType.String(errorType(f)))
	if f.Relay != nil {
		t.call.SetAttributes(attrStatusCode.Int(f.Relay.Status))
	}
}

// callClosed records that the current call's answer was released.
func (t *requestTrace) callClosed() {
	if t.call != nil && t.callEnd.IsZero() {
		t.callEnd = time.Now()
	}
}

// callData reads the finish reasons of one event or body of the current
// call.
func (t *requestTrace) callData(data []byte) { t.callFin = finishReasons(t.callFin, data) }

// endCall ends the current call's span, at its close when it was closed.
func (t *requestTrace) endCall() {
	if t.call == nil {
		return
	}
	if len(t.callFin) > 0 {
		t.call.SetAttributes(attrFinish.StringSlice(t.callFin))
	}
	var opts []trace.SpanEndOption
	if !t.callEnd.IsZero() {
		opts = append(opts, trace.WithTimestamp(t.callEnd))
	}
	t.call.End(opts...)
	t.call, t.callEnd, t.callFin = nil, time.Time{}, nil
}

// usage adds the usage of the current call.
func (t *requestTrace) usage(u protocol.Usage) {
	if t == nil {
		return
	}
	t.in += u.PromptTokens
	t.out += u.CompletionTokens
	if t.call != nil {
		t.call.SetAttributes(attrInputTokens.Int(u.PromptTokens), attrOutputTokens.Int(u.CompletionTokens), attrEstimated.Bool(u.Estimated))
	}
}

// written reads the finish reasons of what reached the client.
func (t *requestTrace) written(data []byte) {
	if t != nil {
		t.finishes = finishReasons(t.finishes, data)
	}
}

// end ends the request's span with its outcome.
func (t *requestTrace) end(o metrics.Outcome, err error) {
	if t == nil {
		return
	}
	t.endCall()
	t.span.SetAttributes(attrInputTokens.Int(t.in), attrOutputTokens.Int(t.out))
	if len(t.finishes) > 0 {
		t.span.SetAttributes(attrFinish.StringSlice(t.finishes))
	}
	if o != metrics.OutcomeOK && o != metrics.OutcomeClientError {
		code := string(o)
		if err != nil {
			code = errorType(protocol.Classify(err))
		}
		t.span.SetStatus(codes.Error, code)
		t.span.SetAttributes(attrErrorType.String(code))
	}
	t.span.End()
}

// errorType is the error.type of a failure: its code, else its type.
func errorType(f protocol.Failure) string {
	if c, ok := f.Error.Code.(string); ok && c != "" {
		return c
	}
	return f.Error.Type
}

// tracedEvents passes events on, reading the finish reasons of each and
// marking the call failed when reading fails.
func tracedEvents(events iter.Seq2[[]byte, error], t *requestTrace) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		for data, err := range events {
			if err != nil {
				t.callFailed(err)
			} else {
				t.callData(data)
			}
			if !yield(data, err) {
				return
			}
		}
	}
}

// finishReasons adds to seen the finish reasons data holds that it lacks:
// the string values of its finish_reason keys, spaced as the writer
// pleased.
func finishReasons(seen []string, data []byte) []string {
	for r := range jsonscan.StringValues(data, "finish_reason") {
		if r != nil && len(r) <= 64 && !slices.Contains(seen, string(r)) {
			seen = append(seen, string(r))
		}
	}
	return seen
}
