package jsonscan_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/phasegate/phasegate/internal/jsonscan"
)

// seeds are the shapes the gateway scans: upstream chunks and bodies
// (whitespace where upstreams put it, keys inside strings, escaped and
// folded keys, duplicates), request messages, tool-call arguments, and
// some truncated or broken ones.
var seeds = []string{
	`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`,
	`{"choices":[{"index":0,"delta":{},"finish_reason": "stop"}]}`,
	"{ \"choices\" : [ { \"finish_reason\"\t:\n\"length\" } ] , \"usage\" : { \"total_tokens\" : 3 } }",
	`{"choices":[{"delta":{"content":"say \"finish_reason\":\"stop\" and \\"}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]}}]}`,
	`{"choices":[{"delta":{"con\u0074ent":"x","content":"y"}}],"Finish_Reason":"stop","\u212aey":1}`,
	`{"error":{"message":"bad","type":"invalid_request_error"}}`,
	`{"choices":[],"usage":{"prompt_tokens":1},"phasegate":{"phase":"tools","phase_index":12}}`,
	`{"role":"assistant","content":null,"tool_calls":[],"role":"user"}`,
	`{"a":"\\","b":"\\\"","c":["]","}"],"d":{"e":{"f":[1,2.5e3,-0,true,false,null]}}}`,
	`[1,"a",{"k":"v"}]`, `"just a string"`, `123`, `  null  `, `{}`, `[]`,
	`{"a":`, `{"a":"unterminated`, `{"a":1}}`, `{"a" "b"}`, `"\"`, ``,
}

func addSeeds(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
}

// FuzzStringEnd compares StringEnd and StringClose with the decoder
// reading a string.
func FuzzStringEnd(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
		if i := strings.IndexByte(s, '"'); i >= 0 {
			f.Add([]byte(s[i:]))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 || data[0] != '"' {
			return
		}
		end, esc := jsonscan.StringEnd(data, 1)
		if c := jsonscan.StringClose(data, 1); c != end {
			t.Fatalf("StringClose(%q) = %d, StringEnd %d", data, c, end)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		tok, err := dec.Token()
		_, isString := tok.(string)
		switch {
		case err == nil && isString:
			if want := int(dec.InputOffset()) - 1; end != want {
				t.Fatalf("StringEnd(%q) = %d, the decoder's string ends at %d", data, end, want)
			}
			if want := bytes.IndexByte(data[1:end], '\\') >= 0; esc != want {
				t.Fatalf("StringEnd(%q) escaped = %v, want %v", data, esc, want)
			}
		case end >= 0 && json.Valid(data[:end+1]):
			t.Fatalf("StringEnd(%q) = %d, a valid string, but the decoder read none: %v", data, end, err)
		}
	})
}

// FuzzValueEnd compares ValueEnd with the decoder on a valid value, alone
// and followed by more bytes.
func FuzzValueEnd(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, suffix := range []string{"", ",", " ]", "}x"} {
			buf := append(bytes.Clone(data), suffix...)
			start := jsonscan.SkipSpace(buf, 0)
			got := jsonscan.ValueEnd(buf, start)
			if got > len(buf) || got >= 0 && got <= start {
				t.Fatalf("ValueEnd(%q, %d) = %d, out of range", buf, start, got)
			}
			if !json.Valid(data) {
				continue
			}
			want := len(bytes.TrimRight(data, " \t\r\n"))
			if got != want {
				t.Fatalf("ValueEnd(%q, %d) = %d, want %d", buf, start, got, want)
			}
		}
	})
}

// key is a key the decoder read, by name.
type key struct {
	name string
	// value is the value's first byte.
	value byte
}

