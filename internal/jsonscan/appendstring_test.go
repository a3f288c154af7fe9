package jsonscan_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/phasegate/phasegate/internal/jsonscan"
)

// FuzzAppendString checks AppendString writes a string as encoding/json
// does, byte for byte: with html as json.Marshal, without as an Encoder
// with SetEscapeHTML(false).
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{
		"", "plain", `quote " and \ backslash`, "tab\tnew\nreturn\r", "\b\f\x00\x1f\x7f",
		"line\u2028para\u2029", "<b>&amp;</b>", "é ü 中 😀", "bad \xff\xfe utf-8", "\xe2\x80", "\xed\xa0\x80",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		marshalled, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonscan.AppendString(nil, s, true); !bytes.Equal(got, marshalled) {
			t.Errorf("AppendString(%q, html) = %s, json.Marshal writes %s", s, got, marshalled)
		}
		var encoded bytes.Buffer
		enc := json.NewEncoder(&encoded)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got := jsonscan.AppendString(nil, s, false); !bytes.Equal(got, bytes.TrimSuffix(encoded.Bytes(), []byte("\n"))) {
			t.Errorf("AppendString(%q) = %s, an Encoder without HTML escaping writes %s", s, got, encoded.Bytes())
		}
	})
}
