package chat_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
)

const user = `{"role":"user","content":"hi"}`

func mustParse(t *testing.T, body string) *chat.Request {
	t.Helper()
	r, err := chat.ParseRequest([]byte(body))
	if err != nil {
		t.Fatalf("ParseRequest(%s): %v", body, err)
	}
	return r
}

func TestParseRequestErrors(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		wantParam any
		// wantIn, when set, is what the message must say.
		wantIn string
	}{
		{name: "empty", body: ``, wantParam: "model", wantIn: "the request body is empty"},
		{name: "blank", body: " \n", wantParam: "model", wantIn: "the request body is empty"},
		{name: "not JSON", body: `hello`},
		{name: "array", body: `[]`},
		{name: "string", body: `"x"`},
		{name: "unterminated", body: `{"model":"m"`},
		{name: "bad value", body: `{"model":"m","messages":[` + user + `],"x":tru}`, wantIn: "not valid JSON"},
		{name: "bad messages JSON", body: `{"model":"m","messages":[{"role":"user",]}`, wantIn: "not valid JSON"},
		{name: "trailing data", body: `{"model":"m","messages":[` + user + `]} {}`},
		{name: "no model", body: `{"messages":[` + user + `]}`, wantParam: "model"},
		{name: "null model", body: `{"model":null,"messages":[` + user + `]}`, wantParam: "model"},
		{name: "empty model", body: `{"model":"","messages":[` + user + `]}`, wantParam: "model"},
		{name: "model not a string", body: `{"model":1,"messages":[` + user + `]}`, wantParam: "model", wantIn: "model must be a string, not a number"},
		{name: "stream not a bool", body: `{"model":"m","stream":"yes","messages":[` + user + `]}`, wantParam: "stream", wantIn: "stream must be true or false, not a string"},
		{name: "no messages", body: `{"model":"m"}`, wantParam: "messages"},
		{name: "null messages", body: `{"model":"m","messages":null}`, wantParam: "messages"},
		{name: "empty messages", body: `{"model":"m","messages":[]}`, wantParam: "messages"},
		{name: "messages not an array", body: `{"model":"m","messages":{}}`, wantParam: "messages", wantIn: "messages must be an array of message objects, not an object"},
		{name: "messages a string", body: `{"model":"m","messages":"hi"}`, wantParam: "messages", wantIn: "messages must be an array of message objects, not a string"},
		{name: "message not an object", body: `{"model":"m","messages":["hi"]}`, wantParam: "messages[0]", wantIn: "messages[0] must be a message object, not a string"},
		{name: "role not a string", body: `{"model":"m","messages":[{"role":1}]}`, wantParam: "messages[0].role", wantIn: "messages[0].role must be a string"},
		{name: "tool calls not an array", body: `{"model":"m","messages":[{"role":"assistant","tool_calls":{}}]}`, wantParam: "messages[0].tool_calls", wantIn: "must be an array"},
		{name: "null message", body: `{"model":"m","messages":[null]}`, wantParam: "messages[0].role"},
		{name: "message without role", body: `{"model":"m","messages":[` + user + `,{"content":"x"}]}`, wantParam: "messages[1].role"},
		{name: "tools not an array", body: `{"model":"m","messages":[` + user + `],"tools":{}}`, wantParam: "tools", wantIn: "tools must be an array of tool objects"},
		{name: "tool not an object", body: `{"model":"m","messages":[` + user + `],"tools":["get_weather"]}`, wantParam: "tools[0]", wantIn: "tools[0] must be a tool object"},
		{name: "n not a number", body: `{"model":"m","messages":[` + user + `],"n":"2"}`, wantParam: "n", wantIn: "n must be a whole number, not a string"},
		{name: "max_tokens fractional", body: `{"model":"m","messages":[` + user + `],"max_tokens":1.5}`, wantParam: "max_tokens", wantIn: "max_tokens must be a whole number, not a number (1.5)"},
		{name: "stream_options not an object", body: `{"model":"m","messages":[` + user + `],"stream_options":true}`, wantParam: "stream_options"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := chat.ParseRequest([]byte(tt.body))
			if r != nil {
				t.Errorf("ParseRequest returned a request with its error")
			}
			var e *chat.Error
			if !errors.As(err, &e) {
				t.Fatalf("ParseRequest error = %v, want a *chat.Error", err)
			}
			if e.Status != http.StatusBadRequest || e.Type != chat.TypeInvalidRequest || e.Message == "" {
				t.Errorf("error = {%d %q %q}, want {400 invalid_request_error <a message>}", e.Status, e.Type, e.Message)
			}
			if e.Param != tt.wantParam {
				t.Errorf("param = %v, want %v", e.Param, tt.wantParam)
			}
			if !strings.Contains(e.Message, tt.wantIn) {
				t.Errorf("message = %q, want it to say %q", e.Message, tt.wantIn)
			}
			// The client wrote JSON: no Go type may show.
			for _, goTerm := range []string{"Go value", "Go struct", "[]chat", "chat.", "json:", "int64", "float64"} {
				if strings.Contains(e.Message, goTerm) {
					t.Errorf("message = %q names a Go type (%q)", e.Message, goTerm)
				}
			}
		})
	}
}

