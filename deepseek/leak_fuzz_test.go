package deepseek

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// leakSeeds are contents for the fuzzers to start from: every format, the
// code rules, and near misses.
var leakSeeds = []string{
	"plain prose, no markers at all",
	"a < b <= c <div> <|im_start|> <｜end▁of▁sentence｜>",
	"Let me check.\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"location\": \"Tokyo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
	"<｜tool▁call▁begin｜>ls<｜tool▁sep｜>{\"dir\":\".\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>cat<｜tool▁sep｜>{}<｜tool▁call▁end｜>",
	"<|tool_calls_begin|><|tool_call_begin|>f<|tool_sep|>{}<|tool_call_end|><|tool_calls_end|>",
	"<｜tool▁calls｜><｜tool calls begin｜><｜tool\\_call\\_begin｜>",
	"\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"Bash\">\n<｜DSML｜parameter name=\"command\" string=\"true\">pwd</｜DSML｜parameter>\n<｜DSML｜parameter name=\"n\" string=\"false\">[1, {\"a\": null}]</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>after",
	"<‖DSML‖function_calls><‖DSML‖invoke name=\"f\">{\"a\": 1}</‖DSML‖invoke></‖DSML‖function_calls>",
	"<｜｜DSML｜｜invoke name=\"f\"><｜｜DSML｜｜invoke name=\"cmd\" string=\"echo\" /></｜｜DSML｜｜invoke>",
	"< | DSML | tool_calls>< | DSML | invoke name=\"g\"></ | DSML | invoke></ | DSML | tool_calls>",
	"```\n<｜DSML｜tool_calls>\n```\n`<｜tool▁call▁begin｜>` ~~~\n~~~\n<｜DSML｜invoke name=\"x\">",
	"```a`b``` <｜DSML｜invoke name=\"a\"></｜DSML｜invoke>",
	"unclosed <｜DSML｜tool_calls><｜DSML｜invoke name=\"w\"><｜DSML｜parameter name=\"p\" string=\"true\">hal",
	"中文<｜DSML｜invoke name=\"查询\"><｜DSML｜parameter name=\"城市\" string=\"true\">北京</｜DSML｜parameter></｜DSML｜invoke>完成",
	"<｜DSML｜invoke name='q' ><｜DSML｜parameter name=x>1</｜DSML｜parameter ></｜DSML｜invoke >",
}

// FuzzLeakScanner checks, for any content and any split of it, that the
// scanner does not panic; that the split gives what the whole gives; that
// text and calls' Raws, in stream order, make up the content byte for
// byte; that content without a marker comes out unchanged; and that
// nothing more than the longest marker minus one byte waits outside a
// block.
func FuzzLeakScanner(f *testing.F) {
	for i, s := range leakSeeds {
		f.Add(s, []byte{byte(i), 3, 1, 7, 2})
	}
	f.Fuzz(func(t *testing.T, content string, cuts []byte) {
		whole := scanLeak(t, content)
		var pieces []string
		rest := content
		for _, c := range cuts {
			n := min(int(c)%(len(rest)+1), len(rest))
			pieces = append(pieces, rest[:n])
			rest = rest[n:]
		}
		pieces = append(pieces, rest)
		if diff := cmp.Diff(whole, scanLeak(t, pieces...)); diff != "" {
			t.Fatalf("split %q (-whole +split):\n%s", pieces, diff)
		}
		if got := feedBytes(t, content); got != content {
			t.Fatalf("text and raws fed byte by byte:\n got %q\nwant %q", got, content)
		}
		if !whole.Leaked && (whole.Text != content || len(whole.Calls) != 0) {
			t.Fatalf("no marker, yet text %q and %d calls, want the content unchanged", whole.Text, len(whole.Calls))
		}
		if !strings.Contains(content, "<") {
			var s LeakScanner
			for _, p := range pieces {
				if text, calls := s.Feed(p); text != p || calls != nil {
					t.Fatalf("Feed(%q) with no '<': got %q and %d calls, want the piece at once", p, text, len(calls))
				}
			}
		}
	})
}

