package messages_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/messages"
)

func repeat(item string, n int) string {
	return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
}

// A body over a limit is refused with the chat route's error before it
// is decoded: the bodies past the counted arrays are not even JSON.
func TestLimits(t *testing.T) {
	l := messages.Limits{MaxDepth: 8, MaxMessages: 3, MaxBlocks: 4, MaxTools: 2}
	msg := `{"role":"user","content":"x"}`
	tool := `{"name":"f","input_schema":{}}`
	text := `{"type":"text","text":"x"}`
	for _, tc := range []struct {
		name, body, param string
		ok                bool
	}{
		{name: "at every limit", ok: true,
			body: `{"model":"m","max_tokens":1,"system":[` + text + `],"messages":[` + repeat(msg, 2) + `,{"role":"user","content":[` + repeat(text, 3) + `]}],"tools":[` + repeat(tool, 2) + `]}`},
		{name: "messages", param: "messages", body: `{"messages":[` + repeat(msg, 4) + `], "rest": not json`},
		{name: "other arrays are not messages", ok: true, body: `{"model":"m","max_tokens":1,"messages":[ ` + msg + ` ],"x":[` + repeat(msg, 9) + `]}`},
		{name: "tools", param: "tools", body: `{"tools":[` + repeat(tool, 3) + `]` + ` not json`},
		{name: "escaped key", param: "tools", body: `{"t\u006fols":[` + repeat(tool, 3) + `]}`},
		{name: "blocks of one message", param: "messages", body: `{"messages":[{"role":"user","content":[` + repeat(text, 5) + `]}] not json`},
		{name: "blocks counted together", param: "messages",
			body: `{"system":[` + repeat(text, 2) + `],"messages":[{"role":"user","content":[` + repeat(text, 2) + `]},{"role":"user","content":[` + text + `]}]`},
		{name: "blocks of a tool result", param: "messages",
			body: `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"c","content":[` + repeat(text, 4) + `]}]}]`},
		{name: "escaped content", param: "messages", body: `{"messages":[{"role":"user","c\u006fntent":[` + repeat(text, 5) + `]}]`},
		{name: "arrays elsewhere are not blocks", ok: true,
			body: `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"c","name":"f","input":{"content":[1,2,3,4,5,6]}}]}]}`},
		{name: "depth", param: "", body: `{"model":"m","messages":` + strings.Repeat("[", 8) + ` not json`},
		{name: "depth in a string is no depth", ok: true,
			body: `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat("[", 20) + `"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := messages.Translate([]byte(tc.body), messages.Config{Limits: l})
			if tc.ok {
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
				return
			}
			var e *chat.Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
				t.Fatalf("err = %v, want a 400", err)
			}
			if p, _ := e.Param.(string); p != tc.param || !strings.Contains(e.Message, "this gateway accepts at most") && !strings.Contains(e.Message, "deep") {
				t.Errorf("param %v message %q, want the limit's on %q", e.Param, e.Message, tc.param)
			}
		})
	}
}

// The defaults are the chat route's.
func TestDefaultLimits(t *testing.T) {
	want := messages.Limits{MaxDepth: 64, MaxMessages: 10_000, MaxBlocks: 50_000, MaxTools: 512}
	if got := messages.DefaultLimits(); got != want {
		t.Errorf("DefaultLimits() = %+v, want %+v", got, want)
	}
	nested := func(n int) []byte {
		return []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"x":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`)
	}
	if _, err := messages.Translate(nested(63), messages.Config{}); err != nil {
		t.Errorf("64 levels of nesting: %v", err)
	}
	var e *chat.Error
	if _, err := messages.Translate(nested(64), messages.Config{}); !errors.As(err, &e) || !strings.Contains(e.Message, "more than 64 deep") {
		t.Errorf("65 levels of nesting: err = %v, want the depth limit", err)
	}
}
