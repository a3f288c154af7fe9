package tools

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/phasegate/phasegate/chat"
)

// history decodes a JSON array of messages, as the client sends them.
func history(t testing.TB, raw string) []chat.Message {
	t.Helper()
	var msgs []chat.Message
	if err := json.Unmarshal([]byte(raw), &msgs); err != nil {
		t.Fatalf("decode history: %v", err)
	}
	return msgs
}

func mustSignature(t testing.TB, projectID, name, args string) Signature {
	t.Helper()
	sig, err := NewSignature(projectID, name, args)
	if err != nil {
		t.Fatalf("NewSignature(%q, %q, %q): %v", projectID, name, args, err)
	}
	return sig
}

func TestLedger(t *testing.T) {
	type executed struct {
		id, name, args, result string
		malformed              bool
	}
	tests := []struct {
		name    string
		history string
		want    []executed
	}{
		{
			name:    "no tool calls",
			history: `[{"role":"system","content":"s"},{"role":"user","content":"hi"}]`,
			want:    nil,
		},
		{
			name: "calls before the last user message are another turn",
			history: `[
				{"role":"user","content":"first"},
				{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{\"p\":1}"}}]},
				{"role":"tool","tool_call_id":"c1","content":"old"},
				{"role":"assistant","content":"done"},
				{"role":"user","content":"second"},
				{"role":"assistant","content":null,"tool_calls":[{"id":"c2","type":"function","function":{"name":"list","arguments":"{}"}}]},
				{"role":"tool","tool_call_id":"c2","content":"new"}
			]`,
			want: []executed{{id: "c2", name: "list", args: `{}`, result: "new"}},
		},
		{
			name: "unanswered call is not executed",
			history: `[
				{"role":"user","content":"go"},
				{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]},
				{"role":"tool","tool_call_id":"c1","content":"r1"},
				{"role":"assistant","content":null,"tool_calls":[{"id":"c2","type":"function","function":{"name":"read","arguments":"{\"p\":2}"}}]}
			]`,
			want: []executed{{id: "c1", name: "read", args: `{}`, result: "r1"}},
		},
		{
			name: "parallel calls in one assistant message",
			history: `[
				{"role":"user","content":"go"},
				{"role":"assistant","content":null,"tool_calls":[
					{"id":"a","type":"function","function":{"name":"read","arguments":"{\"p\":1}"}},
					{"id":"b","type":"function","function":{"name":"read","arguments":"{\"p\":2}"}},
					{"id":"c","type":"function","function":{"name":"list","arguments":""}}]},
				{"role":"tool","tool_call_id":"b","content":"rb"},
				{"role":"tool","tool_call_id":"a","content":[{"type":"text","text":"r"},{"type":"text","text":"a"}]},
				{"role":"tool","tool_call_id":"c","content":"rc"}
			]`,
			want: []executed{
				{id: "a", name: "read", args: `{"p":1}`, result: "ra"},
				{id: "b", name: "read", args: `{"p":2}`, result: "rb"},
				{id: "c", name: "list", args: ``, result: "rc"},
			},
		},
		{
			name: "malformed arguments count but have no signature",
			history: `[
				{"role":"user","content":"go"},
				{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{\"p\":"}}]},
				{"role":"tool","tool_call_id":"c1","content":"error: bad json"}
			]`,
			want: []executed{{id: "c1", name: "read", args: `{"p":`, result: "error: bad json", malformed: true}},
		},
		{
			name: "ids repeated across responses answer the latest call",
			history: `[
				{"role":"user","content":"go"},
				{"role":"assistant","content":null,"tool_calls":[{"id":"call_0","type":"function","function":{"name":"read","arguments":"{\"p\":1}"}}]},
				{"role":"tool","tool_call_id":"call_0","content":"r1"},
				{"role":"assistant","content":null,"tool_calls":[{"id":"call_0","type":"function","function":{"name":"read","arguments":"{\"p\":2}"}}]},
				{"role":"tool","tool_call_id":"call_0","content":"r2"}
			]`,
			want: []executed{
				{id: "call_0", name: "read", args: `{"p":1}`, result: "r1"},
				{id: "call_0", name: "read", args: `{"p":2}`, result: "r2"},
			},
		},
		{
			name: "tool message before its call answers nothing",
			history: `[
				{"role":"user","content":"go"},
				{"role":"tool","tool_call_id":"c1","content":"early"},
				{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]}
			]`,
			want: nil,
		},
		{
			name: "call answered twice counts once",
			history: `[
				{"role":"user","content":"go"},
				{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]},
				{"role":"tool","tool_call_id":"c1","content":"one"},
				{"role":"tool","tool_call_id":"c1","content":"two"}
			]`,
			want: []executed{{id: "c1", name: "read", args: `{}`, result: "one"}},
		},
		{
			name: "no user message: the whole history is the turn",
			history: `[
				{"role":"system","content":"s"},
				{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]},
				{"role":"tool","tool_call_id":"c1","content":"r"}
			]`,
			want: []executed{{id: "c1", name: "read", args: `{}`, result: "r"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLedger("proj", history(t, tt.history))
			var want []Executed
			for _, e := range tt.want {
				var sig Signature
				if !e.malformed {
					sig = mustSignature(t, "proj", e.name, e.args)
				}
				want = append(want, Executed{Call: toolCall(e.id, e.name, e.args), Signature: sig, Result: e.result})
			}
			got := l.Executed()
			if !slices.Equal(got, want) {
				t.Errorf("Executed(): got %+v, want %+v", got, want)
			}
			if got, want := l.CycleIndex(), len(tt.want); got != want {
				t.Errorf("CycleIndex(): got %d, want %d", got, want)
			}
			for _, e := range want {
				if e.Signature != "" && !l.Blocked(e.Signature) {
					t.Errorf("Blocked(%s) for executed %s: got false, want true", e.Signature, e.Call.ID)
				}
			}
		})
	}
}

func TestLedgerBlocked(t *testing.T) {
	l := NewLedger("proj", history(t, `[
		{"role":"user","content":"go"},
		{"role":"assistant","content":null,"tool_calls":[
			{"id":"c1","type":"function","function":{"name":"read","arguments":"{\"p\":1,\"q\":[1.0]}"}},
			{"id":"c2","type":"function","function":{"name":"list","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"r1"}
	]`))
	tests := []struct {
		name string
		sig  Signature
		want bool
	}{
		{name: "same call respelled", sig: mustSignature(t, "proj", "read", `{ "q":[1], "p":1 }`), want: true},
		{name: "other arguments", sig: mustSignature(t, "proj", "read", `{"p":2,"q":[1]}`), want: false},
		{name: "other project", sig: mustSignature(t, "other", "read", `{"p":1,"q":[1]}`), want: false},
		{name: "unanswered call", sig: mustSignature(t, "proj", "list", `{}`), want: false},
		{name: "no signature", sig: "", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := l.Blocked(tt.sig); got != tt.want {
				t.Errorf("Blocked(): got %v, want %v", got, tt.want)
			}
		})
	}
}
