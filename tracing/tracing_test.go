package tracing_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/tracing"
)

func env(kv ...string) func(string) string {
	return func(name string) string {
		for i := 0; i < len(kv); i += 2 {
			if kv[i] == name {
				return kv[i+1]
			}
		}
		return ""
	}
}

func TestEnabled(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want bool
	}{
		{"nothing set", nil, false},
		{"an endpoint", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}, true},
		{"a traces endpoint", []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:4318/v1/traces"}, true},
		{"an exporter", []string{"OTEL_TRACES_EXPORTER", "console"}, true},
		{"exporter none", []string{"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}, false},
		{"SDK disabled", []string{"OTEL_SDK_DISABLED", "true", "OTEL_TRACES_EXPORTER", "otlp"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tracing.Enabled(env(tt.env...)); got != tt.want {
				t.Errorf("Enabled(%v) = %v, want %v", tt.env, got, tt.want)
			}
		})
	}
}

// TestConsoleExporter: OTEL_TRACES_EXPORTER=console writes spans, with the
// guard's events, to the console writer once the provider shuts down.
func TestConsoleExporter(t *testing.T) {
	var out bytes.Buffer
	tp, err := tracing.FromEnv(context.Background(), env("OTEL_TRACES_EXPORTER", "console"), &out, nil)
	if err != nil || tp == nil {
		t.Fatalf("FromEnv: %v, %v", tp, err)
	}
	ctx, span := tp.Tracer("test").Start(context.Background(), "chat m")
	tracing.SpanEvents{}.Trace(ctx, metrics.Trace{Kind: metrics.TraceDuplicateToolCall, Verdict: "duplicate", CycleIndex: 2,
		Reason: "Bearer sk-abcdefghijklmnop"})
	span.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"Name":"chat m"`, `"duplicate_tool_call"`, `"phasegate.cycle_index"`, `"service.name"`, `"phasegate"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("console output lacks %s:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "sk-abcdefghijklmnop") {
		t.Errorf("console output carries a key:\n%s", out.String())
	}
}

func TestUnsupported(t *testing.T) {
	for _, e := range [][]string{
		{"OTEL_TRACES_EXPORTER", "zipkin"},
		{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"},
	} {
		if tp, err := tracing.FromEnv(context.Background(), env(e...), nil, nil); err == nil {
			_ = tp.Shutdown(context.Background())
			t.Errorf("FromEnv(%v): no error", e)
		}
	}
}
