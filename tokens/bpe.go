package tokens

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// bpe counts the tokens of text in one tiktoken encoding. It holds only
// what counting needs: the pre-tokenizer and the ranks of the mergeable
// byte sequences, every key a substring of one string. tiktoken-go keeps
// the same ranks three times over (a map by bytes, a map by rank, a sorted
// copy), each key an allocation of its own: about 22 MB for o200k_base,
// where this holds about 8. It is safe for concurrent use.
type bpe struct {
	pattern *regexp2.Regexp
	ranks   map[string]uint32
}

// patterns are the pre-tokenizers of the encodings, as OpenAI's tiktoken
// defines them (tiktoken_ext/openai_public.py); TestBPEMatchesTiktoken
// checks every count against tiktoken-go's.
var patterns = map[string]string{
	EncodingCL100K: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	EncodingO200K: strings.Join([]string{
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`\p{N}{1,3}`,
		` ?[^\s\p{L}\p{N}]+[\r\n/]*`,
		`\s*[\r\n]+`,
		`\s+(?!\S)`,
		`\s+`,
	}, "|"),
}

// loadBPE reads the named encoding's ranks from the copy compiled into
// tiktoken-go-loader (the gateway starts with no network): one line per
// token, its bytes in base64, a space, its rank.
func loadBPE(name string) (*bpe, error) {
	pattern, err := regexp2.Compile(patterns[name], regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("compile the pattern of %s: %w", name, err)
	}
	f, err := assets.Assets.Open(name + ".tiktoken")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// Sized from the file, so that loading makes little garbage: a line
	// is at least 14 bytes in both files, and the tokens decode to less
	// than 3/5 of it.
	type entry struct{ start, end, rank uint32 }
	arena := make([]byte, 0, fi.Size()*3/5)
	entries := make([]entry, 0, fi.Size()/14)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		tok, rank, ok := bytes.Cut(sc.Bytes(), []byte(" "))
		if !ok {
			continue
		}
		r, err := strconv.ParseUint(string(rank), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s: rank %q: %w", name, rank, err)
		}
		start := len(arena)
		if arena, err = base64.StdEncoding.AppendDecode(arena, tok); err != nil {
			return nil, fmt.Errorf("%s: token %q: %w", name, tok, err)
		}
		entries = append(entries, entry{uint32(start), uint32(len(arena)), uint32(r)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	all := string(arena) // every key below is a substring of this one string
	b := &bpe{pattern: pattern, ranks: make(map[string]uint32, len(entries))}
	for _, e := range entries {
		b.ranks[all[e.start:e.end]] = e.rank
	}
	return b, nil
}

// count returns the tokens of s, which must be valid UTF-8: the pieces the
// pattern cuts s into, each one token when it is one, else byte-pair
// merged.
func (b *bpe) count(s string) int {
	n := 0
	// regexp2 reports matches in runes; walk the bytes along with them.
	runeAt, byteAt := 0, 0
	offset := func(r int) int {
		for runeAt < r {
			_, size := utf8.DecodeRuneInString(s[byteAt:])
			byteAt += size
			runeAt++
		}
		return byteAt
	}
	m, _ := b.pattern.FindStringMatch(s)
	for m != nil {
		start := offset(m.Index)
		piece := s[start:offset(m.Index+m.Length)]
		if _, ok := b.ranks[piece]; ok {
			n++
		} else {
			n += b.merge(piece)
		}
		m, _ = b.pattern.FindNextMatch(m)
	}
	return n
}

// merge returns the number of tokens byte-pair merging makes of piece:
// starting from its bytes, the adjacent pair whose union has the lowest
// rank is merged (the leftmost of equals), until no union has a rank.
func (b *bpe) merge(piece string) int {
	if len(piece) <= 1 {
		return len(piece)
	}
	// bounds[i] is where part i starts; rank[i] is the rank of parts i and
	// i+1 together, math.MaxUint32 when they have none.
	var boundsBuf, rankBuf [maxChunk + 8]uint32
	bounds, rank := boundsBuf[:0], rankBuf[:0]
	for i := 0; i <= len(piece); i++ {
		bounds = append(bounds, uint32(i))
	}
	pair := func(i int) uint32 {
		if i+2 >= len(bounds) {
			return math.MaxUint32
		}
		if r, ok := b.ranks[piece[bounds[i]:bounds[i+2]]]; ok {
			return r
		}
		return math.MaxUint32
	}
	for i := 0; i+1 < len(bounds); i++ {
		rank = append(rank, pair(i))
	}
	for len(bounds) > 2 {
		best := 0
		for i, r := range rank[:len(bounds)-2] {
			if r < rank[best] {
				best = i
			}
		}
		if rank[best] == math.MaxUint32 {
			break
		}
		bounds = append(bounds[:best+1], bounds[best+2:]...)
		rank = append(rank[:best+1], rank[best+2:]...)
		rank[best] = pair(best)
		if best > 0 {
			rank[best-1] = pair(best - 1)
		}
	}
	return len(bounds) - 1
}
