package protocol

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
)

// Failures of an upstream call, typed by what the caller decides. The
// proxy's transport returns them wrapped; the strategies and the proxy
// read them through Classify.
var (
	// ErrFirstByteTimeout: the upstream sent no headers or no first event
	// in time.
	ErrFirstByteTimeout = errors.New("upstream sent nothing in time")
	// ErrIdleTimeout: an upstream stream went quiet between events.
	ErrIdleTimeout = errors.New("upstream stream went idle")
	// ErrRequestTimeout: the whole request took longer than allowed.
	ErrRequestTimeout = errors.New("request took longer than allowed")
	// ErrUpstreamUnreachable: the upstream could not be reached, or the
	// connection failed before an answer came.
	ErrUpstreamUnreachable = errors.New("upstream unreachable")
	// ErrTruncated: an upstream stream ended without [DONE] and without a
	// finish reason: the answer is incomplete, not finished.
	ErrTruncated = errors.New("upstream stream ended before it finished")
	// ErrShuttingDown: the gateway is shutting down and its grace for
	// in-flight requests ran out; it is the cause of their cancellation.
	ErrShuttingDown = errors.New("gateway shutting down")
	// ErrInvalidResponse: the upstream answered 200 with something that is
	// not a chat completion: a data line or a body that is not JSON, an
	// error object inside a stream, a body without choices.
	ErrInvalidResponse = errors.New("upstream answer is not a chat completion")
)

// ErrClientGone means the client went away: the consumer of a strategy
// stopped ranging, or a write to the client failed.
var ErrClientGone = errors.New("client gone")

var errClientGone = ErrClientGone

// UpstreamError is an upstream answer with a non-2xx status, relayed to the
// client as it came when nothing was written yet.
type UpstreamError struct {
	Status int
	Header http.Header
	Body   []byte
}

func (e *UpstreamError) Error() string {
	return "upstream answered " + strconv.Itoa(e.Status)
}

// GuardError is a failure inside the guard itself (a recovered panic, a
// broken invariant), never the upstream's: the proxy serves the request
// through the standard protocol instead when no byte reached the client
// yet.
type GuardError struct{ Err error }

func (e *GuardError) Error() string { return "two-stage guard: " + e.Err.Error() }
func (e *GuardError) Unwrap() error { return e.Err }

// InvalidResponseError is an upstream answer that is not a chat
// completion. Message says what was wrong, in the client's terms; it wraps
// ErrInvalidResponse.
type InvalidResponseError struct {
	Message string
	Err     error // the decoding error, if any
}

func (e *InvalidResponseError) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *InvalidResponseError) Unwrap() []error { return []error{ErrInvalidResponse, e.Err} }

func invalidResponse(err error, format string, args ...any) error {
	return &InvalidResponseError{Message: fmt.Sprintf(format, args...), Err: err}
}

// Failure is how the gateway answers one failed request: the client's
// error, the upstream error kind counted in metrics, the request's
// outcome, and whether the upstream call may be made again while nothing
// reached the client.
type Failure struct {
	// Error is what the client gets: status and OpenAI-style body. For an
	// upstream status error it is a summary; the upstream's own body is
	// relayed (see Relay).
	Error *chat.Error
	// Relay is the upstream answer to relay as it came, nil otherwise.
	Relay *UpstreamError
	// UpstreamKind is the kind label of phasegate_upstream_errors_total,
	// "" when the upstream is not at fault.
	UpstreamKind string
	// Outcome is the request's outcome label.
	Outcome metrics.Outcome
	// RetrySafe reports that a new upstream call is safe while no byte
	// reached the client: the failure says nothing against the request.
	RetrySafe bool
	// Guard reports a failure of the guard itself: the standard protocol
	// may serve the request instead.
	Guard bool
}

// StatusClientClosed is the status logged for a client that went away
// (nginx's 499); it is never written, there is nobody to read it.
const StatusClientClosed = 499

// rule is one row of the failure table.
type rule struct {
	sentinel error
	status   int
	typ      string
	code     string
	message  string
	kind     string
	retry    bool
}