func TestParseRequestViews(t *testing.T) {
	type views struct {
		Model        string
		Stream       bool
		Roles        []string
		Tools        []string
		N            int
		MaxTokens    int
		IncludeUsage bool
	}
	tests := []struct {
		name string
		body string
		want views
	}{
		{name: "minimal", body: `{"model":"m","messages":[` + user + `]}`, want: views{Model: "m", Roles: []string{"user"}}},
		{name: "everything", body: `{"model":"deepseek-v4-pro","stream":true,"stream_options":{"include_usage":true},"n":2,"max_tokens":100,` +
			`"messages":[{"role":"system","content":"s"},` + user + `,{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}],` +
			`"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}},{"type":"function","function":{"name":"g"}}]}`,
			want: views{Model: "deepseek-v4-pro", Stream: true, Roles: []string{"system", "user", "assistant", "tool"}, Tools: []string{"f", "g"}, N: 2, MaxTokens: 100, IncludeUsage: true}},
		{name: "max_completion_tokens wins", body: `{"model":"m","messages":[` + user + `],"max_tokens":100,"max_completion_tokens":50}`,
			want: views{Model: "m", Roles: []string{"user"}, MaxTokens: 50}},
		{name: "nulls are absent", body: `{"model":"m","messages":[` + user + `],"stream":null,"n":null,"tools":null,"stream_options":null}`,
			want: views{Model: "m", Roles: []string{"user"}}},
		{name: "a duplicate key takes the last value", body: `{"model":"a","messages":[` + user + `],"model":"b"}`,
			want: views{Model: "b", Roles: []string{"user"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustParse(t, tt.body)
			got := views{Model: r.Model, Stream: r.Stream, N: r.N, MaxTokens: r.MaxTokens, IncludeUsage: r.IncludeUsage}
			for _, m := range r.Messages {
				got.Roles = append(got.Roles, m.Role)
			}
			for _, tool := range r.Tools {
				got.Tools = append(got.Tools, tool.Function.Name)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("views (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEncodeRoundTrip checks a request comes out as it came in: fields the
// gateway does not know, their order and their bytes.
func TestEncodeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string // "" means the body itself
	}{
		{name: "minimal", body: `{"model":"m","messages":[` + user + `]}`},
		{name: "unknown fields and order kept", body: `{"thinking":{"type":"enabled"},"temperature":0,"messages":[` + user + `],"x_vendor":[1,2.50,1e3],"model":"m","top_p":1.0}`},
		{name: "value bytes kept", body: `{"model":"m","messages":[{"role":"user","content":"<a> & \u00e9 \"q\"","x": { "spaced" : [ 1 , 2 ] }}],"logit_bias":{"50256": -100}}`},
		{name: "messages with vendor fields", body: `{"model":"m","messages":[{"role":"assistant","content":null,"reasoning_content":"hm","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}],"prefix":true}]}`},
		{name: "space between fields dropped, values kept", body: "{ \"model\" : \"m\" ,\n \"messages\" : [ " + user + " ] ,\t\"x\" : { \"a\" : 1 } }",
			want: `{"model":"m","messages":[ ` + user + ` ],"x":{ "a" : 1 }}`},
		{name: "duplicate key keeps its first place", body: `{"model":"a","messages":[` + user + `],"model":"b"}`, want: `{"model":"b","messages":[` + user + `]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want == "" {
				want = tt.body
			}
			r := mustParse(t, tt.body)
			got := string(r.Encode())
			if got != want {
				t.Errorf("Encode =\n%s\nwant\n%s", got, want)
			}
			again := mustParse(t, got)
			if string(again.Encode()) != got {
				t.Errorf("Encode is not stable: %s", again.Encode())
			}
		})
	}
}

func TestRequestEdits(t *testing.T) {
	base := `{"model":"m","stream":true,"messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f"}}],"x":1}`
	tests := []struct {
		name    string
		edit    func(r *chat.Request) error
		want    string
		wantErr bool
	}{
		{name: "set an existing field in place", edit: func(r *chat.Request) error { return r.Set("model", "n") },
			want: `{"model":"n","stream":true,"messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f"}}],"x":1}`},
		{name: "set a new field at the end", edit: func(r *chat.Request) error { return r.Set("max_tokens", 5) },
			want: `{"model":"m","stream":true,"messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f"}}],"x":1,"max_tokens":5}`},
		{name: "set raw", edit: func(r *chat.Request) error { return r.Set("x", json.RawMessage(`{"k": [1]}`)) },
			want: `{"model":"m","stream":true,"messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f"}}],"x":{"k": [1]}}`},
		{name: "set messages refused", edit: func(r *chat.Request) error { return r.Set("messages", []string{}) }, wantErr: true,
			want: base},
		{name: "set tools refused", edit: func(r *chat.Request) error { return r.Set("tools", nil) }, wantErr: true, want: base},
		{name: "set an invalid model refused, nothing changed", edit: func(r *chat.Request) error { return r.Set("model", "") }, wantErr: true, want: base},
		{name: "set an invalid new field refused, nothing changed", edit: func(r *chat.Request) error { return r.Set("n", "two") }, wantErr: true, want: base},
		{name: "set an invalid stream refused, nothing changed", edit: func(r *chat.Request) error { return r.Set("stream", "yes") }, wantErr: true, want: base},
		{name: "delete", edit: func(r *chat.Request) error { r.Delete("stream"); r.Delete("absent"); return nil },
			want: `{"model":"m","messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f"}}],"x":1}`},
		{name: "set messages keeps each message's bytes", edit: func(r *chat.Request) error {
			m, err := chat.NewMessageFields(map[string]any{"role": "system", "content": "notice"})
			if err != nil {
				return err
			}
			r.SetMessages(append(r.Messages, m))
			return nil
		}, want: `{"model":"m","stream":true,"messages":[` + user + `,{"content":"notice","role":"system"}],"tools":[{"type":"function","function":{"name":"f"}}],"x":1}`},
		{name: "no tools removes the field", edit: func(r *chat.Request) error { r.SetTools(nil); return nil },
			want: `{"model":"m","stream":true,"messages":[` + user + `],"x":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustParse(t, base)
			err := tt.edit(r)
			if (err != nil) != tt.wantErr {
				t.Fatalf("edit error = %v, want error: %v", err, tt.wantErr)
			}
			if got := string(r.Encode()); got != tt.want {
				t.Errorf("after edit:\n%s\nwant\n%s", got, tt.want)
			}
			if tt.wantErr && (r.Model != "m" || !r.Stream || r.N != 0) {
				t.Errorf("views after a refused edit: model %q stream %v n %d, want m true 0", r.Model, r.Stream, r.N)
			}
		})
	}
}

