package protocol_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
)

// internalDetail is what the gateway's own wrapping of an error says (an
// upstream's address); it must never reach the client.
const internalDetail = "10.0.0.7:8443"

// wrapped wraps err once, as the transport and the strategies do.
func wrapped(err error) error {
	return fmt.Errorf("post https://%s/v1/chat/completions: %w", internalDetail, err)
}

// failure is what a test compares of a protocol.Failure: the client's
// status, type and code, and what the gateway decides.
type failure struct {
	Status    int
	Type      string
	Code      any
	Kind      string
	Outcome   metrics.Outcome
	RetrySafe bool
	Guard     bool
	Relayed   bool
}

func view(t *testing.T, f protocol.Failure) failure {
	t.Helper()
	if f.Error == nil {
		t.Fatal("Classify gave no client error")
	}
	return failure{Status: f.Error.Status, Type: f.Error.Type, Code: f.Error.Code, Kind: f.UpstreamKind,
		Outcome: f.Outcome, RetrySafe: f.RetrySafe, Guard: f.Guard, Relayed: f.Relay != nil}
}

// checkClassify classifies err bare and wrapped: Classify reads errors
// with errors.Is and errors.As, so wrapping never changes the answer, and
// the wrapping's text never reaches the client.
func checkClassify(t *testing.T, err error, want failure) protocol.Failure {
	t.Helper()
	var got protocol.Failure
	for _, e := range []error{err, wrapped(err)} {
		got = protocol.Classify(e)
		if diff := cmp.Diff(want, view(t, got)); diff != "" {
			t.Errorf("Classify(%v) (-want +got):\n%s", e, diff)
		}
		if msg := got.Error.Message; msg == "" || strings.Contains(msg, internalDetail) {
			t.Errorf("Classify(%v): message %q, want one that reveals nothing internal", e, msg)
		}
	}
	return got
}

// Every row of the failure table.
func TestClassifyTable(t *testing.T) {
	upstreamTimeout := failure{Status: http.StatusGatewayTimeout, Type: chat.TypeTimeout,
		Kind: metrics.UpstreamTimeout, Outcome: metrics.OutcomeUpstreamError}
	requestTimeout := failure{Status: http.StatusGatewayTimeout, Type: chat.TypeTimeout, Code: "request_timeout",
		Outcome: metrics.OutcomeUpstreamError}
	badGateway := failure{Status: http.StatusBadGateway, Type: chat.TypeUpstream, Outcome: metrics.OutcomeUpstreamError}
	clientClosed := failure{Status: protocol.StatusClientClosed, Type: chat.TypeInvalidRequest, Code: "client_closed",
		Outcome: metrics.OutcomeClientClosed}
	with := func(f failure, code, kind string, retry bool) failure {
		f.Code, f.Kind, f.RetrySafe = code, kind, retry
		return f
	}
	tests := []struct {
		name string
		err  error
		want failure
	}{
		{name: "no first byte in time", err: protocol.ErrFirstByteTimeout,
			want: with(upstreamTimeout, "upstream_timeout", metrics.UpstreamTimeout, true)},
		{name: "idle stream", err: protocol.ErrIdleTimeout,
			want: with(upstreamTimeout, "upstream_idle_timeout", metrics.UpstreamTimeout, false)},
		{name: "request timeout", err: protocol.ErrRequestTimeout, want: requestTimeout},
		{name: "unreachable", err: protocol.ErrUpstreamUnreachable,
			want: with(badGateway, "upstream_unreachable", metrics.UpstreamUnreachable, true)},
		{name: "truncated", err: protocol.ErrTruncated,
			want: with(badGateway, "upstream_truncated", metrics.UpstreamTruncated, true)},
		{name: "invalid response", err: protocol.ErrInvalidResponse,
			want: with(badGateway, "upstream_invalid_response", metrics.UpstreamInvalid, false)},
		{name: "deadline exceeded", err: context.DeadlineExceeded, want: requestTimeout},
		{name: "canceled", err: context.Canceled, want: clientClosed},
		{name: "client gone", err: protocol.ErrClientGone, want: clientClosed},

		// First match wins: the gateway's own classification before the
		// bare context errors it may also wrap.
		{name: "a dial that timed out is unreachable", err: fmt.Errorf("%w: dial tcp: %w", protocol.ErrUpstreamUnreachable, context.DeadlineExceeded),
			want: with(badGateway, "upstream_unreachable", metrics.UpstreamUnreachable, true)},
		{name: "a first-byte deadline is the upstream's timeout", err: errors.Join(context.DeadlineExceeded, protocol.ErrFirstByteTimeout),
			want: with(upstreamTimeout, "upstream_timeout", metrics.UpstreamTimeout, true)},
		// The table comes before the guard: a guard that failed because
		// the client left is not a guard failure to fall back from.
		{name: "a guard error of a client that left", err: &protocol.GuardError{Err: context.Canceled}, want: clientClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkClassify(t, tt.err, tt.want)
		})
	}
}

