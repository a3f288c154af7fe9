package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/protocol"
)

func TestErrorFor(t *testing.T) {
	own := &chat.Error{Status: 418, Type: chat.TypeInvalidRequest, Code: "teapot", Message: "short and stout"}
	tests := []struct {
		name   string
		err    error
		status int
		typ    string
		code   any
	}{
		{name: "the gateway's own error keeps its status", err: fmt.Errorf("wrapped: %w", own), status: 418, typ: chat.TypeInvalidRequest, code: "teapot"},
		{name: "invalid request", err: chat.InvalidRequest("model", "no model"), status: 400, typ: chat.TypeInvalidRequest},
		{name: "body too large", err: fmt.Errorf("read: %w", &http.MaxBytesError{Limit: 16 << 20}), status: 413, typ: chat.TypeInvalidRequest, code: "request_too_large"},
		{name: "first byte", err: fmt.Errorf("upstream: %w", ErrFirstByteTimeout), status: 504, typ: chat.TypeTimeout, code: "upstream_timeout"},
		{name: "idle", err: fmt.Errorf("upstream: %w", ErrIdleTimeout), status: 504, typ: chat.TypeTimeout, code: "upstream_idle_timeout"},
		{name: "request timeout", err: fmt.Errorf("upstream: %w", ErrRequestTimeout), status: 504, typ: chat.TypeTimeout, code: "request_timeout"},
		{name: "deadline", err: context.DeadlineExceeded, status: 504, typ: chat.TypeTimeout, code: "request_timeout"},
		{name: "client gone", err: fmt.Errorf("upstream: %w", context.Canceled), status: statusClientClosed, typ: chat.TypeInvalidRequest, code: "client_closed"},
		{name: "truncated", err: fmt.Errorf("read upstream event 3: %w", protocol.ErrTruncated), status: 502, typ: chat.TypeUpstream, code: "upstream_truncated"},
		{name: "unreachable", err: fmt.Errorf("%w: dial tcp: refused", ErrUpstreamUnreachable), status: 502, typ: chat.TypeUpstream, code: "upstream_unreachable"},
		{name: "unreachable on a dial timeout", err: fmt.Errorf("%w: %w", ErrUpstreamUnreachable, &net.OpError{Op: "dial", Net: "tcp", Err: dialTimeout{}}),
			status: 502, typ: chat.TypeUpstream, code: "upstream_unreachable"},
		{name: "anything else reveals nothing", err: errors.New("secret internal detail"), status: 500, typ: chat.TypeServer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := protocol.Classify(tt.err).Error
			if e.Status != tt.status || e.Type != tt.typ || e.Code != tt.code {
				t.Errorf("Classify(err).Error = {%d %q %v}, want {%d %q %v}", e.Status, e.Type, e.Code, tt.status, tt.typ, tt.code)
			}
			if e.Message == "" || e.Message == tt.err.Error() && tt.status == 500 {
				t.Errorf("message = %q, want a message that reveals nothing internal", e.Message)
			}
		})
	}
}

func TestFormatBytes(t *testing.T) {
	tests := []struct {
		name string
		n    int64
		want string
	}{
		{name: "whole MiB", n: 16 << 20, want: "16 MiB"},
		{name: "bytes", n: 1000, want: "1000 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := formatBytes(tt.n); got != tt.want {
				t.Errorf("formatBytes(%d) = %q, want %q", tt.n, got, tt.want)
			}
		})
	}
}

func TestWriteError(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantBody   string
		wantHeader http.Header
	}{
		{
			name:       "upstream error relayed as it came",
			err:        fmt.Errorf("send: %w", &protocol.UpstreamError{Status: 429, Header: http.Header{"Content-Type": {"application/json"}, "Retry-After": {"3"}}, Body: []byte(`{"error":{"message":"slow"}}`)}),
			wantStatus: 429,
			wantBody:   `{"error":{"message":"slow"}}`,
			wantHeader: http.Header{"Content-Type": {"application/json"}, "Retry-After": {"3"}},
		},
		{
			name:       "gateway error in OpenAI's shape",
			err:        chat.InvalidRequest("messages", "no messages"),
			wantStatus: 400,
			wantBody:   `{"error":{"message":"no messages","type":"invalid_request_error","param":"messages","code":null}}`,
			wantHeader: http.Header{"Content-Type": {"application/json"}},
		},
		{
			name:       "a client gone gets nothing",
			err:        context.Canceled,
			wantStatus: 200, // the recorder's default: nothing was written
			wantHeader: http.Header{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			writeError(rec, protocol.Classify(tt.err))
			if rec.Code != tt.wantStatus {
				t.Errorf("status = %d, want %d", rec.Code, tt.wantStatus)
			}
			if got := rec.Body.String(); got != tt.wantBody {
				t.Errorf("body = %s, want %s", got, tt.wantBody)
			}
			if diff := cmp.Diff(tt.wantHeader, rec.Header()); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
		})
	}
}

// dialTimeout is the error of a dial that ran out of time: like net's own,
// it reads as context.DeadlineExceeded.
type dialTimeout struct{}

func (dialTimeout) Error() string        { return "i/o timeout" }
func (dialTimeout) Timeout() bool        { return true }
func (dialTimeout) Temporary() bool      { return true }
func (dialTimeout) Is(target error) bool { return target == context.DeadlineExceeded }

// timeoutError is a net.Error that timed out, as a transport reports a
// response-header timeout.
type timeoutError struct{}

func (timeoutError) Error() string   { return "net/http: timeout awaiting response headers" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func TestUpstreamCallError(t *testing.T) {
	cancelled := func(cause error) context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		return ctx
	}
	dialTimeout := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ETIMEDOUT)}
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want error
	}{
		{name: "refused", ctx: context.Background(), err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, want: ErrUpstreamUnreachable},
		{name: "reset", ctx: context.Background(), err: syscall.ECONNRESET, want: ErrUpstreamUnreachable},
		{name: "response headers timed out", ctx: context.Background(), err: fmt.Errorf("Post: %w", timeoutError{}), want: ErrFirstByteTimeout},
		{name: "connect timed out is unreachable", ctx: context.Background(), err: fmt.Errorf("Post: %w", dialTimeout), want: ErrUpstreamUnreachable},
		{name: "watchdog: first byte", ctx: cancelled(ErrFirstByteTimeout), err: context.Canceled, want: ErrFirstByteTimeout},
		{name: "watchdog: idle", ctx: cancelled(ErrIdleTimeout), err: context.Canceled, want: ErrIdleTimeout},
		{name: "request deadline", ctx: cancelled(ErrRequestTimeout), err: context.Canceled, want: ErrRequestTimeout},
		{name: "client gone", ctx: cancelled(context.Canceled), err: errors.New("read: use of closed connection"), want: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := upstreamCallError(tt.ctx, tt.err); !errors.Is(got, tt.want) {
				t.Errorf("upstreamCallError = %v, want it to wrap %v", got, tt.want)
			}
		})
	}
}