// decodedKeys walks valid JSON with the decoder's tokens and returns
// every object key, at every depth, in order.
func decodedKeys(t *testing.T, data []byte) []key {
	type frame struct{ object, wantKey bool }
	dec := json.NewDecoder(bytes.NewReader(data))
	var keys []key
	var stack []frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return keys
		}
		if err != nil {
			t.Fatalf("decoder on valid %q: %v", data, err)
		}
		top := len(stack) - 1
		d, isDelim := tok.(json.Delim)
		switch {
		case isDelim && (d == '}' || d == ']'):
			stack = stack[:top]
			continue
		case top >= 0 && stack[top].wantKey:
			colon := jsonscan.SkipSpace(data, int(dec.InputOffset()))
			keys = append(keys, key{name: tok.(string), value: data[jsonscan.SkipSpace(data, colon+1)]})
			stack[top].wantKey = false
			continue
		case top >= 0 && stack[top].object:
			stack[top].wantKey = true // a value: a key follows
		}
		if isDelim {
			stack = append(stack, frame{object: d == '{', wantKey: d == '{'})
		}
	}
}

// FuzzKeys compares the keys Scan walks with the keys the decoder reads,
// and KeyIs with the decoder matching a key to struct fields.
func FuzzKeys(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var got []key
		for k := jsonscan.Scan(data); k.Next(); {
			v := k.Value()
			if v > len(data) {
				t.Fatalf("Value %d past the end of %q", v, data)
			}
			checkIs(t, k.Key())
			for _, name := range []string{"content", "finish_reason", "tool_calls", "k", "s"} {
				if k.Is(name) != jsonscan.KeyIs(k.Key(), bytes.IndexByte(k.Key(), '\\') >= 0, name) {
					t.Fatalf("Is(%q) on key %q disagrees with KeyIs", name, k.Key())
				}
			}
			if !json.Valid(data) {
				continue
			}
			var name string
			if err := json.Unmarshal(append(append([]byte{'"'}, k.Key()...), '"'), &name); err != nil {
				t.Fatalf("key %q of valid %q does not decode: %v", k.Key(), data, err)
			}
			got = append(got, key{name: name, value: data[v]})
			if e := jsonscan.ValueEnd(data, v); e < 0 || !json.Valid(data[v:e]) {
				t.Fatalf("value of key %q in %q: ValueEnd %d", k.Key(), data, e)
			}
		}
		if !json.Valid(data) {
			return
		}
		if want := decodedKeys(t, data); !reflect.DeepEqual(got, want) && (len(got) > 0 || len(want) > 0) {
			t.Fatalf("keys of %q:\n got  %q\n want %q", data, got, want)
		}
	})
}

// matched has a field for each name the gateway looks for; the decoder
// fills those a key names.
type matched struct {
	Content   *int `json:"content"`
	Finish    *int `json:"finish_reason"`
	ToolCalls *int `json:"tool_calls"`
	K         *int `json:"k"`
	S         *int `json:"s"`
}

// checkIs checks KeyIs on raw, a key's body, against the decoder.
func checkIs(t *testing.T, raw []byte) {
	obj := append(append([]byte{'{', '"'}, raw...), `":1}`...)
	var m matched
	if json.Unmarshal(obj, &m) != nil {
		return
	}
	esc := bytes.IndexByte(raw, '\\') >= 0
	for _, c := range []struct {
		name string
		set  bool
	}{{"content", m.Content != nil}, {"finish_reason", m.Finish != nil}, {"tool_calls", m.ToolCalls != nil}, {"k", m.K != nil}, {"s", m.S != nil}} {
		if got := jsonscan.KeyIs(raw, esc, c.name); got != c.set {
			t.Fatalf("KeyIs(%q, %q) = %v; the decoder says %v", raw, c.name, got, c.set)
		}
	}
}

// FuzzHasKey compares HasKey with the decoder's keys.
func FuzzHasKey(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s), "finish_reason")
		f.Add([]byte(s), "tool_calls")
	}
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		name = strings.ToLower(name) // the gateway's names are
		got := jsonscan.HasKey(data, name)
		if !json.Valid(data) || name == "" || !isASCII(name) || strings.IndexByte(name, '"') >= 0 || strings.IndexByte(name, '\\') >= 0 {
			return
		}
		want := slices.ContainsFunc(decodedKeys(t, data), func(k key) bool {
			return bytes.EqualFold([]byte(k.name), []byte(name))
		})
		if got != want {
			t.Fatalf("HasKey(%q, %q) = %v, want %v", data, name, got, want)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 || s[i] < 0x20 {
			return false
		}
	}
	return true
}

