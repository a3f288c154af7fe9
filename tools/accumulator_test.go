package tools

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/chat"
)

func TestAccumulator(t *testing.T) {
	const nested = `{"code":"if (a) { b(\"}\\\"\"); } [","re":"\\","q":"\"{"}`
	tests := []struct {
		name         string
		deltas       []chat.ToolCallDelta
		finish       bool
		wantCall     chat.ToolCall
		wantComplete bool
		wantLen      int
	}{
		{
			name:         "no call",
			wantCall:     chat.ToolCall{},
			wantComplete: false,
			wantLen:      0,
		},
		{
			name:         "one fragment",
			deltas:       []chat.ToolCallDelta{delta(0, "call_1", "read", `{"path":"a"}`)},
			wantCall:     toolCall("call_1", "read", `{"path":"a"}`),
			wantComplete: true,
			wantLen:      1,
		},
		{
			name:         "fragmented at arbitrary boundaries",
			deltas:       fragments("call_1", "read", `{"path":"a/b","n":[1,2,{"x":"}"}],"u":"\u00e9"}`, []int{0, 1, 3, 2, 7, 1, 1, 5, 4}, false),
			wantCall:     toolCall("call_1", "read", `{"path":"a/b","n":[1,2,{"x":"}"}],"u":"\u00e9"}`),
			wantComplete: true,
			wantLen:      1,
		},
		{
			name:         "value not closed yet",
			deltas:       fragments("call_1", "read", `{"path":"a","n":[1,2]`, []int{4, 4}, false),
			wantCall:     toolCall("call_1", "read", `{"path":"a","n":[1,2]`),
			wantComplete: false,
			wantLen:      1,
		},
		{
			name:         "id name and type repeated on every fragment",
			deltas:       []chat.ToolCallDelta{delta(0, "call_1", "read", `{"pa`), delta(0, "call_1", "read", `th":`), delta(0, "call_1", "read", `"x"}`)},
			wantCall:     toolCall("call_1", "read", `{"path":"x"}`),
			wantComplete: true,
			wantLen:      1,
		},
		{
			name:         "empty arguments while streaming",
			deltas:       []chat.ToolCallDelta{delta(0, "call_1", "now", ""), delta(0, "", "", "")},
			wantCall:     toolCall("call_1", "now", ""),
			wantComplete: false,
			wantLen:      1,
		},
		{
			name:         "empty arguments when finished",
			deltas:       []chat.ToolCallDelta{delta(0, "call_1", "now", ""), delta(0, "", "", "")},
			finish:       true,
			wantCall:     toolCall("call_1", "now", ""),
			wantComplete: true,
			wantLen:      1,
		},
		{
			name:         "later index completes the first",
			deltas:       []chat.ToolCallDelta{delta(0, "call_1", "read", `{"path":`), delta(1, "call_2", "list", "")},
			wantCall:     toolCall("call_1", "read", `{"path":`),
			wantComplete: true,
			wantLen:      2,
		},
		{
			name:         "fragments of a later index leave the first alone",
			deltas:       []chat.ToolCallDelta{delta(0, "call_1", "read", `{}`), delta(1, "call_2", "list", `{"a"`), delta(1, "", "", `:1}`), delta(0, "", "", " ")},
			wantCall:     toolCall("call_1", "read", `{} `),
			wantComplete: true,
			wantLen:      2,
		},
		{
			name:         "nested strings with braces and escaped quotes",
			deltas:       fragments("call_1", "run", nested, []int{9, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1, 1, 2, 1}, false),
			wantCall:     toolCall("call_1", "run", nested),
			wantComplete: true,
			wantLen:      1,
		},
		{
			name:         "nested strings cut before the last brace",
			deltas:       fragments("call_1", "run", nested[:len(nested)-1], []int{9, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1, 1, 2, 1}, false),
			wantCall:     toolCall("call_1", "run", nested[:len(nested)-1]),
			wantComplete: false,
			wantLen:      1,
		},
		{
			name:         "escaped backslash then closing quote",
			deltas:       fragments("call_1", "run", `{"a":"\\"}`, []int{6, 1, 1}, false),
			wantCall:     toolCall("call_1", "run", `{"a":"\\"}`),
			wantComplete: true,
			wantLen:      1,
		},
		{
			name:         "whitespace around the value",
			deltas:       fragments("call_1", "run", " \n{\"a\": 1}\t ", []int{1, 2, 3}, false),
			wantCall:     toolCall("call_1", "run", " \n{\"a\": 1}\t "),
			wantComplete: true,
			wantLen:      1,
		},
		{
			name:         "balanced but not valid JSON",
			deltas:       fragments("call_1", "run", `{"a":tru}`, []int{3}, false),
			wantCall:     toolCall("call_1", "run", `{"a":tru}`),
			wantComplete: false,
			wantLen:      1,
		},
		{
			name:         "data after the value",
			deltas:       fragments("call_1", "run", `{"a":1}{"b":2}`, []int{7}, false),
			wantCall:     toolCall("call_1", "run", `{"a":1}{"b":2}`),
			wantComplete: false,
			wantLen:      1,
		},
		{
			name:         "data after the value when finished",
			deltas:       fragments("call_1", "run", `{"a":1}{"b":2}`, []int{7}, false),
			finish:       true,
			wantCall:     toolCall("call_1", "run", `{"a":1}{"b":2}`),
			wantComplete: true,
			wantLen:      1,
		},
		{
			name:         "top-level number waits for the finish",
			deltas:       fragments("call_1", "run", `12`, nil, false),
			wantCall:     toolCall("call_1", "run", `12`),
			wantComplete: false,
			wantLen:      1,
		},
		{
			name:         "top-level string closes",
			deltas:       fragments("call_1", "run", `"a\"b"`, []int{2, 1}, false),
			wantCall:     toolCall("call_1", "run", `"a\"b"`),
			wantComplete: true,
			wantLen:      1,
		},
		{
			name: "missing type defaults to function",
			deltas: func() []chat.ToolCallDelta {
				d := delta(0, "call_1", "read", `{}`)
				d.Type = ""
				return []chat.ToolCallDelta{d}
			}(),
			wantCall:     toolCall("call_1", "read", `{}`),
			wantComplete: true,
			wantLen:      1,
		},
		{
			name:         "same index with a new id starts a new call (Ollama)",
			deltas:       []chat.ToolCallDelta{delta(0, "call_a", "read", `{"p":`), delta(0, "call_b", "list", `{}`)},
			wantCall:     toolCall("call_a", "read", `{"p":`),
			wantComplete: true,
			wantLen:      2,
		},
		{
			name:         "unseen index without id or name continues the call (SGLang)",
			deltas:       []chat.ToolCallDelta{delta(2, "call_a", "read", `{"p":`), delta(0, "", "", `1`), delta(0, "", "", `}`)},
			wantCall:     toolCall("call_a", "read", `{"p":1}`),
			wantComplete: true,
			wantLen:      1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a Accumulator
			for _, d := range tt.deltas {
				a.Add(d)
			}
			if tt.finish {
				a.Finish()
			}
			gotCall, gotComplete := a.First()
			if gotCall != tt.wantCall {
				t.Errorf("First() call: got %+v, want %+v", gotCall, tt.wantCall)
			}
			if gotComplete != tt.wantComplete {
				t.Errorf("First() complete: got %v, want %v", gotComplete, tt.wantComplete)
			}
			if got := a.Len(); got != tt.wantLen {
				t.Errorf("Len(): got %d, want %d", got, tt.wantLen)
			}
		})
	}
}