// failureTable is the one classification of the gateway's failures,
// first match wins. The gateway's own classifications come before the
// bare context errors: a dial that timed out wraps a net error that also
// reads as context.DeadlineExceeded, yet the upstream was unreachable.
var failureTable = []rule{
	{ErrFirstByteTimeout, http.StatusGatewayTimeout, chat.TypeTimeout, "upstream_timeout", "the upstream did not answer in time", metrics.UpstreamTimeout, true},
	{ErrIdleTimeout, http.StatusGatewayTimeout, chat.TypeTimeout, "upstream_idle_timeout", "the upstream stream went idle", metrics.UpstreamTimeout, false},
	{ErrRequestTimeout, http.StatusGatewayTimeout, chat.TypeTimeout, "request_timeout", "the request took longer than the gateway allows", "", false},
	{ErrUpstreamUnreachable, http.StatusBadGateway, chat.TypeUpstream, "upstream_unreachable", "the upstream could not be reached", metrics.UpstreamUnreachable, true},
	{ErrTruncated, http.StatusBadGateway, chat.TypeUpstream, "upstream_truncated", "the upstream stream ended before the answer finished", metrics.UpstreamTruncated, true},
	{ErrInvalidResponse, http.StatusBadGateway, chat.TypeUpstream, "upstream_invalid_response", "the upstream answer is not a chat completion", metrics.UpstreamInvalid, false},
	{ErrShuttingDown, http.StatusServiceUnavailable, chat.TypeServer, "shutting_down", "the gateway is shutting down; send the request again", "", false},
	{context.DeadlineExceeded, http.StatusGatewayTimeout, chat.TypeTimeout, "request_timeout", "the request took longer than the gateway allows", "", false},
	{context.Canceled, StatusClientClosed, chat.TypeInvalidRequest, "client_closed", "the client closed the request", "", false},
	{errClientGone, StatusClientClosed, chat.TypeInvalidRequest, "client_closed", "the client closed the request", "", false},
}

// Classify maps any error of a request to its Failure. It is the one
// place that decides statuses: an upstream status is relayed, a gateway
// error (*chat.Error) keeps its own, the rows of the table above decide
// transport and upstream failures, a request body over the limit is 413,
// and anything else is a 500 that reveals nothing internal.
func Classify(err error) Failure {
	var ue *UpstreamError
	if errors.As(err, &ue) {
		return classifyStatus(ue)
	}
	var ce *chat.Error
	if errors.As(err, &ce) {
		f := Failure{Error: ce, Outcome: outcomeOf(ce.Status)}
		if ce.Type == chat.TypeUpstream {
			f.UpstreamKind, f.Outcome = metrics.UpstreamInvalid, metrics.OutcomeUpstreamError
		}
		return f
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return Failure{Outcome: metrics.OutcomeClientError, Error: &chat.Error{Status: http.StatusRequestEntityTooLarge, Type: chat.TypeInvalidRequest,
			Code: "request_too_large", Message: "request body is larger than the gateway accepts (" + FormatBytes(mbe.Limit) + ")"}}
	}
	for _, r := range failureTable {
		if errors.Is(err, r.sentinel) {
			e := &chat.Error{Status: r.status, Type: r.typ, Code: r.code, Message: r.message}
			var ie *InvalidResponseError
			if errors.As(err, &ie) {
				e.Message = r.message + ": " + ie.Message
			}
			return Failure{Error: e, UpstreamKind: r.kind, Outcome: outcomeOf(r.status), RetrySafe: r.retry}
		}
	}
	var ge *GuardError
	return Failure{Error: chat.AsError(err), Outcome: metrics.OutcomeGatewayError, Guard: errors.As(err, &ge)}
}

// classifyStatus is the row of an upstream status error: 429 and 5xx are
// the upstream's trouble and safe to retry, any other status is the
// request's and is not.
func classifyStatus(ue *UpstreamError) Failure {
	f := Failure{Relay: ue, UpstreamKind: metrics.UpstreamStatus4xx, Outcome: metrics.OutcomeClientError,
		Error: &chat.Error{Status: ue.Status, Type: chat.TypeUpstream, Code: "upstream_status", Message: ue.Error()}}
	if ue.Status >= 500 {
		f.UpstreamKind = metrics.UpstreamStatus5xx
	}
	if ue.Status == http.StatusTooManyRequests || ue.Status >= 500 {
		f.Outcome, f.RetrySafe = metrics.OutcomeUpstreamError, true
	}
	return f
}

func outcomeOf(status int) metrics.Outcome {
	switch {
	case status == StatusClientClosed:
		return metrics.OutcomeClientClosed
	case status < 400:
		return metrics.OutcomeOK
	case status < 500:
		return metrics.OutcomeClientError
	case status == http.StatusBadGateway || status == http.StatusGatewayTimeout:
		return metrics.OutcomeUpstreamError
	}
	return metrics.OutcomeGatewayError
}

// FormatBytes writes a byte limit as the gateway's errors state it.
func FormatBytes(n int64) string {
	if n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
