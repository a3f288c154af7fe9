package messages

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzAppendString checks appendString writes a string as encoding/json
// does with HTML escaping off, byte for byte.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{
		"", "plain", `quote " and \ backslash`, "tab\tnew\nreturn\r", "\b\f\x00\x1f\x7f",
		"line\u2028para\u2029", "<b>&amp;</b>", "é ü 中 😀", "bad \xff\xfe utf-8", "\xe2\x80", "\xed\xa0\x80",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got := appendString(nil, s); !bytes.Equal(got, bytes.TrimSuffix(want.Bytes(), []byte("\n"))) {
			t.Errorf("appendString(%q) = %s, encoding/json writes %s", s, got, want.Bytes())
		}
	})
}
