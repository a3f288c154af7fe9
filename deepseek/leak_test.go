package deepseek

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// updateGolden rewrites the golden files of the package's tests: go test
// ./tools/ -run TestLeakScannerGolden -update
var updateGolden = flag.Bool("update", false, "rewrite golden files")

// leakResult is what a scanner made of one content: the text it passed,
// the calls it found, in order, and whether it saw a marker.
type leakResult struct {
	Text   string     `json:"text"`
	Leaked bool       `json:"leaked"`
	Calls  []leakCall `json:"calls"`
}

// equal reports whether r and o are the same result, field by field.
func (r leakResult) equal(o leakResult) bool {
	return r.Text == o.Text && r.Leaked == o.Leaked && slices.Equal(r.Calls, o.Calls)
}

type leakCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Malformed bool   `json:"malformed,omitempty"`
	Raw       string `json:"raw"`
}

// scan feeds the pieces to a new scanner, flushes it and checks the
// invariants every output must hold.
func scanLeak(t testing.TB, pieces ...string) leakResult {
	t.Helper()
	var s LeakScanner
	var r leakResult
	var text strings.Builder
	add := func(out string, calls []LeakedCall) {
		text.WriteString(out)
		for _, c := range calls {
			if c.Err != nil && !errors.Is(c.Err, ErrLeakMalformed) {
				t.Fatalf("call error %v does not wrap ErrLeakMalformed", c.Err)
			}
			if c.Call.ID != "" || c.Call.Type != "function" {
				t.Fatalf("call id %q type %q: want no id and type function", c.Call.ID, c.Call.Type)
			}
			if c.Err == nil && !json.Valid([]byte(c.Call.Function.Arguments)) {
				t.Fatalf("recovered call with arguments that are not JSON: %q", c.Call.Function.Arguments)
			}
			r.Calls = append(r.Calls, leakCall{
				Name:      c.Call.Function.Name,
				Arguments: c.Call.Function.Arguments,
				Malformed: c.Err != nil,
				Raw:       c.Raw,
			})
		}
	}
	for _, p := range pieces {
		out, calls := s.Feed(p)
		add(out, calls)
		if s.in == blockNone && len(s.held) >= maxOpenerLen {
			t.Fatalf("holding %d bytes %q outside a block: want fewer than %d", len(s.held), s.held, maxOpenerLen)
		}
	}
	add(s.Flush())
	r.Text = text.String()
	r.Leaked = s.Leaked()
	return r
}

