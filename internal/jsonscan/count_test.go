package jsonscan_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/internal/jsonscan"
)

// countSeeds are request shapes of the doors: chat messages and tools,
// Responses input and tools, Messages messages and system blocks, with
// keys escaped, in another case, given twice, inside strings, and arrays
// nested or empty.
var countSeeds = []string{
	`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"t"}}]}`,
	`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a,b]"}]},{"type":"function_call_output","call_id":"c","output":"[1,2]"}]}`,
	`{"Input":[1,2,3],"TOOLS":[],"toolſ":[{}],"\u0069nput":[[],[[]]]}`,
	`{"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"max_tokens":1}`,
	`{"messages":[],"messages":[1,2],"x":"\"messages\":[1,2,3]"}`,
	`{"a":{"messages":[1,2,3]},"messages":[ 1 , 2 ]}`,
	`[{"messages":[1]}]`, `{"messages":"[1,2]"}`, `{"messages":[`, `{"messages":[1,2}`, `{}`, ``,
}

// array is a top-level array of an object, as the decoder read it.
type array struct {
	name string
	n    int
}

// decodedShape walks valid JSON with the decoder's tokens and returns its
// nesting depth and, when it is an object, its top-level arrays in order.
func decodedShape(t *testing.T, data []byte) (depth int, arrays []array) {
	type frame struct {
		object, wantKey bool
		n               int
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var stack []frame
	key := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return depth, arrays
		}
		if err != nil {
			t.Fatalf("decoder on valid %q: %v", data, err)
		}
		top := len(stack) - 1
		d, isDelim := tok.(json.Delim)
		switch {
		case isDelim && (d == '}' || d == ']'):
			if d == ']' && len(stack) == 2 && stack[0].object {
				arrays = append(arrays, array{key, stack[top].n})
			}
			stack = stack[:top]
			continue
		case top >= 0 && stack[top].wantKey:
			if top == 0 {
				key = tok.(string)
			}
			stack[top].wantKey = false
			continue
		case top >= 0 && stack[top].object:
			stack[top].wantKey = true
		case top >= 0:
			stack[top].n++
		}
		if isDelim {
			stack = append(stack, frame{object: d == '{', wantKey: d == '{'})
			depth = max(depth, len(stack))
		}
	}
}

// FuzzCount compares Count with the decoder on valid JSON: the depth it
// bounds is the decoder's nesting, and an array over its Max is reported
// with the decoder's count of its elements, its name matched exactly or
// folded as encoding/json folds a field's name. On any input it never
// panics.
func FuzzCount(f *testing.F) {
	for _, s := range append(countSeeds, seeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := jsonscan.Count(data, 64, jsonscan.Counted{Name: "messages", Max: 3}, jsonscan.Counted{Name: "input", FoldCase: true, Max: 3})
		if !json.Valid(data) {
			return
		}
		depth, arrays := decodedShape(t, data)
		if err := jsonscan.Count(data, depth); err != nil {
			t.Fatalf("Count(%q, %d) = %v, want nil: the decoder nests %d deep", data, depth, err, depth)
		}
		var de *jsonscan.DepthError
		if err := jsonscan.Count(data, depth-1); depth > 1 && !errors.As(err, &de) {
			t.Fatalf("Count(%q, %d) = %v, want a DepthError: the decoder nests %d deep", data, depth-1, err, depth)
		}
		if depth > 64 {
			if !errors.As(err, &de) {
				t.Fatalf("Count(%q, 64) = %v, want a DepthError", data, err)
			}
			return
		}
		if data[jsonscan.SkipSpace(data, 0)] != '{' {
			return
		}
		for _, a := range arrays {
			if a.n == 0 {
				continue
			}
			for _, fold := range []bool{false, true} {
				name := a.name
				if fold {
					name = strings.ToUpper(name)
				}
				checkCount(t, data, jsonscan.Counted{Name: name, FoldCase: fold, Max: a.n - 1}, arrays)
			}
		}
	})
}

// checkCount checks that Count refuses data for the first of arrays that
// c names and that holds more than c.Max elements.
func checkCount(t *testing.T, data []byte, c jsonscan.Counted, arrays []array) {
	t.Helper()
	want := -1
	for _, a := range arrays {
		named := a.name == c.Name || c.FoldCase && strings.EqualFold(a.name, c.Name)
		if named && a.n > c.Max {
			want = a.n
			break
		}
	}
	err := jsonscan.Count(data, 0, c)
	var ce *jsonscan.CountError
	switch {
	case want < 0 && err != nil:
		t.Fatalf("Count(%q, %+v) = %v, want nil", data, c, err)
	case want >= 0 && (!errors.As(err, &ce) || ce.Count != want || ce.Name != c.Name || ce.Max != c.Max):
		t.Fatalf("Count(%q, %+v) = %v, want %d elements of %q", data, c, err, want, c.Name)
	}
}

// TestCount: the shapes of the doors' requests, counted and bounded.
func TestCount(t *testing.T) {
	tests := []struct {
		name, body string
		arrays     []jsonscan.Counted
		want       error
	}{
		{"within", `{"messages":[1,2,3]}`, []jsonscan.Counted{{Name: "messages", Max: 3}}, nil},
		{"over", `{"messages":[1,2,3,4]}`, []jsonscan.Counted{{Name: "messages", Max: 3}}, &jsonscan.CountError{Name: "messages", Count: 4, Max: 3}},
		{"commas in strings", `{"messages":["a,b","c,d]"]}`, []jsonscan.Counted{{Name: "messages", Max: 1}}, &jsonscan.CountError{Name: "messages", Count: 2, Max: 1}},
		{"nested arrays are one element", `{"input":[[1,2,3],{"a":5}]}`, []jsonscan.Counted{{Name: "input", Max: 1}}, &jsonscan.CountError{Name: "input", Count: 2, Max: 1}},
		{"case is exact without FoldCase", `{"Messages":[1,2]}`, []jsonscan.Counted{{Name: "messages", Max: 1}}, nil},
		{"case folds with FoldCase", `{"INPUT":[1,2]}`, []jsonscan.Counted{{Name: "input", FoldCase: true, Max: 1}}, &jsonscan.CountError{Name: "input", Count: 2, Max: 1}},
		{"Unicode folding as encoding/json", `{"toolſ":[1,2]}`, []jsonscan.Counted{{Name: "tools", FoldCase: true, Max: 1}}, &jsonscan.CountError{Name: "tools", Count: 2, Max: 1}},
		{"escaped key", `{"too\u006cs":[1,2]}`, []jsonscan.Counted{{Name: "tools", Max: 1}}, &jsonscan.CountError{Name: "tools", Count: 2, Max: 1}},
		{"not at the top", `{"a":{"messages":[1,2]}}`, []jsonscan.Counted{{Name: "messages", Max: 1}}, nil},
		{"deep", `{"a":[[[1]]]}`, nil, &jsonscan.DepthError{Max: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := jsonscan.Count([]byte(tt.body), 3, tt.arrays...)
			if (got == nil) != (tt.want == nil) || got != nil && got.Error() != tt.want.Error() {
				t.Errorf("Count(%s) = %v, want %v", tt.body, got, tt.want)
			}
		})
	}
}