// TestAccumulatorCompletesOnLastByte feeds a call byte by byte: it must be
// incomplete up to the byte that closes the value and complete from it on.
func TestAccumulatorCompletesOnLastByte(t *testing.T) {
	tests := []struct {
		name string
		args string
	}{
		{name: "flat object", args: `{"path":"a","n":1}`},
		{name: "braces and quotes in strings", args: `{"s":"}]\"{[\\","t":["}",{"u":"\\\""}]}`},
		{name: "array", args: `[{"a":[]},"]"]`},
		{name: "multibyte runes", args: `{"é":"日本語","emoji":"🙂"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a Accumulator
			a.Add(delta(0, "call_1", "f", ""))
			for i := 0; i < len(tt.args); i++ {
				a.Add(delta(0, "", "", tt.args[i:i+1]))
				_, got := a.First()
				want := i == len(tt.args)-1
				if got != want {
					t.Fatalf("complete after %q: got %v, want %v", tt.args[:i+1], got, want)
				}
			}
		})
	}
}

func FuzzAccumulator(f *testing.F) {
	f.Add(`{"path":"a/b","n":[1,2.5e3,{"x":"}"}]}`, []byte{1, 2, 3, 0, 5})
	f.Add(`{"s":"\"}\\","t":null}`, []byte{3, 1, 1, 1})
	f.Add(`{"a":1}{"b":2}`, []byte{7})
	f.Add(`"str"`, []byte{1})
	f.Add(`12`, []byte{1})
	f.Add(``, []byte{})
	f.Add("  {\"é\":\"日本\"} \n", []byte{2, 1, 1, 1})
	f.Fuzz(func(t *testing.T, args string, cuts []byte) {
		sizes := make([]int, len(cuts))
		for i, c := range cuts {
			sizes[i] = int(c % 16)
		}
		deltas := fragments("call_1", "f", args, sizes, len(cuts)%2 == 1)
		trimmed := strings.TrimLeft(args, " \t\r\n")
		container := trimmed != "" && strings.ContainsRune(`{["`, rune(trimmed[0]))

		var a Accumulator
		fed := 0
		for _, d := range deltas {
			a.Add(d)
			fed += len(d.Function.Arguments)
			_, got := a.First()
			// A value that starts with { [ or " is complete exactly when
			// the bytes so far are valid JSON; a bare scalar never is
			// before the finish.
			want := container && json.Valid([]byte(args[:fed]))
			if got != want {
				t.Fatalf("complete after %q: got %v, want %v", args[:fed], got, want)
			}
		}
		a.Finish()
		call, complete := a.First()
		if call.Function.Arguments != args {
			t.Fatalf("arguments: got %q, want %q", call.Function.Arguments, args)
		}
		if !complete {
			t.Fatalf("complete after Finish: got false, want true")
		}
		if a.Len() != 1 {
			t.Fatalf("Len(): got %d, want 1", a.Len())
		}
	})
}

// BenchmarkAccumulatorAdd streams one call of about 4 KiB in 200 fragments.
func BenchmarkAccumulatorAdd(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"path":"src/main.go","content":"`)
	for sb.Len() < 4000 {
		sb.WriteString(`func f() { return \"x\" }\n`)
	}
	sb.WriteString(`","mode":"overwrite"}`)
	args := sb.String()
	size := len(args)/200 + 1
	sizes := make([]int, 200)
	for i := range sizes {
		sizes[i] = size
	}
	deltas := fragments("call_1", "write_file", args, sizes, true)
	if len(deltas) != 200 {
		b.Fatalf("fragments: got %d, want 200", len(deltas))
	}
	b.SetBytes(int64(len(args)))
	b.ReportAllocs()
	for b.Loop() {
		// The pump asks after every fragment whether the call is complete.
		var a Accumulator
		complete := false
		for _, d := range deltas {
			a.Add(d)
			_, complete = a.First()
		}
		if !complete {
			b.Fatal("call not complete")
		}
	}
}