// dsmlBars are the bar spellings the round trip draws from.
var dsmlBars = []string{"｜", "|", "‖", "｜｜", "||", "‖‖"}

// FuzzLeakRoundTrip writes calls the way DeepSeek's templates do, in each
// format, around fuzzed names and values, and checks that the scanner
// reads back exactly the call that was written.
func FuzzLeakRoundTrip(f *testing.F) {
	f.Add("read_file", "src/main.go", int64(10), uint8(0), "before ", " after")
	f.Add("Bash", "cd /srv && ls -la | head\n", int64(-3), uint8(5), "", "")
	f.Add("查询", "北京 <b>今天</b>", int64(0), uint8(2), "中文\n", "\n完成")
	f.Add("f", "a ``` b ` c\n```", int64(1<<40), uint8(7), "`code` ", "")
	f.Add("\u2029牰", "0", int64(-70), uint8(5), "0", "\x9d\U0006b570") // a Unicode space the trim would eat
	f.Fuzz(func(t *testing.T, name, value string, n int64, variant uint8, before, after string) {
		if !validToolName(name) || strings.Contains(strings.ToLower(value), "dsml") {
			return // not a name a model writes, or a value holding a closing tag: nothing to round-trip
		}
		// Keep the text around the call out of code and free of markers.
		clean := func(s string) string {
			return strings.Map(func(r rune) rune {
				if r == '<' || r == '`' || r == '~' {
					return '.'
				}
				return r
			}, s)
		}
		before, after = clean(before), clean(after)
		bar := dsmlBars[int(variant)%len(dsmlBars)]
		want := map[string]any{"value": value, "n": float64(n)}
		args, err := json.Marshal(want) // escapes <, so no marker inside
		if err != nil {
			t.Fatal(err)
		}
		var block string
		switch variant % 3 {
		case 0: // DSML parameters
			marker := "<" + bar + "DSML" + bar
			end := "</" + bar + "DSML" + bar
			block = marker + "tool_calls>\n" + marker + "invoke name=\"" + name + "\">\n" +
				marker + "parameter name=\"value\" string=\"true\">" + value + end + "parameter>\n" +
				marker + "parameter name=\"n\" string=\"false\">" + json.Number(leakItoa(n)).String() + end + "parameter>\n" +
				end + "invoke>\n" + end + "tool_calls>"
		case 1: // V3, fenced JSON
			block = "<" + bar + "tool▁calls▁begin" + bar + "><" + bar + "tool▁call▁begin" + bar + ">function<" + bar + "tool▁sep" + bar + ">" +
				name + "\n```json\n" + string(args) + "\n```<" + bar + "tool▁call▁end" + bar + "><" + bar + "tool▁calls▁end" + bar + ">"
		case 2: // V3.1, bare JSON
			block = "<" + bar + "tool_call_begin" + bar + ">" + name + "<" + bar + "tool_sep" + bar + ">" + string(args) + "<" + bar + "tool_call_end" + bar + ">"
		}
		content := before + "\n" + block + after
		got := scanLeak(t, content)
		if got.Text != before+"\n"+after {
			t.Fatalf("text: got %q, want %q", got.Text, before+"\n"+after)
		}
		if len(got.Calls) != 1 || got.Calls[0].Malformed {
			t.Fatalf("calls: got %+v, want one recovered", got.Calls)
		}
		if got.Calls[0].Name != name {
			t.Fatalf("name: got %q, want %q", got.Calls[0].Name, name)
		}
		var gotArgs map[string]any
		if err := json.Unmarshal([]byte(got.Calls[0].Arguments), &gotArgs); err != nil {
			t.Fatalf("arguments %q: %v", got.Calls[0].Arguments, err)
		}
		// Round trip the want through JSON as well: invalid UTF-8 in the
		// value becomes U+FFFD on both sides.
		var wantArgs map[string]any
		_ = json.Unmarshal(args, &wantArgs)
		if diff := cmp.Diff(wantArgs, gotArgs); diff != "" {
			t.Fatalf("arguments (-want +got):\n%s", diff)
		}
	})
}

func leakItoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