// FuzzStream feeds a buffer in fragments and compares Complete with the
// decoder's verdict on the whole.
func FuzzStream(f *testing.F) {
	for _, s := range seeds {
		f.Add(s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, data string, step uint8) {
		var s jsonscan.Stream
		n := int(step%16) + 1
		for i := 0; i < len(data); i += n {
			s.Feed(data[:min(i+n, len(data))], i)
		}
		b := []byte(data)
		first := jsonscan.SkipSpace(b, 0)
		want := json.Valid(b) && (b[first] == '{' || b[first] == '[' || b[first] == '"')
		if got := s.Complete(); got != want {
			t.Fatalf("Complete after %q in steps of %d = %v, want %v", data, n, got, want)
		}
	})
}

// FuzzSetField compares SetField with the decoder: the fields, their
// order, and the value set.
func FuzzSetField(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s), "role", []byte(`"tool"`))
		f.Add([]byte(s), "content", []byte(`{"x": [1, 2]}`))
	}
	f.Fuzz(func(t *testing.T, obj []byte, name string, val []byte) {
		if !json.Valid(val) || !utf8.ValidString(name) { // names are the gateway's own
			return
		}
		out, err := jsonscan.SetField(obj, name, val)
		var m map[string]json.RawMessage
		if json.Unmarshal(obj, &m) != nil || m == nil {
			if err == nil {
				t.Fatalf("SetField(%q) = %q, but it is not an object", obj, out)
			}
			return
		}
		if err != nil {
			t.Fatalf("SetField(%q, %q, %q): %v", obj, name, val, err)
		}
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("SetField(%q, %q, %q) = %q, not an object: %v", obj, name, val, out, err)
		}
		m[name] = val
		want, _ := json.Marshal(m)
		var wantAny map[string]any
		_ = json.Unmarshal(want, &wantAny)
		if !reflect.DeepEqual(got, wantAny) {
			t.Fatalf("SetField(%q, %q, %q) = %q, want the fields of %s", obj, name, val, out, want)
		}
		if gotOrder, wantOrder := topKeys(t, out), setOrder(topKeys(t, obj), name); !slices.Equal(gotOrder, wantOrder) {
			t.Fatalf("SetField(%q, %q) keys %q, want %q", obj, name, gotOrder, wantOrder)
		}
	})
}

// topKeys are the keys of a valid object, in order.
func topKeys(t *testing.T, obj []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(obj))
	_, _ = dec.Token()
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// setOrder is keys with later duplicates of name dropped, or name last.
func setOrder(keys []string, name string) []string {
	var out []string
	found := false
	for _, k := range keys {
		if k == name {
			if found {
				continue
			}
			found = true
		}
		out = append(out, k)
	}
	if !found {
		out = append(out, name)
	}
	return out
}

