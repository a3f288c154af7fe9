package redact

import "sync"

// automaton finds every spelling of every form in one pass over a text,
// in time linear in the text whatever it holds (Aho-Corasick, as a table
// of transitions on the bytes the forms use). The text is read as JSON
// escapes spell it (see scanner), so a form is found as it is or with any
// of its characters escaped. It is immutable once built.
type automaton struct {
	// class maps a byte to its column of next: 0 for a byte no form has.
	class   [256]uint8
	classes int
	// next is the transition of each state (a row of classes columns).
	next []int32
	// longest is the length of the longest form that ends at a state, 0
	// for none; depth the characters from the root to it.
	longest, depth []int32
	// maxLen is the length of the longest form, minLen of the shortest:
	// a text shorter than minLen bytes holds none, escaped or not (an
	// escape spells one character with more bytes).
	maxLen, minLen int
	// scanners are scanners of this automaton that calls are done with:
	// a short text (a log attribute, a header) costs no allocation.
	scanners sync.Pool
}

func newAutomaton(forms []string) *automaton {
	a := &automaton{}
	var used [256]bool
	for _, f := range forms {
		for i := 0; i < len(f); i++ {
			used[f[i]] = true
		}
		a.maxLen = max(a.maxLen, len(f))
		if a.minLen == 0 || len(f) < a.minLen {
			a.minLen = len(f)
		}
	}
	a.classes = 1
	for b := range used {
		if used[b] {
			a.class[b] = uint8(a.classes)
			a.classes++
		}
	}
	term := a.trie(forms)
	a.link(term)
	return a
}

// trie adds a state per prefix of the forms, with -1 for a transition
// not yet known, and returns the length of the form each state ends (0
// for none).
func (a *automaton) trie(forms []string) []int32 {
	a.next = a.row(nil)
	a.depth = []int32{0}
	term := []int32{0}
	for _, f := range forms {
		s := int32(0)
		for i := 0; i < len(f); i++ {
			col := int(s)*a.classes + int(a.class[f[i]])
			if a.next[col] < 0 {
				a.next[col] = int32(len(a.depth))
				a.next = a.row(a.next)
				a.depth = append(a.depth, a.depth[s]+1)
				term = append(term, 0)
			}
			s = a.next[col]
		}
		term[s] = int32(len(f))
	}
	return term
}

// row appends a row of unknown transitions to next.
func (a *automaton) row(next []int32) []int32 {
	for range a.classes {
		next = append(next, -1)
	}
	return next
}

