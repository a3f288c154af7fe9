package tokens

import (
	"fmt"
	"sync"
	"unicode"
	"unicode/utf8"

	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// Encoding names, as tiktoken spells them.
const (
	EncodingO200K  = "o200k_base"
	EncodingCL100K = "cl100k_base"
)

// encoding is a tiktoken encoding and what the counting rules need to
// know about it. Its ranks are loaded when it first counts: a gateway
// whose requests never reach a tokenizer, or only one of the two, does
// not hold them.
type encoding struct {
	id   uint8 // part of every cache key: counts differ by encoding
	name string
	// funcInit is the cookbook's per-function overhead of a tool
	// definition: 7 for the o200k models, 10 for the cl100k ones.
	funcInit int

	once sync.Once
	tk   *tiktoken.Tiktoken
	err  error
}

// Only these two: the exact-cut rules of split are proven for their
// pre-tokenizer patterns (p50k and r50k group digits differently).
var encodingIDs = map[string]uint8{EncodingCL100K: 1, EncodingO200K: 2}

var encodings = struct {
	mu sync.Mutex
	m  map[string]*encoding
}{m: map[string]*encoding{}}

// loadEncoding returns the named encoding, shared by every Counter of the
// process; its ranks are loaded on first use (see counter).
func loadEncoding(name string) (*encoding, error) {
	id, ok := encodingIDs[name]
	if !ok {
		return nil, fmt.Errorf("unknown encoding %q: want %s or %s", name, EncodingO200K, EncodingCL100K)
	}
	encodings.mu.Lock()
	defer encodings.mu.Unlock()
	if e, ok := encodings.m[name]; ok {
		return e, nil
	}
	e := &encoding{id: id, name: name, funcInit: 10}
	if name == EncodingO200K {
		e.funcInit = 7
	}
	encodings.m[name] = e
	return e, nil
}

// offlineLoader makes tiktoken-go read the BPE files compiled into
// tiktoken-go-loader: its default loader downloads them and caches them
// under TIKTOKEN_CACHE_DIR. Set once, before the first load.
var offlineLoader sync.Once

// counter returns the encoding's tiktoken-go BPE, loading it on first use:
// tiktoken-go builds a new one (about 20 MB for o200k_base, 80–200 ms) on
// every GetEncoding call, so it is built once per process, and only for an
// encoding a request needs. loaded, when not nil, is told once it was.
func (e *encoding) counter(loaded func(encoding string)) (*tiktoken.Tiktoken, error) {
	e.once.Do(func() {
		offlineLoader.Do(func() { tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader()) })
		e.tk, e.err = tiktoken.GetEncoding(e.name)
		if e.err != nil {
			e.err = fmt.Errorf("load encoding %s: %w", e.name, e.err)
			return
		}
		if loaded != nil {
			loaded(e.name)
		}
	})
	return e.tk, e.err
}

// maxChunk bounds the bytes tiktoken sees at once. Its byte-pair merge
// costs O(n²) in the length of one pre-tokenized piece; at 256 bytes a
// pathological piece costs about as much per byte as ordinary prose (see
// BenchmarkHostile), while ordinary text almost always offers an exact cut
// within 256 bytes.
const maxChunk = 256

// countText counts the tokens of s, chunk by chunk.
func (c *Counter) countText(e *encoding, s string) int {
	if !utf8.ValidString(s) {
		// tiktoken reads each invalid byte as U+FFFD, three bytes: convert
		// first, or a chunk of maxChunk such bytes would be a 3×maxChunk
		// piece, 9 times the merge work.
		s = string([]rune(s))
	}
	tk, err := e.counter(c.loaded)
	if err != nil {
		// The ranks are compiled in and TestEncodingsLoad loads them:
		// this is not expected, and four bytes a token is the estimate
		// used wherever no tokenizer counts.
		return (len(s) + 3) / 4
	}
	n := 0
	for len(s) > 0 {
		cut, _ := split(s, maxChunk)
		n += len(tk.EncodeOrdinary(s[:cut]))
		c.encodes.Add(1)
		s = s[cut:]
	}
	return n
}

// split returns the length of the first chunk of s, at most max bytes
// (more only if the first rune is longer), and whether the cut is exact:
// whether tiktoken counts s[:cut] and s[cut:] to the same total as s. It
// picks the last exact cut within max bytes, else cuts hard at the last
// rune boundary.
//
// A cut between runes p and r is exact when p is not whitespace (the
// pattern's \s+(?!\S) looks ahead past a whitespace run) and no piece of
// the cl100k or o200k pre-tokenizer can hold both p and r. Pieces are
// letter runs (\p{L}, and \p{M} in o200k) with an optional leading
// non-letter and a trailing contraction ('s, 't…), punctuation runs with
// trailing [\r\n/], whitespace runs, and digit groups \p{N}{1,3} counted
// from the start of the digit run. digits counts the run from the start of
// s: after a hard cut tiktoken also starts grouping afresh. Checked against
// unsplit tiktoken by FuzzSplitExact.
func split(s string, max int) (cut int, exact bool) {
	if len(s) <= max {
		return len(s), true
	}
	lastExact, lastRune := 0, 0
	var p rune
	digits := 0
	for i := 0; i <= max; {
		r, size := utf8.DecodeRuneInString(s[i:])
		if i > 0 {
			lastRune = i
			if exactCut(p, r, digits) {
				lastExact = i
			}
		}
		if classOf(r) == classNumber {
			digits++
		} else {
			digits = 0
		}
		p = r
		i += size
		if i >= len(s) {
			break
		}
	}
	if lastExact > 0 {
		return lastExact, true
	}
	if lastRune == 0 { // one rune longer than max
		_, lastRune = utf8.DecodeRuneInString(s)
	}
	return lastRune, false
}

type class uint8

const (
	classPunct  class = iota // anything else: [^\s\p{L}\p{N}], and U+FFFD for invalid bytes
	classSpace               // \s as regexp2 defines it: unicode.IsSpace
	classLetter              // \p{L}
	classMark                // \p{M}: a letter in o200k, punctuation in cl100k
	classNumber              // \p{N}
)

var asciiClass = func() (t [utf8.RuneSelf]class) {
	for r := range t {
		t[r] = slowClass(rune(r))
	}
	return t
}()

func classOf(r rune) class {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	return slowClass(r)
}

func slowClass(r rune) class {
	switch {
	case unicode.IsSpace(r):
		return classSpace
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsMark(r):
		return classMark
	case unicode.IsNumber(r):
		return classNumber
	}
	return classPunct
}

// exactCut reports whether a cut between p and r is exact; digits is the
// length of the digit run that ends with p.
func exactCut(p, r rune, digits int) bool {
	cp, cr := classOf(p), classOf(r)
	letterish := func(c class) bool { return c == classLetter || c == classMark }
	punctish := func(c class) bool { return c == classPunct || c == classMark }
	switch {
	case cp == classSpace:
		return false
	case cp == classNumber:
		return cr != classNumber || digits%3 == 0
	case letterish(cp) && (letterish(cr) || r == '\''):
		return false
	case punctish(cp) && (letterish(cr) || punctish(cr) || r == '\r' || r == '\n'):
		return false
	}
	return true
}
