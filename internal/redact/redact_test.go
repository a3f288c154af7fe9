package redact

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	skKey    = "sk-live-0123456789abcdefABCDEF"
	gskKey   = "gsk_Zq81LmNoPq23RsTuVw45XyZa"
	bareKey  = "Q2xhc3NpY2FsbHkgYmFyZSBrZXk"
	oddKey   = "p<w>d&+/-x\"y'0123456789"
	shortKey = "pw12"
)

// unicodeEscaped writes every character of s that is not a letter or a
// digit as \uXXXX, with hex digits in the case asked.
func unicodeEscaped(s string, upper bool) string {
	var b strings.Builder
	for _, c := range s {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
			continue
		}
		h := "0123456789abcdef"
		if upper {
			h = "0123456789ABCDEF"
		}
		b.WriteString(`\u00` + string(h[c>>4]) + string(h[c&15]))
	}
	return b.String()
}

func jsonEscaped(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

func TestRedactorFindsEverySpelling(t *testing.T) {
	t.Parallel()
	r := New(skKey, gskKey, bareKey, oddKey, shortKey, "")
	tests := []struct {
		name, in string
	}{
		{name: "sk key as it is", in: "Incorrect API key provided: " + skKey + "."},
		{name: "gsk key as it is", in: "key=" + gskKey},
		{name: "bare key as it is", in: `{"error":{"message":"bad key ` + bareKey + `"}}`},
		{name: "key with JSON-special characters as it is", in: "got " + oddKey},
		{name: "short key", in: "password " + shortKey},
		{name: "encoding/json escaping", in: `{"message":"` + jsonEscaped(oddKey) + `"}`},
		{name: "every non-alphanumeric as \\u, lower case", in: unicodeEscaped(skKey, false)},
		{name: "every non-alphanumeric as \\u, upper case", in: unicodeEscaped(gskKey, true)},
		{name: "odd key, every non-alphanumeric as \\u", in: unicodeEscaped(oddKey, false)},
		{name: "escaped twice", in: strings.ReplaceAll(unicodeEscaped(oddKey, false), `\`, `\\`)},
		{name: "first letter escaped", in: `\u0073` + skKey[1:]},
		{name: "slash escaped", in: strings.ReplaceAll(oddKey, "/", `\/`)},
		{name: "prefix stripped", in: "key ending " + strings.TrimPrefix(skKey, "sk-")},
		{name: "both prefixes stripped", in: "key ending " + strings.TrimPrefix(skKey, "sk-live-")},
		{name: "gsk prefix stripped", in: "key " + strings.TrimPrefix(gskKey, "gsk_")},
		{name: "percent-encoded", in: "GET /x?key=p%3Cw%3Ed%26%2B%2F-x%22y%270123456789"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := r.String(tt.in)
			if !strings.Contains(got, Marker) {
				t.Errorf("String(%q) = %q, want a %s", tt.in, got, Marker)
			}
			for _, bit := range []string{"0123456789", "Zq81LmNoPq23", "Q2xhc3NpY2Fs", shortKey} {
				if strings.Contains(got, bit) {
					t.Errorf("String(%q) = %q: still holds %q", tt.in, got, bit)
				}
			}
			if b := r.Bytes([]byte(tt.in)); string(b) != got {
				t.Errorf("Bytes = %q, String = %q", b, got)
			}
		})
	}
}

func TestRedactorKeepsJSONValid(t *testing.T) {
	t.Parallel()
	r := New(oddKey, skKey)
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"message": "key " + oddKey + " and " + skKey, "code": "invalid_api_key"}})
	got := r.Bytes(body)
	var v struct {
		Error struct{ Message, Code string }
	}
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatalf("redacted body %s is not JSON: %v", got, err)
	}
	if want := "key " + Marker + " and " + Marker; v.Error.Message != want || v.Error.Code != "invalid_api_key" {
		t.Errorf("message %q code %q, want %q invalid_api_key", v.Error.Message, v.Error.Code, want)
	}
}

func TestRedactorLeavesOtherTextAlone(t *testing.T) {
	t.Parallel()
	r := New(skKey, gskKey)
	for _, in := range []string{
		"", "plain text with sk- and gsk_ but no key", `{"a":"\u0041\\n"}`,
		gskKey[:len(gskKey)-1] + "!", // one character short
		"live-0123",                  // a stripped rest too short to look for
	} {
		if got := r.String(in); got != in {
			t.Errorf("String(%q) = %q, want it unchanged", in, got)
		}
		b := []byte(in)
		if got := r.Bytes(b); len(b) > 0 && &got[0] != &b[0] {
			t.Errorf("Bytes(%q) copied a text it left unchanged", in)
		}
	}
}

func TestNilRedactorAppliesPatterns(t *testing.T) {
	t.Parallel()
	var r *Redactor
	got := r.String("key sk-abcdefgh12345 and Authorization: Bearer tok.en/x=")
	if want := "key " + Marker + " and Authorization: Bearer " + Marker; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestHandlerRedactsValues(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewJSONHandler(&buf, nil), New(gskKey)))
	log.With("k", gskKey).WithGroup("g").Warn("failed with "+gskKey, "err", errString("upstream said "+jsonEscaped(gskKey)),
		slog.Group("inner", "v", strings.TrimPrefix(gskKey, "gsk_")))
	if strings.Contains(buf.String(), "Zq81") || strings.Count(buf.String(), Marker) != 4 {
		t.Errorf("log line %s: want the key redacted four times", buf.String())
	}
}

// TestHandlerRedactsOtherValues: a struct, a map, a header or bytes that
// hold a secret are logged redacted, and the line stays JSON; a value
// that holds none is logged as it is.
func TestHandlerRedactsOtherValues(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewJSONHandler(&buf, nil), New(gskKey, oddKey)))
	type request struct {
		Header map[string][]string
		Note   string
	}
	log.Error("panic serving request",
		"value", request{Header: map[string][]string{"Authorization": {"Bearer " + gskKey}}, Note: "x"},
		"map", map[string]any{"key": oddKey},
		"bytes", []byte("body "+gskKey),
		"chan", make(chan int), // no JSON: its fmt text, which holds nothing
		"plain", request{Note: "nothing secret"})
	line := buf.String()
	if strings.Contains(line, "Zq81") || strings.Contains(line, "0123456789") {
		t.Errorf("log line %s holds a key", line)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("log line %s is not JSON: %v", line, err)
	}
	if plain, _ := rec["plain"].(map[string]any); plain == nil || plain["Note"] != "nothing secret" {
		t.Errorf("plain = %v, want the struct as it is", rec["plain"])
	}
	if v, _ := rec["value"].(map[string]any); v == nil || !strings.Contains(line, Marker) {
		t.Errorf("value = %v, want the struct as JSON, its key redacted", rec["value"])
	}
}

func TestHandlerTakesSecretsOverPatterns(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	patterns := Handler(slog.NewJSONHandler(&buf, nil), nil)
	if Handler(patterns, nil) != patterns {
		t.Error("a handler that applies the patterns was wrapped again")
	}
	values := Handler(patterns, New(bareKey))
	if Handler(values, New(gskKey)) != values {
		t.Error("a handler that redacts values was replaced")
	}
	slog.New(values).Info(bareKey)
	if strings.Contains(buf.String(), bareKey) {
		t.Errorf("log line %s holds the key", buf.String())
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// BenchmarkRedactor measures the redaction of an upstream error body of
// 1 KiB, with and without a key in it, with five secrets configured.
func BenchmarkRedactor(b *testing.B) {
	r := New(skKey, gskKey, bareKey, oddKey, "redis-password-0123456789")
	filler := strings.Repeat(`{"error":{"message":"The model \u0060x\u0060 does not exist","type":"invalid_request_error"}} `, 11)[:1000]
	for _, tt := range []struct{ name, in string }{
		{"clean_1KiB", filler},
		{"key_1KiB", filler[:500] + jsonEscaped(oddKey) + filler[500+len(jsonEscaped(oddKey)):]},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.SetBytes(int64(len(tt.in)))
			b.ReportAllocs()
			for b.Loop() {
				_ = r.String(tt.in)
			}
		})
	}
}

// TestRedactorEncodings: a configured secret written back base64-encoded
// (standard or URL alphabet, padded or not, alone or inside a longer
// base64 text at each of the three alignments of its bytes, JSON-escaped
// too) or percent-encoded byte by byte (hex digits upper or lower case)
// is redacted; nothing of its encoding that depends on the secret alone
// is left. Before, only the secret, its JSON escapes and the escapes of
// url.QueryEscape and url.PathEscape were found.
func TestRedactorEncodings(t *testing.T) {
	t.Parallel()
	r := New(skKey, oddKey)
	perByte := func(s, digits string) string {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			b.WriteString("%" + string(digits[s[i]>>4]) + string(digits[s[i]&15]))
		}
		return b.String()
	}
	type spelling struct{ name, in, secret string }
	var tests []spelling
	for _, key := range []string{skKey, oddKey} {
		for _, enc := range []struct {
			name string
			e    *base64.Encoding
		}{{"std", base64.StdEncoding}, {"url", base64.URLEncoding}, {"raw std", base64.RawStdEncoding}, {"raw url", base64.RawURLEncoding}} {
			for _, before := range []string{"", "u", "us", "user:"} {
				tests = append(tests, spelling{"base64 " + enc.name + " after " + strconv.Quote(before), enc.e.EncodeToString([]byte(before + key + "!")), key})
			}
		}
		tests = append(tests,
			spelling{"base64 in a JSON string", jsonEscaped(`{"auth":"Basic ` + base64.StdEncoding.EncodeToString([]byte("user:"+key)) + `"}`), key},
			spelling{"percent-encoded byte by byte, upper case", "q=" + perByte(key, "0123456789ABCDEF"), key},
			spelling{"percent-encoded byte by byte, lower case", "q=" + perByte(key, "0123456789abcdef") + "&x=1", key})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := r.String(tt.in)
			if !strings.Contains(got, Marker) {
				t.Fatalf("String(%q) = %q, want a %s", tt.in, got, Marker)
			}
			for _, form := range encoded(tt.secret) {
				if strings.Contains(got, form) {
					t.Errorf("String(%q) = %q: still holds %q", tt.in, got, form)
				}
			}
			// What is left decodes to nothing that holds the secret's
			// middle.
			middle := tt.secret[4 : len(tt.secret)-4]
			for _, e := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
				if d, err := e.DecodeString(got); err == nil && strings.Contains(string(d), middle) {
					t.Errorf("String(%q) = %q decodes to the secret", tt.in, got)
				}
			}
		})
	}
}

type secretValuer struct{}

func (secretValuer) LogValue() slog.Value { return slog.StringValue("token " + gskKey) }

// turningValuer says nothing secret the first time it is asked, and a key
// every time after.
type turningValuer struct{ asked *int }

func (v turningValuer) LogValue() slog.Value {
	*v.asked++
	if *v.asked == 1 {
		return slog.StringValue("fine")
	}
	return slog.StringValue("token " + gskKey)
}

// TestHandlerResolvesLogValuersOnce: a LogValuer is asked once, by the
// redactor, and the line carries what it redacted; a handler after it
// that asked again could write what the redactor never saw.
func TestHandlerResolvesLogValuersOnce(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	asked := 0
	slog.New(Handler(slog.NewJSONHandler(&buf, nil), New(gskKey))).Info("m", "v", turningValuer{&asked})
	if strings.Contains(buf.String(), "Zq81") || !strings.Contains(buf.String(), `"v":"fine"`) || asked != 1 {
		t.Errorf("log line %s after %d calls of LogValue: want the value resolved once, as \"fine\"", buf.String(), asked)
	}
}

type discard struct{ slog.Handler }

func (discard) Handle(context.Context, slog.Record) error { return nil }

// TestHandlerPassesCleanRecords: a record with nothing to redact goes on
// as it is, so the redactor adds no allocation to a line (a copy of a
// record of more than five attributes allocates); one with a secret is
// copied.
func TestHandlerPassesCleanRecords(t *testing.T) {
	h := Handler(discard{slog.DiscardHandler}, New(gskKey))
	rec := func(v string) slog.Record {
		r := slog.NewRecord(time.Now(), slog.LevelInfo, "request served", 0)
		r.AddAttrs(slog.String("event", "orchestration_phase_end"), slog.String("request_id", "pg-4a81b4be332f189ac4f0637d"),
			slog.String("phase", "action_phase"), slog.Int("phase_index", 1), slog.Int("cycle_index", 0), slog.String("reason", v))
		return r
	}
	clean, secret := rec("finish: stop"), rec("upstream said "+gskKey)
	if n := testing.AllocsPerRun(100, func() { _ = h.Handle(context.Background(), clean) }); n != 0 {
		t.Errorf("a record with nothing to redact: %v allocations, want 0 (passed on as it is)", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = h.Handle(context.Background(), secret) }); n == 0 {
		t.Errorf("a record with a key: no allocation, want a redacted copy")
	}
}

// TestHandlerRedactsOneAttrAmongMany: a record is passed on as it is only
// when nothing in it is redacted; one secret anywhere among many plain
// attributes (a string, an error, a group member, a LogValuer, the last
// of ten) is redacted, and a record without one is written as the plain
// handler writes it.
func TestHandlerRedactsOneAttrAmongMany(t *testing.T) {
	t.Parallel()
	plain := []any{"a", 1, "b", "two", "c", 3.5, "d", "four", "e", 5, "f", "six", "g", 7, "h", "eight", "i", 9}
	secrets := map[string][]any{
		"string":     {"s", gskKey},
		"error":      {"s", errString("failed: " + gskKey)},
		"group":      {slog.Group("s", "x", 1, "y", gskKey)},
		"log valuer": {"s", secretValuer{}},
	}
	for name, secret := range secrets {
		for _, at := range []int{0, 6, len(plain)} {
			args := append(append(append([]any{}, plain[:at]...), secret...), plain[at:]...)
			var buf bytes.Buffer
			slog.New(Handler(slog.NewJSONHandler(&buf, nil), New(gskKey))).Info("m", args...)
			if strings.Contains(buf.String(), "Zq81") || !strings.Contains(buf.String(), Marker) {
				t.Errorf("%s at %d: log line %s, want the key redacted", name, at, buf.String())
			}
			if !strings.Contains(buf.String(), `"i":9`) || !strings.Contains(buf.String(), `"a":1`) {
				t.Errorf("%s at %d: log line %s lost a plain attribute", name, at, buf.String())
			}
		}
	}
	var got, want bytes.Buffer
	fixed := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	slog.New(Handler(slog.NewJSONHandler(&got, &slog.HandlerOptions{ReplaceAttr: fixed}), New(gskKey))).Info("m", plain...)
	slog.New(slog.NewJSONHandler(&want, &slog.HandlerOptions{ReplaceAttr: fixed})).Info("m", plain...)
	if got.String() != want.String() {
		t.Errorf("a record without a secret:\n got %s\nwant %s", got.String(), want.String())
	}
}