func TestRequestViewsFollowEdits(t *testing.T) {
	r := mustParse(t, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"n":3,"messages":[`+user+`],"tools":[{"type":"function","function":{"name":"f"}}]}`)
	if err := r.Set("max_completion_tokens", 9); err != nil {
		t.Fatal(err)
	}
	r.Delete("stream")
	r.Delete("n")
	r.Delete("stream_options")
	r.SetTools(nil)
	got := []any{r.MaxTokens, r.Stream, r.N, r.IncludeUsage, len(r.Tools)}
	want := []any{9, false, 0, false, 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("views after edits [max_tokens stream n include_usage tools] (-want +got):\n%s", diff)
	}
	if _, ok := r.Field("tools"); ok {
		t.Error("tools field still present")
	}
	if raw, ok := r.Field("model"); !ok || string(raw) != `"m"` {
		t.Errorf("Field(model) = %s, %v", raw, ok)
	}
}

// TestClone checks edits to a clone never reach the original.
func TestClone(t *testing.T) {
	body := `{"model":"m","messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f"}}],"a":1,"b":2}`
	r := mustParse(t, body)
	c := r.Clone()
	if err := c.Set("model", "other"); err != nil {
		t.Fatal(err)
	}
	c.Delete("a")
	c.SetMessages(append(c.Messages, chat.NewMessage("system", "x")))
	c.SetTools(nil)
	if got := string(r.Encode()); got != body {
		t.Errorf("original after clone edits = %s, want %s", got, body)
	}
	if r.Model != "m" || len(r.Messages) != 1 || len(r.Tools) != 1 {
		t.Errorf("original views changed: model %q, %d messages, %d tools", r.Model, len(r.Messages), len(r.Tools))
	}
	if got, want := string(c.Encode()), `{"model":"other","messages":[`+user+`,{"content":"x","role":"system"}],"b":2}`; got != want {
		t.Errorf("clone = %s, want %s", got, want)
	}
}

func TestErrorBody(t *testing.T) {
	tests := []struct {
		name string
		err  *chat.Error
		want string
	}{
		{name: "invalid request with param", err: chat.InvalidRequest("model", "need a %s", "model"),
			want: `{"error":{"message":"need a model","type":"invalid_request_error","param":"model","code":null}}`},
		{name: "no param is null", err: chat.InvalidRequest("", "bad"),
			want: `{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}`},
		{name: "code", err: &chat.Error{Status: 502, Message: "m", Type: chat.TypeUpstream, Code: "upstream_truncated"},
			want: `{"error":{"message":"m","type":"upstream_error","param":null,"code":"upstream_truncated"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(tt.err.Body()); got != tt.want {
				t.Errorf("Body = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestAsError(t *testing.T) {
	own := chat.InvalidRequest("x", "bad x")
	if got := chat.AsError(errors.Join(errors.New("ctx"), own)); got != own {
		t.Errorf("AsError of a wrapped *Error = %v, want it back", got)
	}
	got := chat.AsError(errors.New("dial tcp 10.0.0.1: secret detail"))
	if got.Status != 500 || got.Type != chat.TypeServer || got.Message == "" {
		t.Errorf("AsError(other) = %+v, want a 500 server_error", got)
	}
	if got.Error() == "dial tcp 10.0.0.1: secret detail" {
		t.Errorf("AsError revealed the internal error")
	}
}
