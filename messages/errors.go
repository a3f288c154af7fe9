package messages

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/phasegate/phasegate/chat"
)

// ErrorType is the type of an error, as the Messages API spells it.
type ErrorType string

// Error types.
const (
	TypeInvalidRequest ErrorType = "invalid_request_error"
	TypeAuthentication ErrorType = "authentication_error"
	TypeBilling        ErrorType = "billing_error"
	TypePermission     ErrorType = "permission_error"
	TypeNotFound       ErrorType = "not_found_error"
	TypeTooLarge       ErrorType = "request_too_large"
	TypeRateLimit      ErrorType = "rate_limit_error"
	TypeAPI            ErrorType = "api_error"
	TypeTimeout        ErrorType = "timeout_error"
	TypeOverloaded     ErrorType = "overloaded_error"
)

// StatusOverloaded is the status Anthropic answers when it is
// overloaded, where others answer 503.
const StatusOverloaded = 529

// ErrorStatus returns the status and the error type the Messages API
// answers for an error the gateway answers with status: 503 becomes
// Anthropic's 529 overloaded_error; any other status stays, typed by
// its class where Anthropic has no type of its own for it.
func ErrorStatus(status int) (int, ErrorType) {
	switch status {
	case http.StatusBadRequest:
		return status, TypeInvalidRequest
	case http.StatusUnauthorized:
		return status, TypeAuthentication
	case http.StatusPaymentRequired:
		return status, TypeBilling
	case http.StatusForbidden:
		return status, TypePermission
	case http.StatusNotFound:
		return status, TypeNotFound
	case http.StatusRequestEntityTooLarge:
		return status, TypeTooLarge
	case http.StatusTooManyRequests:
		return status, TypeRateLimit
	case http.StatusGatewayTimeout:
		return status, TypeTimeout
	case http.StatusServiceUnavailable, StatusOverloaded:
		return StatusOverloaded, TypeOverloaded
	}
	if status >= 400 && status < 500 {
		return status, TypeInvalidRequest
	}
	if status < 500 || status > 599 {
		status = http.StatusInternalServerError
	}
	return status, TypeAPI
}

// message is what the client reads of e. A prompt the model's window
// cannot hold is said as Anthropic says it ("prompt is too long"), the
// words by which clients such as Claude Code know to compact their
// history.
func message(e *chat.Error) string {
	if e.Code == "context_length_exceeded" {
		return "prompt is too long: " + e.Message
	}
	return e.Message
}

// appendError appends the error object {"type":"error","error":{...}}.
// A thread not found says so in details.error_code, where Anthropic's
// SDKs look for it.
func appendError(dst []byte, typ ErrorType, e *chat.Error) []byte {
	dst = append(append(append(dst, `{"type":"error","error":{"type":"`...), typ...), `","message":`...)
	dst = appendString(dst, message(e))
	if e.Code == CodeThreadNotFound {
		dst = append(dst, `,"details":{"error_code":"`+CodeThreadNotFound+`"}`...)
	}
	return append(dst, "}}"...)
}

// errorStatus is ErrorStatus of e's status. An error read back from a
// chunk has none: its type and code say what it was.
func errorStatus(e *chat.Error) (int, ErrorType) {
	if e.Status != 0 {
		return ErrorStatus(e.Status)
	}
	switch {
	case e.Type == chat.TypeTimeout:
		return ErrorStatus(http.StatusGatewayTimeout)
	case e.Code == "rate_limit_exceeded":
		return ErrorStatus(http.StatusTooManyRequests)
	case e.Type == chat.TypeInvalidRequest:
		return ErrorStatus(http.StatusBadRequest)
	}
	return ErrorStatus(http.StatusInternalServerError)
}

// ErrorResponse returns the status and the body of the answer to a
// request that failed with e before its first byte, in the Messages
// API's shape: {"type":"error","error":{"type":…,"message":…}}.
func ErrorResponse(e *chat.Error) (int, []byte) {
	status, typ := errorStatus(e)
	return status, appendError(nil, typ, e)
}

// ErrorBody returns the status and the body, in the Messages API's
// shape, of an error answered with status and an OpenAI-style body
// ({"error":{"message",…}}): what an upstream or the chat pipeline wrote.
// A body that says no message is said by its status.
func ErrorBody(status int, body []byte) (int, []byte) {
	var v struct {
		Error *chat.Error `json:"error"`
	}
	e := &chat.Error{}
	if json.Unmarshal(body, &v) == nil && v.Error != nil {
		e = v.Error
	}
	e.Status = status
	if e.Message == "" {
		e.Message = fmt.Sprintf("the upstream answered %d %s", status, http.StatusText(status))
	}
	return ErrorResponse(e)
}

// ErrorEvent appends the error event that ends a stream that failed
// after its first byte.
func ErrorEvent(dst []byte, e *chat.Error) []byte {
	_, typ := errorStatus(e)
	dst = append(dst, "event: error\ndata: "...)
	return append(appendError(dst, typ, e), "\n\n"...)
}
