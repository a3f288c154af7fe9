package protocol

import (
	"fmt"
	"strings"
	"testing"
)

// degenerateFixtures are answers that degenerate, each modelled on a
// public report of a model repeating itself, and where its repetition
// starts.
var degenerateFixtures = []struct {
	name, source string
	lead, phrase string
	field        string
}{
	{"a word", "deepseek-ai/DeepSeek-R1 issue 211: an answer that turns into \"mechanism mechanism mechanism …\"",
		"You can install the extensions with docker-php-ext-install; the ", "mechanism ", "content"},
	{"a short sentence", "deepseek-ai/DeepSeek-V3 issue 1550: after a long conversation every answer repeats one short sentence (可以吃玉米。) until stopped by hand",
		"鸡蛋和青菜都可以。", "可以吃玉米。", "content"},
	{"a sentence, in an agent's loop", "farion1231/cc-switch issue 5860: Codex on deepseek-v4 repeats one sentence for 120,000 characters and more",
		"Let me look at the file first. ", "I will check the configuration file again to be sure. ", "content"},
	{"a reasoning block", "deepseek-ai/DeepSeek-V3 issue 1587: in thinking mode the reasoning repeats the same block and never reaches an answer",
		"The user wants the total of sales.csv. ", "Wait, let me re-read the question. The user asks for the total, so I should sum the third column of every row after the header, which gives the total of sales. Let me verify that the third column is the amount. ", "reasoning_content"},
	{"a special token", "sgl-project/sglang issue 12824: deepseek-v3.1-Terminus repeats <｜begin▁of▁sentence｜> until the output is truncated",
		"", "<｜begin▁of▁sentence｜>", "content"},
	{"a chat marker on its own line", "deepseek-ai/DeepSeek-V3 issue 318: <|im_start|> repeated line after line",
		"大语言模型是一种计算机程序。\n", "<|im_start|>\n", "content"},
}

// legitimateTexts are answers with repetition in them that is not a loop.
var legitimateTexts = map[string]string{
	"a markdown table": func() string {
		var b strings.Builder
		b.WriteString("| file | lines | status |\n|---|---|---|\n")
		for i := range 60 {
			fmt.Fprintf(&b, "| pkg/f%02d.go | %d | ok |\n", i, 100+i)
		}
		return b.String()
	}(),
	"separators": strings.Repeat("=", 80) + "\nSummary\n" + strings.Repeat("=", 80) + "\n" + strings.Repeat("-", 120) + "\n",
	"a numbered list": func() string {
		var b strings.Builder
		for i := range 50 {
			fmt.Fprintf(&b, "%d. Run the tests of package %d again after the edit.\n", i+1, i)
		}
		return b.String()
	}(),
	"code with similar lines": func() string {
		var b strings.Builder
		b.WriteString("func TestTable(t *testing.T) {\n")
		for i := range 40 {
			fmt.Fprintf(&b, "\tassert(t, f(%d) == %d)\n", i, i*i)
		}
		return b.String() + "}\n"
	}(),
	"records in JSON": func() string {
		var b strings.Builder
		b.WriteString("[")
		for i := range 30 {
			fmt.Fprintf(&b, `{"id": %d, "status": "active", "role": "member"}, `, i)
		}
		return b.String() + "]"
	}(),
	"a paragraph quoted twice": strings.Repeat("The configuration is read once at start-up, checked, and never read again; a change needs a restart of every replica behind the load balancer. ", 2),
}

// streamText feeds text to a scan in pieces of size bytes and returns the
// bytes fed when the scan found it degenerate, or -1.
func streamText(field, text string, size int) int {
	var d degenerateScan
	for i := 0; i < len(text); i += size {
		piece := text[i:min(i+size, len(text))]
		content, reasoning := piece, ""
		if field == "reasoning_content" {
			content, reasoning = "", piece
		}
		if got := d.scan(content, reasoning); got != "" {
			if got != field {
				return -2
			}
			return i + len(piece)
		}
	}
	return -1
}

// TestDegenerateText streams the fixtures in pieces as upstreams send
// them: every degenerate answer is cut within 1.5 KB of repetition (2 KB for a reasoning block of 230 bytes), no
// legitimate answer is cut.
func TestDegenerateText(t *testing.T) {
	for _, f := range degenerateFixtures {
		t.Run(f.name, func(t *testing.T) {
			text := f.lead + strings.Repeat(f.phrase, 2000/len(f.phrase)+50)
			for _, size := range []int{1, 7, 24, 100} {
				cut := streamText(f.field, text, size)
				if cut == -2 {
					t.Fatalf("pieces of %d: the wrong field was found degenerate", size)
				}
				if most := max(1536, 2*len(f.phrase)+degenerateSpan); cut < 0 || cut-len(f.lead) > most {
					t.Errorf("pieces of %d: cut after %d bytes of repetition, want within %d (%s)", size, cut-len(f.lead), most, f.source)
				}
			}
			t.Logf("%s: cut after %d bytes of repetition", f.source, streamText(f.field, text, 24)-len(f.lead))
		})
	}
	for name, text := range legitimateTexts {
		t.Run("legitimate/"+name, func(t *testing.T) {
			for _, size := range []int{1, 24} {
				if cut := streamText("content", text, size); cut >= 0 {
					t.Errorf("pieces of %d: a legitimate answer was cut after %d bytes:\n%s", size, cut, text)
				}
			}
		})
	}
}

// BenchmarkDegenerateScan is the degenerate text rule alone on the text
// of BenchmarkGuardText's 200-chunk plain stream: what the rule adds to
// the guard's cost of that stream (BenchmarkGuardText/guard/plain).
func BenchmarkDegenerateScan(b *testing.B) {
	pieces := []string{"word ", "and ", "more ", "text. "} // as BenchmarkGuardText's plain stream
	b.ReportAllocs()
	for b.Loop() {
		var d degenerateScan
		for i := range 197 {
			if d.scan(pieces[int(uint32(i)*2654435761>>16)%len(pieces)], "") != "" {
				b.Fatal("plain text found degenerate")
			}
		}
	}
}
