package tokens

import (
	"sync"
	"testing"

	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// references are tiktoken-go encodings built apart from the package's
// shared ones: the count of a whole text, with no chunking, that the
// package's chunked counts are checked against.
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

// TestEncodingsLoad loads both encodings on their first count.
func TestEncodingsLoad(t *testing.T) {
	for _, name := range []string{EncodingCL100K, EncodingO200K} {
		e, err := loadEncoding(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.counter(nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := (&Counter{}).countText(e, "hello world"); got != 2 {
			t.Errorf("%s: hello world counts %d tokens, want 2", name, got)
		}
	}
}
