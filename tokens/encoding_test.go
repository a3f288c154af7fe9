package tokens

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// alphabet mixes every class the exact-cut rules distinguish: ASCII and
// other letters (Lu, Ll, Lt, Lm, Lo), marks, digits of three kinds,
// apostrophes, slashes, other punctuation, and whitespace of every kind
// the patterns treat apart.
var alphabet = []string{
	"a", "b", "s", "t", "Z", "é", "ǅ", "ʰ", "中", "文", "\u0301", "\u0903",
	"1", "2", "٣", "½", "'", "’", "/", ".", ",", "!", "{", "\"", "-", "_",
	" ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\v",
	"\xff", // invalid UTF-8: tiktoken and split both read U+FFFD
}

func randomText(rng *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		s := alphabet[rng.IntN(len(alphabet))]
		// runs make long pieces and long digit groups likely
		for k := 1 + rng.IntN(4)*rng.IntN(4); k > 0; k-- {
			b.WriteString(s)
		}
	}
	return b.String()
}

// FuzzSplitExact checks the exact-cut rules against tiktoken itself: at
// every cut split calls exact, the two sides count, in both encodings, as
// many tokens as the text they were cut from.
func FuzzSplitExact(f *testing.F) {
	f.Add(uint64(1), uint16(400), uint8(8))
	f.Add(uint64(2), uint16(1000), uint8(3))
	f.Add(uint64(3), uint16(200), uint8(16))
	f.Fuzz(func(t *testing.T, seed uint64, size uint16, chunk uint8) {
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		text := randomText(rng, int(size%2048))
		max := 1 + int(chunk%32)
		for _, name := range []string{EncodingCL100K, EncodingO200K} {
			count := reference(t, name)
			for rest := text; len(rest) > 0; {
				cut, exact := split(rest, max)
				if cut <= 0 || cut > len(rest) || (cut > max && utf8.RuneCountInString(rest[:cut]) > 1) {
					t.Fatalf("split(%q, %d) = %d", rest, max, cut)
				}
				if exact && cut < len(rest) {
					if got, want := count(rest[:cut])+count(rest[cut:]), count(rest); got != want {
						t.Errorf("%s: %q cut exactly at %d: got %d tokens, want %d", name, rest, cut, got, want)
					}
				}
				rest = rest[cut:]
			}
		}
	})
}

// TestSplitExactProse checks that ordinary text is never cut hard.
func TestSplitExactProse(t *testing.T) {
	tests := []struct {
		name string
		text string
	}{
		{"english", englishText},
		{"code", codeText(t)},
		{"chinese", chineseText},
		{"json", `{"path":"/usr/local/lib/python3.12/site-packages/numpy/core/_multiarray_umath.cpython-312-x86_64-linux-gnu.so","size":12345678,"sha256":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}`},
		{"base64", strings.Repeat("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg", 20)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hard := 0
			for rest := tt.text; len(rest) > 0; {
				cut, exact := split(rest, maxChunk)
				if !exact {
					hard++
				}
				rest = rest[cut:]
			}
			if hard != 0 {
				t.Errorf("got %d hard cuts, want 0", hard)
			}
		})
	}
}

// TestHardCutError measures what a hard cut costs on the inputs that force
// them, against the unsplit count, and bounds it at 2 tokens per cut.
func TestHardCutError(t *testing.T) {
	tests := []struct {
		name string
		text string
	}{
		{"letters", strings.Repeat("a", 8000)},
		{"mixed case", strings.Repeat("aBcDeF", 1300)},
		{"spaces", strings.Repeat(" ", 8000) + "x"},
		{"newlines", strings.Repeat("\n", 8000)},
		{"punctuation", strings.Repeat("!?", 4000)},
		{"chinese run", strings.Repeat(strings.NewReplacer("，", "", "。", "", "、", "", "“", "", "”", "").Replace(chineseText), 3)},
	}
	for _, tt := range tests {
		for _, name := range []string{EncodingCL100K, EncodingO200K} {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				e, err := loadEncoding(name)
				if err != nil {
					t.Fatal(err)
				}
				c := &Counter{}
				want := reference(t, name)(tt.text)
				got := c.countText(e, tt.text)
				cuts := 0
				for rest := tt.text; len(rest) > 0; {
					cut, exact := split(rest, maxChunk)
					if !exact {
						cuts++
					}
					rest = rest[cut:]
				}
				t.Logf("%d bytes, %d hard cuts: split %d tokens, whole %d (%+d, %+.2f%%)", len(tt.text), cuts, got, want, got-want, 100*float64(got-want)/float64(want))
				if d := got - want; d < -2*cuts || d > 2*cuts {
					t.Errorf("got %d tokens, want %d ± %d", got, want, 2*cuts)
				}
			})
		}
	}
}
