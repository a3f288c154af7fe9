package messages_test

import (
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2/shared"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/messages"
)

func TestErrorResponse(t *testing.T) {
	for _, tc := range []struct {
		name       string
		e          *chat.Error
		wantStatus int
		wantType   string
	}{
		{"bad request", chat.InvalidRequest("max_tokens", "missing"), 400, "invalid_request_error"},
		{"unauthorized", &chat.Error{Status: 401, Message: "bad key"}, 401, "authentication_error"},
		{"payment", &chat.Error{Status: 402, Message: "no credit"}, 402, "billing_error"},
		{"forbidden", &chat.Error{Status: 403, Message: "no"}, 403, "permission_error"},
		{"not found", &chat.Error{Status: 404, Message: "unknown url"}, 404, "not_found_error"},
		{"method", &chat.Error{Status: 405, Message: "use POST"}, 405, "invalid_request_error"},
		{"too large", &chat.Error{Status: 413, Message: "body"}, 413, "request_too_large"},
		{"headers too large", &chat.Error{Status: 431, Message: "headers"}, 431, "invalid_request_error"},
		{"rate limit", &chat.Error{Status: 429, Message: "slow down"}, 429, "rate_limit_error"},
		{"server", &chat.Error{Status: 500, Message: "oops"}, 500, "api_error"},
		{"not implemented", &chat.Error{Status: 501, Message: "two-stage off"}, 501, "api_error"},
		{"bad gateway", &chat.Error{Status: 502, Message: "upstream"}, 502, "api_error"},
		{"unavailable", &chat.Error{Status: 503, Message: "busy"}, 529, "overloaded_error"},
		{"overloaded", &chat.Error{Status: 529, Message: "busy"}, 529, "overloaded_error"},
		{"timeout", &chat.Error{Status: 504, Message: "slow upstream"}, 504, "timeout_error"},
		{"no status", &chat.Error{Message: "x"}, 500, "api_error"},
		{"no status, rate limited", &chat.Error{Message: "x", Code: "rate_limit_exceeded"}, 429, "rate_limit_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := messages.ErrorResponse(tc.e)
			if status != tc.wantStatus {
				t.Errorf("status = %d, want %d", status, tc.wantStatus)
			}
			var r shared.ErrorResponse
			if err := r.UnmarshalJSON(body); err != nil {
				t.Fatalf("the SDK cannot decode %s: %v", body, err)
			}
			if string(r.Type) != "error" || string(r.Error.Type) != tc.wantType || r.Error.Message != tc.e.Message {
				t.Errorf("body = %s, want an %s saying %q", body, tc.wantType, tc.e.Message)
			}
			if len(r.JSON.ExtraFields) > 0 {
				t.Errorf("body holds fields the SDK does not know: %v", r.JSON.ExtraFields)
			}
		})
	}
}

// A prompt the window cannot hold is said in the words clients look for
// to compact their history.
func TestErrorPromptTooLong(t *testing.T) {
	e := chat.InvalidRequest("messages", "This model's maximum context length is 1000 tokens")
	e.Code = "context_length_exceeded"
	_, body := messages.ErrorResponse(e)
	if !strings.Contains(string(body), `"message":"prompt is too long: This model's maximum context length is 1000 tokens"`) {
		t.Errorf("body = %s", body)
	}
}

func TestErrorEventEscapes(t *testing.T) {
	ev := messages.ErrorEvent(nil, &chat.Error{Status: 500, Message: "line\nbreak \"quoted\" \x01"})
	evs := parseEvents(t, ev)
	e := evs[0].data["error"].(map[string]any)
	if e["message"] != "line\nbreak \"quoted\" \x01" || e["type"] != "api_error" {
		t.Errorf("error event = %s", ev)
	}
}

// An OpenAI-style error body, an upstream's or the pipeline's, is said in
// Anthropic's shape with its message; one with none, by its status.
func TestErrorBody(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		body       string
		wantStatus int
		wantType   string
		wantMsg    string
	}{
		{"upstream 400", 400, `{"error":{"message":"bad tool schema","type":"invalid_request_error","param":"tools","code":null}}`, 400, "invalid_request_error", "bad tool schema"},
		{"upstream busy", 503, `{"error":{"message":"Server is busy","type":"server_error"}}`, 529, "overloaded_error", "Server is busy"},
		{"context overflow", 400, `{"error":{"message":"maximum context length is 10 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}`, 400, "invalid_request_error", "prompt is too long: maximum context length is 10 tokens"},
		{"not JSON", 502, `<html>bad gateway</html>`, 502, "api_error", "the upstream answered 502 Bad Gateway"},
		{"no message", 429, `{"error":{}}`, 429, "rate_limit_error", "the upstream answered 429 Too Many Requests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := messages.ErrorBody(tc.status, []byte(tc.body))
			var r shared.ErrorResponse
			if err := r.UnmarshalJSON(body); err != nil {
				t.Fatalf("the SDK cannot decode %s: %v", body, err)
			}
			if status != tc.wantStatus || string(r.Error.Type) != tc.wantType || r.Error.Message != tc.wantMsg {
				t.Errorf("ErrorBody = %d %s, want %d %s %q", status, body, tc.wantStatus, tc.wantType, tc.wantMsg)
			}
		})
	}
}
