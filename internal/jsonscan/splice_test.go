package jsonscan_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/internal/jsonscan"
)

// named is what encoding/json reads of the members Find, Splice and
// MayName are asked about: matched without regard to case, the last of a
// name given twice.
type named struct {
	ID      json.RawMessage `json:"id"`
	Created json.RawMessage `json:"created"`
	Model   json.RawMessage `json:"model"`
	Tokens  json.RawMessage `json:"tokens"` // a name that the long s may spell
	Task    json.RawMessage `json:"task"`   // and one the Kelvin sign may
}

var names = []string{"id", "created", "model", "tokens", "task"}

func (n *named) field(i int) json.RawMessage {
	return [...]json.RawMessage{n.ID, n.Created, n.Model, n.Tokens, n.Task}[i]
}

var chunkSeeds = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`,
	`{ "id" : "a" , "created":7,"model":"m-1","choices":[],"x":{"id":"keep"}}`,
	`{"\u0069d":"a","created":7,"model":"m","choices":[{"delta":{"content":"\"id\":\"x\""}}],"ID":"b","Model":null}`,
	`{"id":"a","model":"m","created":7,"choices":[],"taſk":1,"tas\u212a":2,"TOKENS":3}`,
	`{"id":"a","choices":[]}`, `{}`, ` { } `, `{"a":{}}`, `[]`, `"x"`, `{"a":`, `{"id":"a","created":0}}`,
}

// FuzzSplice holds Find and Splice to encoding/json: Find takes exactly
// the objects json.Valid takes and finds the values the decoder reads for
// each name; the object Splice makes is valid, reads the new values and
// the extension where they were set, and keeps every other member.
func FuzzSplice(f *testing.F) {
	for _, s := range chunkSeeds {
		f.Add([]byte(s), []byte(`{"phase":"action_phase","phase_index":1}`), uint8(5))
	}
	f.Fuzz(func(t *testing.T, data, ext []byte, set uint8) {
		spans, ok := jsonscan.Find(nil, data, names...)
		trimmed := bytes.TrimSpace(data)
		if want := json.Valid(data) && len(trimmed) > 0 && trimmed[0] == '{'; ok != want {
			t.Fatalf("Find(%q) ok = %v, want %v", data, ok, want)
		}
		if !ok {
			return
		}
		var in named
		if err := json.Unmarshal(data, &in); err != nil {
			return // a value of a name's member the decoder cannot hold: not a chunk's
		}
		vals := make([][]byte, len(names))
		last := make([]json.RawMessage, len(names))
		for _, s := range spans {
			last[s.Name] = data[s.Start:s.End]
			if data[s.Key] != '"' {
				t.Fatalf("span %+v of %q: no key at %d", s, data, s.Key)
			}
		}
		for i := range names {
			if !bytes.Equal(last[i], in.field(i)) {
				t.Fatalf("Find(%q) %s = %q, the decoder reads %q", data, names[i], last[i], in.field(i))
			}
			if set&(1<<i) != 0 {
				vals[i] = []byte(`"v` + names[i] + `"`)
			}
		}
		if !json.Valid(ext) {
			ext = nil
		}
		out := jsonscan.Splice(nil, data, spans, vals, "phasegate", ext)
		checkSpliced(t, data, out, in, vals, ext)
	})
}

// checkSpliced checks what Splice made of data.
func checkSpliced(t *testing.T, data, out []byte, in named, vals [][]byte, ext []byte) {
	t.Helper()
	var got named
	var gotExt struct {
		Phasegate json.RawMessage `json:"phasegate"`
	}
	if err := json.Unmarshal(out, &got); err != nil || json.Unmarshal(out, &gotExt) != nil {
		t.Fatalf("Splice(%q) = %q, not an object: %v", data, out, err)
	}
	for i := range names {
		want := in.field(i)
		if vals[i] != nil && want != nil {
			want = vals[i]
		}
		if !bytes.Equal(got.field(i), want) {
			t.Fatalf("Splice(%q) = %q: %s reads %q, want %q", data, out, names[i], got.field(i), want)
		}
	}
	if ext != nil && !bytes.Equal(gotExt.Phasegate, bytes.TrimSpace(ext)) {
		t.Fatalf("Splice(%q) = %q: the extension reads %q, want %q", data, out, gotExt.Phasegate, ext)
	}
	var before, after map[string]json.RawMessage
	if json.Unmarshal(data, &before) != nil || json.Unmarshal(out, &after) != nil {
		return
	}
	for k, v := range before {
		if isNamed(k) || (ext != nil && strings.EqualFold(k, "phasegate")) {
			continue
		}
		if !bytes.Equal(after[k], v) {
			t.Fatalf("Splice(%q) = %q: member %q is %q, was %q", data, out, k, after[k], v)
		}
	}
}

func isNamed(k string) bool {
	for _, n := range append(names, "phasegate") {
		if jsonscan.KeyIs([]byte(k), false, n) {
			return true
		}
	}
	return false
}

// FuzzHead holds a Head and MayName to encoding/json: a chunk b that
// starts with the head another chunk a taught, and whose rest MayName
// clears, reads for each name what the head holds; its rest walks from
// the head's end (Walker.Members) to the verdict json.Valid gives the
// whole.
func FuzzHead(f *testing.F) {
	for _, a := range chunkSeeds {
		for _, b := range chunkSeeds[:4] {
			f.Add([]byte(a), []byte(b), uint8(3))
		}
	}
	f.Fuzz(func(t *testing.T, a, b []byte, cut uint8) {
		var starts []int
		w := jsonscan.Walk(a)
		if w.Peek() != '{' {
			return
		}
		w.Object(func([]byte) { starts = append(starts, w.MemberStart()); w.Value() })
		if w.End(); w.Err() != nil || len(starts) == 0 {
			return
		}
		var h jsonscan.Head
		end := starts[int(cut)%len(starts)]
		h.Learn(a, end)
		if h.Len() == 0 {
			if bytes.IndexByte(a[:end], ':') >= 0 {
				t.Fatalf("the head %q of %q was not learned", a[:end], a)
			}
			return
		}
		n := h.Of(b)
		if n == 0 {
			if bytes.HasPrefix(b, a[:end]) {
				t.Fatalf("Of(%q) = 0, but it starts with the head %q", b, a[:end])
			}
			return
		}
		w = jsonscan.Walk(b)
		w.Members(n, func([]byte) { w.Value() })
		w.End()
		if valid := json.Valid(b); (w.Err() == nil) != valid {
			t.Fatalf("the rest of %q after the head walks to %v, json.Valid says %v", b, w.Err(), valid)
		}
		if w.Err() != nil || jsonscan.MayName(b[n:], names...) {
			return
		}
		head := append(bytes.TrimRight(bytes.TrimSpace(bytes.Clone(b[:n])), ", \t\r\n"), '}')
		var whole, part named
		if json.Unmarshal(b, &whole) != nil || json.Unmarshal(head, &part) != nil {
			return
		}
		for i := range names {
			if !bytes.Equal(whole.field(i), part.field(i)) {
				t.Fatalf("MayName(%q) = false, but %s reads %q in the chunk, %q in its head", b[n:], names[i], whole.field(i), part.field(i))
			}
		}
	})
}

func TestSplice(t *testing.T) {
	for _, tc := range []struct {
		name, data, ext, want string
	}{
		{"members", `{"id":"a","created":0,"choices":[]}`, `{"p":1}`, `{"id":"X","created":0,"choices":[],"phasegate":{"p":1}}`},
		{"empty", ` { } `, `1`, ` { "phasegate":1} `},
		{"no extension", `{"ID":"a"}`, ``, `{"ID":"X"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans, ok := jsonscan.Find(nil, []byte(tc.data), "id")
			if !ok {
				t.Fatalf("Find(%q) not ok", tc.data)
			}
			var ext []byte
			if tc.ext != "" {
				ext = []byte(tc.ext)
			}
			if got := string(jsonscan.Splice(nil, []byte(tc.data), spans, [][]byte{[]byte(`"X"`)}, "phasegate", ext)); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestMayName(t *testing.T) {
	for _, tc := range []struct {
		rest string
		want bool
	}{
		{`"choices":[{"delta":{"content":"hello"}}]}`, false},
		{`"choices":[],"Model":"x"}`, true},
		{`"choices":[],"mo\u0064el":"x"}`, true},
		{`"choices":[{"delta":{"content":"caf\u00e9"}}]}`, false},
		{`"choices":[],"taſk":1}`, true},
		{`"choices":[],"tas` + "\u212a" + `":1}`, true},
		{`"choices":[],"x":"model"}`, true}, // a value: it may say yes
	} {
		if got := jsonscan.MayName([]byte(tc.rest), names...); got != tc.want {
			t.Errorf("MayName(%s) = %v, want %v", tc.rest, got, tc.want)
		}
	}
}
