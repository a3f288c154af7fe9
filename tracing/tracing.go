// Package tracing sends the gateway's OpenTelemetry traces: it builds the
// tracer provider from the standard OTEL_* environment variables, and
// turns the guard's trace events into span events. The spans themselves
// (one per client request, one per upstream call) are made by package
// proxy, through the OpenTelemetry API only.
//
// Tracing is off unless OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_TRACES_EXPORTER is set (and
// OTEL_SDK_DISABLED is not true). The SDK and the exporters read the rest
// of the OTEL_* variables themselves: OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and its argument, the
// OTEL_BSP_* batching bounds, and the exporters' OTEL_EXPORTER_OTLP_*
// endpoint, headers, timeout, compression and certificates.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/phasegate/phasegate/internal/redact"
	"github.com/phasegate/phasegate/metrics"
)

// ServiceName is the service.name of the gateway's spans unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES says otherwise.
const ServiceName = "phasegate"

// Enabled reports whether the environment asks for traces.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp != "" {
		return exp != "none"
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// FromEnv returns the tracer provider the environment asks for, or nil
// when tracing is off. OTEL_TRACES_EXPORTER is a comma-separated list of
// otlp (the default), console (spans as JSON lines on console) and none;
// the OTLP protocol (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL) is http/protobuf (the default) or grpc.
// Every exporter is handed the spans with r's secrets and the patterns
// redacted (r nil: the patterns only). The caller owns the provider: its
// Shutdown flushes the spans still batched and stops the exporters'
// goroutines.
func FromEnv(ctx context.Context, getenv func(string) string, console io.Writer, r *redact.Redactor) (*sdktrace.TracerProvider, error) {
	if !Enabled(getenv) {
		return nil, nil
	}
	names := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	if names == "" {
		names = "otlp"
	}
	var opts []sdktrace.TracerProviderOption
	for _, name := range strings.Split(names, ",") {
		exp, err := exporter(ctx, strings.TrimSpace(name), getenv, console)
		if err != nil {
			return nil, err
		}
		if exp != nil {
			opts = append(opts, sdktrace.WithBatcher(redacting{SpanExporter: exp, r: r}))
		}
	}
	// Detectors merge in order, later ones winning: the environment's
	// service name overrides the default.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", ServiceName)), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	return sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...), nil
}

func exporter(ctx context.Context, name string, getenv func(string) string, console io.Writer) (sdktrace.SpanExporter, error) {
	switch name {
	case "none":
		return nil, nil
	case "console":
		return stdouttrace.New(stdouttrace.WithWriter(console))
	case "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER: exporter %q is not supported (otlp, console or none)", name)
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	case "grpc":
		return otlptracegrpc.New(ctx)
	}
	return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: %q is not supported (http/protobuf or grpc)", proto)
}

// Attribute keys of the guard's span events.
const (
	AttrVerdict    = attribute.Key("phasegate.verdict")
	AttrPhase      = attribute.Key("phasegate.phase")
	AttrPhaseIndex = attribute.Key("phasegate.phase_index")
	AttrCycleIndex = attribute.Key("phasegate.cycle_index")
	AttrReason     = attribute.Key("phasegate.reason")
	AttrToolName   = attribute.Key("gen_ai.tool.name")
	AttrToolCallID = attribute.Key("gen_ai.tool.call.id")
)

// SpanEvents adds each trace event of the guard to the span of its
// context (the client request's span), named by its kind, with its
// verdict, phase, cycle index, tool name and call id and reason: never
// argument bodies or prompt text, which trace events do not hold. Without
// a recording span it does nothing. It is safe for concurrent use.
type SpanEvents struct{}

// Trace adds ev to the span of ctx.
func (SpanEvents) Trace(ctx context.Context, ev metrics.Trace) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs, AttrCycleIndex.Int(ev.CycleIndex))
	if ev.Verdict != "" {
		attrs = append(attrs, AttrVerdict.String(ev.Verdict))
	}
	if ev.Phase != "" {
		attrs = append(attrs, AttrPhase.String(ev.Phase), AttrPhaseIndex.Int(ev.PhaseIndex))
	}
	if ev.Tool != "" {
		attrs = append(attrs, AttrToolName.String(ev.Tool))
	}
	if ev.ToolCallID != "" {
		attrs = append(attrs, AttrToolCallID.String(ev.ToolCallID))
	}
	if ev.Reason != "" {
		attrs = append(attrs, AttrReason.String(metrics.Redact(ev.Reason)))
	}
	span.AddEvent(string(ev.Kind), trace.WithAttributes(attrs...))
}