// FuzzFindKey compares the keys FindKey (and LastKey) finds with the keys the decoder
// reads spelled exactly so, on valid JSON without escapes (FindKey does
// not read escaped spellings).
func FuzzFindKey(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s), "finish_reason")
		f.Add([]byte(s), "phase_index")
	}
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		var got []byte
		last := -1
		for v := jsonscan.FindKey(data, name, 0); v >= 0; v = jsonscan.FindKey(data, name, v) {
			last = v
			if v > len(data) {
				t.Fatalf("FindKey(%q, %q) = %d, past the end", data, name, v)
			}
			if v == len(data) {
				break
			}
			got = append(got, data[v])
		}
		if l := jsonscan.LastKey(data, name); l != last {
			t.Fatalf("LastKey(%q, %q) = %d, the last FindKey %d", data, name, l, last)
		}
		checkStringValues(t, data, name)
		if !json.Valid(data) || bytes.IndexByte(data, '\\') >= 0 || name == "" || !isASCII(name) ||
			strings.ContainsAny(name, `"\`) {
			return
		}
		var want []byte
		for _, k := range decodedKeys(t, data) {
			if k.name == name {
				want = append(want, k.value)
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("FindKey(%q, %q) found values starting %q, the decoder %q", data, name, got, want)
		}
	})
}

// checkStringValues holds StringValues and HasString to the string values
// of FindKey's keys, read by the decoder.
func checkStringValues(t *testing.T, data []byte, name string) {
	t.Helper()
	var want []string
	for v := jsonscan.FindKey(data, name, 0); v >= 0 && v < len(data); v = jsonscan.FindKey(data, name, v) {
		if data[v] != '"' {
			continue
		}
		end := jsonscan.StringClose(data, v+1)
		if end < 0 {
			want = append(want, "<unclosed>")
			break
		}
		want = append(want, string(data[v+1:end]))
	}
	var got []string
	for body := range jsonscan.StringValues(data, name) {
		if body == nil {
			got = append(got, "<unclosed>")
			continue
		}
		got = append(got, string(body))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("StringValues(%q, %q) = %q, want %q", data, name, got, want)
	}
	if has := jsonscan.HasString(data, name); has != (len(want) > 0) {
		t.Fatalf("HasString(%q, %q) = %v, want %v", data, name, has, len(want) > 0)
	}
}

// FuzzTemplate holds Template.Read to encoding/json: learned from a chunk
// whose string body lies between a prefix and a suffix, it reads a chunk
// with the same prefix and suffix and any body exactly when the body is
// one JSON string's, as the decoder reads it (with Raw, invalid UTF-8 kept
// as its bytes where the decoder reads U+FFFD), and reads nothing from a
// chunk of another shape.
func FuzzTemplate(f *testing.F) {
	f.Add(`{"id":"c","choices":[{"index":0,"delta":{"content":"`, "Hello", `"},"finish_reason":null}]}`, "world", false)
	f.Add(`{"a":"`, "x", `"}`, `tab\there \"quoted\" \u00e9 \ud83d\ude00`, false)
	f.Add(`{"a":"`, "x", `"}`, "\xff\xfe", false)
	f.Add(`{"a":"`, "x", `"}`, "<\xef\xbd", true)
	f.Add(`{"a":"`, "x", `"}`, "\xff\\n", true)
	f.Add(`{"a":"`, "x", `"}`, `a"},"b":"c`, false)
	f.Add(`{"a":"`, "x", `"}`, "a\x01b", false)
	f.Add(`["`, "", `"]`, `\`, false)
	f.Fuzz(func(t *testing.T, prefix, learned, suffix, body string, raw bool) {
		if !strings.HasSuffix(prefix, `"`) || !strings.HasPrefix(suffix, `"`) {
			prefix, suffix = prefix+`"`, `"`+suffix
		}
		tpl := jsonscan.Template{Raw: raw}
		tpl.Learn([]byte(prefix+learned+suffix), len(prefix), len(prefix)+len(learned))
		if !tpl.Learned() {
			t.Fatalf("learned nothing from %q%q%q", prefix, learned, suffix)
		}
		got, ok := tpl.Read([]byte(prefix + body + suffix))
		var want string
		valid := json.Unmarshal([]byte(`"`+body+`"`), &want) == nil
		if ok != valid {
			t.Fatalf("body %q: Read = %q, %v; encoding/json: %q, valid %v", body, got, ok, want, valid)
		}
		if ok && got != want && !(raw && got == body && !utf8.ValidString(body) && jsonscan.Unescaped([]byte(body)) == want) {
			t.Fatalf("body %q: Read = %q; encoding/json: %q", body, got, want)
		}
		if other := []byte(prefix + body + suffix + " "); !strings.HasSuffix(suffix, " ") {
			if _, ok := tpl.Read(other); ok {
				t.Fatalf("read a chunk of another shape: %q", other)
			}
		}
	})
}