// An upstream status is relayed as it came; 429 and 5xx are the
// upstream's trouble and safe to retry, any other 4xx is the request's.
func TestClassifyUpstreamStatus(t *testing.T) {
	tests := []struct {
		status  int
		kind    string
		outcome metrics.Outcome
		retry   bool
	}{
		{status: http.StatusBadRequest, kind: metrics.UpstreamStatus4xx, outcome: metrics.OutcomeClientError},
		{status: http.StatusUnauthorized, kind: metrics.UpstreamStatus4xx, outcome: metrics.OutcomeClientError},
		{status: http.StatusTooManyRequests, kind: metrics.UpstreamStatus4xx, outcome: metrics.OutcomeUpstreamError, retry: true},
		{status: http.StatusInternalServerError, kind: metrics.UpstreamStatus5xx, outcome: metrics.OutcomeUpstreamError, retry: true},
		{status: http.StatusServiceUnavailable, kind: metrics.UpstreamStatus5xx, outcome: metrics.OutcomeUpstreamError, retry: true},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			ue := &protocol.UpstreamError{Status: tt.status, Header: http.Header{"Content-Type": {"application/json"}},
				Body: []byte(`{"error":{"message":"no"}}`)}
			got := checkClassify(t, ue, failure{Status: tt.status, Type: chat.TypeUpstream, Code: "upstream_status",
				Kind: tt.kind, Outcome: tt.outcome, RetrySafe: tt.retry, Relayed: true})
			if got.Relay != ue {
				t.Errorf("Relay = %p, want the upstream error itself (%p)", got.Relay, ue)
			}
		})
	}
}

// The gateway's own error keeps its status and is what the client gets;
// one of type upstream_error is an upstream answer the gateway refused.
func TestClassifyGatewayError(t *testing.T) {
	tests := []struct {
		name string
		err  *chat.Error
		want failure
	}{
		{name: "invalid request", err: chat.InvalidRequest("model", "no model"),
			want: failure{Status: http.StatusBadRequest, Type: chat.TypeInvalidRequest, Outcome: metrics.OutcomeClientError}},
		{name: "server error", err: &chat.Error{Status: http.StatusInternalServerError, Type: chat.TypeServer, Message: "no"},
			want: failure{Status: http.StatusInternalServerError, Type: chat.TypeServer, Outcome: metrics.OutcomeGatewayError}},
		{name: "an upstream answer refused", err: &chat.Error{Status: http.StatusBadGateway, Type: chat.TypeUpstream,
			Code: "upstream_response_too_large", Message: "the upstream answer is too large"},
			want: failure{Status: http.StatusBadGateway, Type: chat.TypeUpstream, Code: "upstream_response_too_large",
				Kind: metrics.UpstreamInvalid, Outcome: metrics.OutcomeUpstreamError}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkClassify(t, tt.err, tt.want); got.Error != tt.err {
				t.Errorf("Error = %+v, want the gateway's own error %+v", got.Error, tt.err)
			}
		})
	}
}

// A request body over the limit is the client's, and the message states
// the limit.
func TestClassifyBodyTooLarge(t *testing.T) {
	const limit = 16 << 20
	got := checkClassify(t, &http.MaxBytesError{Limit: limit}, failure{Status: http.StatusRequestEntityTooLarge,
		Type: chat.TypeInvalidRequest, Code: "request_too_large", Outcome: metrics.OutcomeClientError})
	if want := protocol.FormatBytes(limit); !strings.Contains(got.Error.Message, want) {
		t.Errorf("message %q does not state the limit %q", got.Error.Message, want)
	}
}

// A failure of the guard itself is a 500 the standard protocol may serve
// instead; it says nothing of what failed.
func TestClassifyGuardError(t *testing.T) {
	err := &protocol.GuardError{Err: errors.New("panic: index out of range [3] with length 3")}
	got := checkClassify(t, err, failure{Status: http.StatusInternalServerError, Type: chat.TypeServer,
		Outcome: metrics.OutcomeGatewayError, Guard: true})
	if strings.Contains(got.Error.Message, "panic") {
		t.Errorf("message %q reveals the guard's failure", got.Error.Message)
	}
}

// An upstream answer that is not a chat completion is a 502 that says what
// was wrong (the Message is the client's contract), counted as
// invalid_response, and not retried: the same request would get the same
// answer.
func TestClassifyInvalidResponse(t *testing.T) {
	var syntaxErr *json.SyntaxError
	decodeErr := json.Unmarshal([]byte("{oops"), new(any))
	if !errors.As(decodeErr, &syntaxErr) {
		t.Fatalf("json.Unmarshal: %v, want a *json.SyntaxError", decodeErr)
	}
	want := failure{Status: http.StatusBadGateway, Type: chat.TypeUpstream, Code: "upstream_invalid_response",
		Kind: metrics.UpstreamInvalid, Outcome: metrics.OutcomeUpstreamError}
	for _, ie := range []*protocol.InvalidResponseError{
		{Message: "upstream event 3 is not JSON", Err: decodeErr},
		{Message: "the upstream answer has no choices"},
	} {
		t.Run(ie.Message, func(t *testing.T) {
			if !errors.Is(ie, protocol.ErrInvalidResponse) {
				t.Errorf("errors.Is(%v, ErrInvalidResponse) = false", ie)
			}
			if ie.Err != nil && !errors.Is(ie, ie.Err) {
				t.Errorf("errors.Is(%v, its decoding error) = false", ie)
			}
			got := checkClassify(t, ie, want)
			if !strings.Contains(got.Error.Message, ie.Message) {
				t.Errorf("message %q does not say %q", got.Error.Message, ie.Message)
			}
		})
	}
}

// Anything else is a 500 that reveals nothing internal.
func TestClassifyUnknown(t *testing.T) {
	err := errors.New("open /var/lib/phasegate/ledger: permission denied")
	got := checkClassify(t, err, failure{Status: http.StatusInternalServerError, Type: chat.TypeServer,
		Outcome: metrics.OutcomeGatewayError})
	if strings.Contains(got.Error.Message, "/var/lib") || strings.Contains(got.Error.Message, "permission") {
		t.Errorf("message %q reveals the error", got.Error.Message)
	}
}