func readLeakInputs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "leak", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/leak/*.txt inputs")
	}
	return files
}

func marshalGolden(t *testing.T, r leakResult) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestLeakScannerGolden scans each testdata/leak/*.txt content whole and
// compares with its .golden file.
func TestLeakScannerGolden(t *testing.T) {
	for _, in := range readLeakInputs(t) {
		name := strings.TrimSuffix(filepath.Base(in), ".txt")
		t.Run(name, func(t *testing.T) {
			content, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			got := marshalGolden(t, scanLeak(t, string(content)))
			golden := strings.TrimSuffix(in, ".txt") + ".golden"
			if *updateGolden {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", golden, diff)
			}
		})
	}
}

// TestLeakScannerSplits feeds each testdata content in pieces split at
// every byte (even inside a UTF-8 sequence), at every pair of bytes for
// the short ones, and byte by byte: the result must equal the whole feed.
// Byte-by-byte feeding also orders text and calls exactly, so text and
// Raws, in order, must make up the content.
func TestLeakScannerSplits(t *testing.T) {
	for _, in := range readLeakInputs(t) {
		name := strings.TrimSuffix(filepath.Base(in), ".txt")
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			content := string(b)
			want := scanLeak(t, content)
			// Compared with ==, and diffed only when they differ: the
			// tens of thousands of splits below made cmp.Diff the bulk of
			// this package's test time.
			for i := 0; i <= len(content); i++ {
				if got := scanLeak(t, content[:i], content[i:]); !got.equal(want) {
					t.Fatalf("split at %d (-whole +split):\n%s", i, cmp.Diff(want, got))
				}
			}
			if len(content) <= 300 {
				for i := 0; i <= len(content); i++ {
					for j := i; j <= len(content); j++ {
						if got := scanLeak(t, content[:i], content[i:j], content[j:]); !got.equal(want) {
							t.Fatalf("split at %d and %d (-whole +split):\n%s", i, j, cmp.Diff(want, got))
						}
					}
				}
			}
			if got := feedBytes(t, content); got != content {
				t.Fatalf("text and raws fed byte by byte:\n got %q\nwant %q", got, content)
			}
		})
	}
}

// feedBytes feeds content one byte at a time and returns the text and the
// calls' Raws in the order they came out. One byte can release held text
// and open a block, or close a block, never both, so the order is the
// stream order.
func feedBytes(t testing.TB, content string) string {
	t.Helper()
	var s LeakScanner
	var out strings.Builder
	emit := func(text string, calls []LeakedCall) {
		out.WriteString(text)
		for _, c := range calls {
			out.WriteString(c.Raw)
		}
	}
	for i := 0; i < len(content); i++ {
		emit(s.Feed(content[i : i+1]))
	}
	emit(s.Flush())
	return out.String()
}

// TestLeakScannerHoldBack checks what each Feed returns: text passes at
// once, and only a tail that may start a marker waits.
func TestLeakScannerHoldBack(t *testing.T) {
	tests := []struct {
		name   string
		pieces []string
		want   []string // text returned by each Feed, then by Flush
	}{
		{
			name:   "prose passes piece for piece",
			pieces: []string{"Hello, ", "世界", "\n``` code", " ```"},
			want:   []string{"Hello, ", "世界", "\n``` code", " ```", ""},
		},
		{
			name:   "lone < waits for one byte",
			pieces: []string{"a <", " b"},
			want:   []string{"a ", "< b", ""},
		},
		{
			name:   "<= and html pass at once",
			pieces: []string{"a <= b <div>", "<|im_start|>"},
			want:   []string{"a <= b <div>", "<|im_start|>", ""},
		},
		{
			name:   "bar split inside its UTF-8 sequence",
			pieces: []string{"x<\xef", "\xbd", "\x9cy"},
			want:   []string{"x", "", "<｜y", ""},
		},
		{
			name:   "marker split across pieces is held whole",
			pieces: []string{"hello<‖DS", "ML‖tool_calls>world"},
			want:   []string{"hello", "", ""},
		},
		{
			name:   "prefix that stops matching is released",
			pieces: []string{"<｜tool▁call", "s▁bag｜> ok"},
			want:   []string{"", "<｜tool▁calls▁bag｜> ok", ""},
		},
		{
			name:   "held tail flushed at the end",
			pieces: []string{"end <｜DSML｜"},
			want:   []string{"end ", "<｜DSML｜"},
		},
		{
			name:   "closing marker outside a block is not held",
			pieces: []string{"x </｜DSML｜invoke> <｜tool▁call▁end｜>"},
			want:   []string{"x </｜DSML｜invoke> <｜tool▁call▁end｜>", ""},
		},
		{
			name:   "inside code nothing waits",
			pieces: []string{"`<｜DSML｜", "tool_calls>`"},
			want:   []string{"`<｜DSML｜", "tool_calls>`", ""},
		},
		{
			name:   "text after a block in the same piece",
			pieces: []string{"a<｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜>b <", "c"},
			want:   []string{"ab ", "<c", ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s LeakScanner
			var got []string
			for _, p := range tt.pieces {
				text, _ := s.Feed(p)
				got = append(got, text)
			}
			text, _ := s.Flush()
			got = append(got, text)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("texts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLeakScannerLongestOpener checks maxOpenerLen against every spelling
// of every opening marker: each is recognised, none is longer, and each of
// its proper prefixes is held back.
func TestLeakScannerLongestOpener(t *testing.T) {
	var openers []string
	barSet := []string{"｜", "|", "‖", "｜｜", "||", "‖‖", "｜|"}
	for _, b1 := range barSet {
		for _, b2 := range barSet {
			for _, w := range []string{"tool▁calls▁begin", "tool_call_begin", `tool\_calls\_begin`, "tool calls", "TOOL▁CALL▁BEGIN"} {
				openers = append(openers, "<"+b1+w+b2+">")
			}
			for _, name := range []string{"function_calls>", "tool_calls>", "invoke ", "invoke>"} {
				for _, sp := range []string{"", " "} {
					openers = append(openers, "<"+sp+b1+sp+"DSML"+sp+b2+sp+name, "<"+sp+b1+sp+"dsml"+sp+b2+sp+name)
				}
			}
		}
	}
	longest := 0
	for _, o := range openers {
		longest = max(longest, len(o))
		if _, m := matchTag(o, 0, true); m != matchFull {
			t.Errorf("matchTag(%q): got %v, want full", o, m)
		}
		for n := 1; n < len(o); n++ {
			if _, m := matchTag(o[:n], 0, true); m != matchPartial {
				t.Errorf("matchTag(%q): got %v, want partial", o[:n], m)
			}
		}
	}
	if longest != maxOpenerLen {
		t.Errorf("longest opener: got %d bytes, want maxOpenerLen = %d", longest, maxOpenerLen)
	}
}

// TestLeakScannerErrors checks that refused blocks wrap ErrLeakMalformed
// and name the tool when it was readable.
func TestLeakScannerErrors(t *testing.T) {
	tests := []struct {
		name     string
		content  string
		wantName string
	}{
		{"bad json", "<｜tool▁call▁begin｜>write<｜tool▁sep｜>{\"a\":<｜tool▁call▁end｜>", "write"},
		{"array arguments", "<｜tool▁call▁begin｜>write<｜tool▁sep｜>[1]<｜tool▁call▁end｜>", "write"},
		{"no name", "<｜tool▁call▁begin｜>function<｜tool▁sep｜>\n```json\n{}\n```<｜tool▁call▁end｜>", ""},
		{"string=false not json", "<｜DSML｜invoke name=\"sleep\"><｜DSML｜parameter name=\"s\" string=\"false\">ten</｜DSML｜parameter></｜DSML｜invoke>", "sleep"},
		{"duplicate parameter", "<｜DSML｜invoke name=\"f\"><｜DSML｜parameter name=\"a\" string=\"true\">1</｜DSML｜parameter><｜DSML｜parameter name=\"a\" string=\"true\">2</｜DSML｜parameter></｜DSML｜invoke>", "f"},
		{"bad string flag", "<｜DSML｜invoke name=\"f\"><｜DSML｜parameter name=\"a\" string=\"maybe\">1</｜DSML｜parameter></｜DSML｜invoke>", "f"},
		{"text in invoke", "<｜DSML｜invoke name=\"f\">hello</｜DSML｜invoke>", "f"},
		{"empty wrapper", "<｜DSML｜tool_calls></｜DSML｜tool_calls>", ""},
		{"unclosed", "<｜DSML｜tool_calls><｜DSML｜invoke name=\"f\">", "f"},
		{"opener alone", "<｜tool▁calls▁begin｜>", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s LeakScanner
			text, calls := s.Feed(tt.content)
			text2, calls2 := s.Flush()
			calls = append(calls, calls2...)
			if text+text2 != "" {
				t.Errorf("text: got %q, want none", text+text2)
			}
			if len(calls) != 1 {
				t.Fatalf("calls: got %d, want 1: %+v", len(calls), calls)
			}
			if !errors.Is(calls[0].Err, ErrLeakMalformed) {
				t.Errorf("error: got %v, want ErrLeakMalformed", calls[0].Err)
			}
			if got := calls[0].Call.Function.Name; got != tt.wantName {
				t.Errorf("name: got %q, want %q", got, tt.wantName)
			}
			if !s.Leaked() {
				t.Errorf("Leaked(): got false, want true")
			}
		})
	}
}

// TestLeakScannerReuse checks that Flush ends one content and the next
// starts clean: no held text and no code state carry over.
func TestLeakScannerReuse(t *testing.T) {
	var s LeakScanner
	s.Feed("```\nin a fence <")
	if text, calls := s.Flush(); text != "" || calls != nil {
		t.Fatalf("Flush: got %q %v, want nothing held", text, calls)
	}
	text, calls := s.Feed("<｜tool▁call▁begin｜>ls<｜tool▁sep｜>{}<｜tool▁call▁end｜>")
	if text != "" || len(calls) != 1 || calls[0].Err != nil {
		t.Fatalf("Feed after Flush: got %q %+v, want one call", text, calls)
	}
}

// TestLeakScannerOverflow checks that a block that never closes is refused
// once it outgrows maxLeakBlock, and the rest of the content dropped.
func TestLeakScannerOverflow(t *testing.T) {
	var s LeakScanner
	s.Feed("<｜DSML｜tool_calls>")
	chunk := strings.Repeat("x", 64<<10)
	var calls []LeakedCall
	for range maxLeakBlock/len(chunk) + 1 {
		_, c := s.Feed(chunk)
		calls = append(calls, c...)
	}
	if len(calls) != 1 || !errors.Is(calls[0].Err, ErrLeakMalformed) {
		t.Fatalf("calls: got %d (%v), want one refused", len(calls), calls)
	}
	if text, c := s.Feed("more"); text != "" || c != nil {
		t.Fatalf("Feed after overflow: got %q %v, want nothing", text, c)
	}
	if text, c := s.Flush(); text != "" || c != nil {
		t.Fatalf("Flush after overflow: got %q %v, want nothing", text, c)
	}
}

// leakBenchProse is about 4 KiB of prose, English and Chinese, with
// newlines and inline code, and no '<'.
func leakBenchProse() string {
	const para = "The gateway streams each content delta to the client as soon as it arrives, " +
		"and only a `<` may make it wait. 网关在收到内容增量后立即转发给客户端，" +
		"只有可能是标记开头的字符才会被暂存。\n\n"
	var b strings.Builder
	for b.Len() < 4096 {
		b.WriteString(para)
	}
	return b.String()
}

// splitRunes cuts s into n pieces of about equal size, at rune boundaries,
// as the SSE decoder hands them over.
func leakPieces(s string, n int) []string {
	size := len(s)/n + 1
	var out []string
	for len(s) > 0 {
		k := min(size, len(s))
		for k < len(s) && !utf8.RuneStart(s[k]) {
			k++
		}
		out = append(out, s[:k])
		s = s[k:]
	}
	return out
}

func benchmarkLeakScanner(b *testing.B, content string, wantCalls int) {
	pieces := leakPieces(content, 200)
	b.SetBytes(int64(len(content)))
	b.ReportAllocs()
	for b.Loop() {
		var s LeakScanner
		n := 0
		for _, p := range pieces {
			_, calls := s.Feed(p)
			n += len(calls)
		}
		_, calls := s.Flush()
		if n += len(calls); n != wantCalls {
			b.Fatalf("calls: got %d, want %d", n, wantCalls)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pieces)), "ns/piece")
}

// BenchmarkLeakScannerProse feeds 4 KiB of prose in 200 pieces: the cost
// every content stream pays.
func BenchmarkLeakScannerProse(b *testing.B) {
	benchmarkLeakScanner(b, leakBenchProse(), 0)
}

// BenchmarkLeakScannerCode feeds 4 KiB of Go in a fence, full of '<'.
func BenchmarkLeakScannerCode(b *testing.B) {
	const code = "```go\nfor i := 0; i < len(s); i++ { if s[i] <= '<' { ch <- s[i] } }\n```\n" +
		"Then `a < b` holds, and x<y<z.\n"
	benchmarkLeakScanner(b, strings.Repeat(code, 4096/len(code)+1), 0)
}

// BenchmarkLeakScannerLeak feeds prose around a leaked DSML block and a
// leaked V3 block, in 200 pieces.
func BenchmarkLeakScannerLeak(b *testing.B) {
	prose := leakBenchProse()[:1500]
	content := prose +
		"<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"write_file\">\n" +
		"<｜DSML｜parameter name=\"path\" string=\"true\">src/main.go</｜DSML｜parameter>\n" +
		"<｜DSML｜parameter name=\"content\" string=\"true\">" + strings.Repeat("func f() { return \"x\" }\n", 20) + "</｜DSML｜parameter>\n" +
		"<｜DSML｜parameter name=\"mode\" string=\"false\">{\"overwrite\": true}</｜DSML｜parameter>\n" +
		"</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + prose[:500] +
		"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"location\": \"Tokyo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>" +
		prose[:500]
	benchmarkLeakScanner(b, content, 2)
}

// BenchmarkLeakScannerHostile parses blocks of about 256 KiB built to
// make a careless parser rescan: invokes that never close, parameters that
// never close, quotes that never close, stray tags. Time must grow
// linearly with the block.
func BenchmarkLeakScannerHostile(b *testing.B) {
	const n = 8192
	blocks := map[string]string{
		"invokes":  "<｜DSML｜tool_calls>" + strings.Repeat("<｜DSML｜invoke name=\"a\">x", n) + "</｜DSML｜tool_calls>",
		"params":   "<｜DSML｜tool_calls>" + strings.Repeat("<｜DSML｜invoke name=\"a\"><｜DSML｜parameter name=\"p\" string=\"true\">v", n) + "</｜DSML｜tool_calls>",
		"quotes":   "<｜DSML｜tool_calls>" + strings.Repeat("<｜DSML｜invoke name='", n) + "</｜DSML｜tool_calls>",
		"strays":   "<｜DSML｜tool_calls>" + strings.Repeat("</｜DSML｜parameter>", n) + "</｜DSML｜tool_calls>",
		"tokens":   "<｜tool▁calls▁begin｜>" + strings.Repeat("<｜tool▁call▁begin｜><｜tool▁sep｜>", n) + "<｜tool▁calls▁end｜>",
		"unclosed": "<｜DSML｜tool_calls>" + strings.Repeat("<｜DSML｜invoke name=\"a\"><｜DSML｜parameter name=\"p\" string=\"false\">1</｜DSML｜parameter>", n),
	}
	for name, block := range blocks {
		b.Run(name, func(b *testing.B) {
			pieces := leakPieces(block, 2000)
			b.SetBytes(int64(len(block)))
			b.ReportAllocs()
			for b.Loop() {
				var s LeakScanner
				for _, p := range pieces {
					s.Feed(p)
				}
				s.Flush()
			}
		})
	}
}
