package tokens

import (
	"math/rand/v2"
	"sync"
	"testing"

	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// references are tiktoken-go's encodings, the independent source the
// gateway's own counter is checked against; only tests load them.
var references = struct {
	sync.Mutex
	m map[string]*tiktoken.Tiktoken
}{m: map[string]*tiktoken.Tiktoken{}}

// reference returns tiktoken-go's count of s in the named encoding.
func reference(t testing.TB, name string) func(s string) int {
	t.Helper()
	references.Lock()
	defer references.Unlock()
	tk, ok := references.m[name]
	if !ok {
		tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
		var err error
		if tk, err = tiktoken.GetEncoding(name); err != nil {
			t.Fatal(err)
		}
		references.m[name] = tk
	}
	return func(s string) int { return len(tk.EncodeOrdinary(s)) }
}

// TestEncodingsLoad loads the ranks of both encodings.
func TestEncodingsLoad(t *testing.T) {
	for _, name := range []string{EncodingCL100K, EncodingO200K} {
		e, err := loadEncoding(name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.counter()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if want := map[string]int{EncodingCL100K: 100256, EncodingO200K: 199998}[name]; len(b.ranks) != want {
			t.Errorf("%s: got %d ranks, want %d", name, len(b.ranks), want)
		}
	}
}

// TestBPEMatchesTiktoken checks the gateway's counter against tiktoken-go
// on texts that mix every class of character the patterns tell apart,
// and on the fixtures of the package.
func TestBPEMatchesTiktoken(t *testing.T) {
	texts := []string{"", "a", "hello world", "  \n\n  x", "don't STOP'll", englishText, chineseText, codeText(t),
		"1234567 ١٢٣٤ ½½½", "<|endoftext|> is ordinary here"}
	rng := rand.New(rand.NewPCG(14, 14))
	for range 300 {
		texts = append(texts, validUTF8(randomText(rng, 1+rng.IntN(300))))
	}
	for _, name := range []string{EncodingCL100K, EncodingO200K} {
		e, err := loadEncoding(name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.counter()
		if err != nil {
			t.Fatal(err)
		}
		want := reference(t, name)
		for _, s := range texts {
			if got, w := b.count(s), want(s); got != w {
				t.Errorf("%s: %.80q: got %d tokens, want %d", name, s, got, w)
			}
		}
	}
}

// FuzzBPE checks the counter against tiktoken-go on arbitrary text.
func FuzzBPE(f *testing.F) {
	f.Add("hello world", false)
	f.Add("中文 don't 123456", true)
	f.Fuzz(func(t *testing.T, s string, o200k bool) {
		s = validUTF8(s)
		if len(s) > 512 {
			s = validUTF8(s[:512])
		}
		name := EncodingCL100K
		if o200k {
			name = EncodingO200K
		}
		e, _ := loadEncoding(name)
		b, err := e.counter()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := b.count(s), reference(t, name)(s); got != want {
			t.Errorf("%s: %q: got %d tokens, want %d", name, s, got, want)
		}
	})
}

// validUTF8 is s with invalid bytes read as U+FFFD, as countText does
// before counting.
func validUTF8(s string) string { return string([]rune(s)) }
