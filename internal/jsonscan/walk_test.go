package jsonscan_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/internal/jsonscan"
)

// walked is what a walk read: the decoder's tokens, the keys as written,
// the starts of the top-level members.
type walked struct {
	tokens  []any
	rawKeys [][]byte
	top     []int
}

// walkValue reads any value with w, as a caller that takes any value
// does, and records it in out as the decoder's tokens: keys and scalars
// decoded from the raw bytes the walk returned.
func walkValue(t *testing.T, w *jsonscan.Walker, data []byte, depth int, out *walked) {
	switch w.Peek() {
	case '{':
		out.tokens = append(out.tokens, json.Delim('{'))
		w.Object(func(key []byte) {
			m := w.MemberStart()
			if !bytes.HasPrefix(data[m:], append(append([]byte{'"'}, key...), '"')) {
				t.Fatalf("MemberStart %d of key %q in %q", m, key, data)
			}
			if depth == 0 {
				out.top = append(out.top, m)
			}
			var s string
			if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &s) == nil {
				out.tokens = append(out.tokens, s)
			}
			out.rawKeys = append(out.rawKeys, key)
			walkValue(t, w, data, depth+1, out)
		})
		out.tokens = append(out.tokens, json.Delim('}'))
	case '[':
		out.tokens = append(out.tokens, json.Delim('['))
		w.Array(func() { walkValue(t, w, data, depth+1, out) })
		out.tokens = append(out.tokens, json.Delim(']'))
	default:
		raw := w.Value()
		if raw == nil {
			return
		}
		if tok, err := scalar(raw); err == nil {
			out.tokens = append(out.tokens, tok)
		}
	}
}

// scalar is the decoder's token for raw, a whole scalar.
func scalar(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err == nil && dec.InputOffset() != int64(len(raw)) {
		err = errors.New("more than one token")
	}
	return tok, err
}

// decodedTokens are the decoder's tokens of valid data.
func decodedTokens(t *testing.T, data []byte) []any {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var toks []any
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return toks
		}
		if err != nil {
			t.Fatalf("decoder on valid %q: %v", data, err)
		}
		toks = append(toks, tok)
	}
}

// FuzzWalker compares a Walker with encoding/json: it accepts what
// json.Valid accepts, reads the keys and values the decoder reads, in
// order, notes an escaped key when there is one, and resumes an object
// at a member's start where a whole walk would have gone on.
func FuzzWalker(f *testing.F) {
	addSeeds(f)
	for _, s := range []string{
		`{"a" : [ 1 , -0.5e+3 , "x\u00e9\n" ] , "b":{} , "c":[]}`, `[01]`, `[1.]`, `[-]`, `[1e]`, `["\u12g4"]`,
		`["\x"]`, "[\"\x01\"]", `{"a":1,}`, `[1,]`, `{"a"}`, `{,}`, `[tru]`, `[nulll]`, `{"k\"ey":1}`, `[1 2]`,
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		strings.Repeat(`{"a":`, 10000) + "{}" + strings.Repeat("}", 10000),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		w := jsonscan.Walk(data)
		var got walked
		walkValue(t, &w, data, 0, &got)
		w.End()
		valid := json.Valid(data)
		if (w.Err() == nil) != valid {
			t.Fatalf("walk of %q: err %v; json.Valid says %v", data, w.Err(), valid)
		}
		if !valid {
			return
		}
		if want := decodedTokens(t, data); !reflect.DeepEqual(got.tokens, want) {
			t.Fatalf("walk of %q read\n %#v\nthe decoder\n %#v", data, got.tokens, want)
		}
		escaped := false
		for _, k := range got.rawKeys {
			escaped = escaped || bytes.IndexByte(k, '\\') >= 0
		}
		if w.EscapedKey() != escaped {
			t.Fatalf("walk of %q: EscapedKey %v, want %v", data, w.EscapedKey(), escaped)
		}
		checkMembers(t, data, got)
	})
}

// checkMembers resumes the walk of a valid object at each of its
// top-level members and checks it reads the keys a whole walk read from
// there on.
func checkMembers(t *testing.T, data []byte, whole walked) {
	for n, at := range whole.top {
		w := jsonscan.Walk(data)
		var keys []string
		w.Members(at, func(key []byte) {
			keys = append(keys, string(key))
			w.Value()
		})
		w.End()
		if w.Err() != nil {
			t.Fatalf("Members(%d) of %q: %v", at, data, w.Err())
		}
		var want []string
		for _, m := range whole.top[n:] {
			want = append(want, string(topKey(data, m)))
		}
		if !reflect.DeepEqual(keys, want) {
			t.Fatalf("Members(%d) of %q read keys %q, want %q", at, data, keys, want)
		}
	}
}

// topKey is the body of the key whose opening quote is at data[m].
func topKey(data []byte, m int) []byte {
	end, _ := jsonscan.StringEnd(data, m+1)
	return data[m+1 : end]
}

// TestWalkValuesNeverWriteThrough: the values and keys the walker returns
// share the walked bytes but end their capacity with them, so appending
// to one leaves the walked bytes as they were (they may be an upstream
// event's, which no reader writes).
func TestWalkValuesNeverWriteThrough(t *testing.T) {
	data := []byte(`{"a":"x","b":[1,2],"c":{"d":true},"e":12}`)
	orig := string(data)
	var got [][]byte
	w := jsonscan.Walk(data)
	w.Object(func(key []byte) {
		got = append(got, key, w.Value())
	})
	w.End()
	if w.Err() != nil || len(got) != 8 {
		t.Fatalf("walk: %v, %d pieces", w.Err(), len(got))
	}
	for _, v := range got {
		_ = append(v, '!') // one byte: a slice with any room left writes it in place
	}
	if string(data) != orig {
		t.Fatalf("appending to a returned value wrote into the walked bytes: %s", data)
	}
}