// link completes the transitions with the failure links, breadth first,
// and sets longest.
func (a *automaton) link(term []int32) {
	n := len(a.depth)
	fail := make([]int32, n)
	a.longest = make([]int32, n)
	queue := make([]int32, 0, n)
	for c := range a.classes {
		if t := a.next[c]; t > 0 {
			queue = append(queue, t)
			a.longest[t] = term[t]
		} else {
			a.next[c] = 0
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for c := range a.classes {
			col := int(s)*a.classes + c
			t := a.next[col]
			via := a.next[int(fail[s])*a.classes+c]
			if t < 0 {
				a.next[col] = via
				continue
			}
			fail[t] = via
			a.longest[t] = max(term[t], a.longest[via])
			queue = append(queue, t)
		}
	}
}

// span is a part of a text, [start, end) in its bytes.
type span struct{ start, end int }

// maxRun is the most backslashes an escape is read with: a text escaped
// three times over writes a character as \\\\\\\u002b, with seven. A
// longer run is read as that many backslashes before an escape.
const maxRun = 7

// scanner reads a text with an automaton: each character as the text
// spells it, a JSON escape (a run of up to maxRun backslashes, then "u"
// and four hex digits of an ASCII character, or '"' or '/') read as the
// character it stands for, any other byte as itself; and gathers the
// parts of the text where forms are found, overlapping ones merged. It is
// owned by one call.
type scanner struct {
	a     *automaton
	state int32
	n     int   // characters read
	ring  []int // the offsets of the last characters read (a power of two, over maxLen)
	spans []span
}

func (a *automaton) scanner() *scanner {
	if sc, ok := a.scanners.Get().(*scanner); ok {
		sc.state, sc.n, sc.spans = 0, 0, sc.spans[:0]
		return sc
	}
	size := 1
	for size <= a.maxLen {
		size *= 2
	}
	return &scanner{a: a, ring: make([]int, size)}
}

// release gives sc back for another call; the caller is done with it
// and its spans.
func (a *automaton) release(sc *scanner) { a.scanners.Put(sc) }

// char reads the character c that the bytes [start, end) of the text
// spell.
func (sc *scanner) char(c byte, start, end int) {
	mask := len(sc.ring) - 1
	sc.ring[sc.n&mask] = start
	sc.n++
	a := sc.a
	sc.state = a.next[int(sc.state)*a.classes+int(a.class[c])]
	if l := int(a.longest[sc.state]); l > 0 {
		sc.found(span{sc.ring[(sc.n-l)&mask], end})
	}
}

// found adds a part where a form was found, merged with those it
// overlaps.
func (sc *scanner) found(f span) {
	for len(sc.spans) > 0 && f.start < sc.spans[len(sc.spans)-1].end {
		f.start = min(f.start, sc.spans[len(sc.spans)-1].start)
		sc.spans = sc.spans[:len(sc.spans)-1]
	}
	sc.spans = append(sc.spans, f)
}

// read reads s, and returns the offset of an escape s ends inside (when
// more is set: the rest of the text decides what it spells), or len(s).
func (sc *scanner) read(s string, more bool) int {
	for i := 0; i < len(s); {
		i = sc.plain(s, i)
		if i == len(s) {
			break
		}
		j := i
		for j < len(s) && s[j] == '\\' {
			j++
		}
		from := max(i, j-maxRun) // the backslashes an escape may take
		for ; i < from; i++ {
			sc.char('\\', i, i+1)
		}
		c, end := escapeAt(s, j)
		switch {
		case end > 0:
			sc.char(c, from, end)
			i = end
			continue
		case end == 0 && more:
			return from
		}
		for ; i < j; i++ {
			sc.char('\\', i, i+1)
		}
	}
	return len(s)
}

// plain reads the bytes of s from i up to the next backslash, each a
// character as it is, and returns where it stopped: the loop every byte
// of an ordinary text goes through.
func (sc *scanner) plain(s string, i int) int {
	a, mask := sc.a, len(sc.ring)-1
	state, n := sc.state, sc.n
	for ; i < len(s) && s[i] != '\\'; i++ {
		sc.ring[n&mask] = i
		n++
		state = a.next[int(state)*a.classes+int(a.class[s[i]])]
		if l := int(a.longest[state]); l > 0 {
			sc.found(span{sc.ring[(n-l)&mask], i + 1})
		}
	}
	sc.state, sc.n = state, n
	return i
}

// escapeAt reads what follows a run of backslashes that ends at j: the
// character an escape spells and the offset past it; end 0 when s ends
// before it is known, -1 when it is not an escape of an ASCII character.
func escapeAt(s string, j int) (c byte, end int) {
	switch {
	case j == len(s):
		return 0, 0
	case s[j] == '"' || s[j] == '/':
		return s[j], j + 1
	case s[j] != 'u':
		return 0, -1
	case j+5 > len(s):
		for k := j + 1; k < len(s); k++ {
			if _, ok := hexDigit(s[k]); !ok {
				return 0, -1
			}
		}
		return 0, 0
	}
	v, ok := hex4(s[j+1 : j+5])
	if !ok || v >= 0x80 {
		return 0, -1
	}
	return byte(v), j + 5
}

// held is where the text read stops being settled: the first character
// of the longest end of it that may start a form, or an escape it ends
// inside (cut), whichever is first; the found parts that reach past it
// are given up, to be found again with what follows.
func (sc *scanner) held(cut, size int) int {
	h := cut
	if d := int(sc.a.depth[sc.state]); d > 0 {
		h = min(h, sc.ring[(sc.n-d)&(len(sc.ring)-1)])
	}
	for len(sc.spans) > 0 && sc.spans[len(sc.spans)-1].end > h {
		h = min(h, sc.spans[len(sc.spans)-1].start)
		sc.spans = sc.spans[:len(sc.spans)-1]
	}
	return min(h, size)
}
