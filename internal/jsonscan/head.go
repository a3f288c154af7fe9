package jsonscan

import "bytes"

// Head is the start the chunks of one stream share: the opening brace and
// the whole members before a member the caller reads (id, object,
// created, model before "choices"), each with its comma, as one chunk
// wrote them. A later chunk that starts with the same bytes holds the
// same members there; a reader learns the head once and goes on from its
// end (Walker.Members). The zero Head is empty; a Head is not safe for
// concurrent use.
type Head struct{ b []byte }

// Learn keeps data[:end] as the head. end is where the key of a member
// of the object data starts (Walker.MemberStart): the bytes before it are
// the object's opening and whole members, each with its comma. A head of
// no member is none (what follows an opening brace may close it).
func (h *Head) Learn(data []byte, end int) {
	if bytes.IndexByte(data[:end], ':') < 0 {
		h.Forget()
		return
	}
	h.b = append(h.b[:0], data[:end]...)
}

// Forget empties the head.
func (h *Head) Forget() { h.b = h.b[:0] }

// Len returns the head's length; 0 when none was learned.
func (h *Head) Len() int { return len(h.b) }

// Of returns the head's length when data starts with the head, else 0.
func (h *Head) Of(data []byte) int {
	if len(h.b) > 0 && bytes.HasPrefix(data, h.b) {
		return len(h.b)
	}
	return 0
}

// MayName reports whether b, the rest of an object after a head, may hold
// a key that encoding/json reads as one of names (lower-case ASCII
// letters, digits and underscores): a string spelling one in any case, or
// an escape that could spell one of its characters (an escaped ASCII
// character, the Kelvin sign, the long s). A head's caller that finds
// none knows the rest does not give those members again, without a walk.
// It looks only at the strings that end in a name's last letter (or a
// character that may fold to one), found with a search the runtime
// vectorises, and allocates nothing; it may say yes where there is none
// (inside a string value, or deeper in the object), never no where there
// is one.
func MayName(b []byte, names ...string) bool {
	if mayEscape(b) {
		return true
	}
	for q := 0; ; q++ {
		j := bytes.IndexByte(b[q:], '"')
		if j < 0 {
			return false
		}
		if q += j; q == 0 {
			continue
		}
		c := b[q-1]
		for _, name := range names {
			last := name[len(name)-1]
			if c != last && c < 0x80 && (c|0x20 != last || last < 'a' || last > 'z') {
				continue
			}
			open := bytes.LastIndexByte(b[:q-1], '"')
			if open >= 0 && KeyIs(b[open+1:q], false, name) {
				return true
			}
		}
	}
}

// mayEscape reports whether b holds a \u escape that could spell an
// ASCII letter, digit or underscore, or a character that folds to one:
// \u003x to \u007x, \u212a (Kelvin), \u017f (long s).
func mayEscape(b []byte) bool {
	for k := 0; ; k++ {
		j := bytes.Index(b[k:], []byte(`\u`))
		if j < 0 {
			return false
		}
		k += j
		if k+6 > len(b) {
			return true // cut short: say yes
		}
		h := b[k+2 : k+6]
		switch {
		case h[0] == '0' && h[1] == '0' && h[2] >= '3' && h[2] <= '7',
			h[0] == '2' && h[1] == '1' && h[2] == '2' && h[3]|0x20 == 'a',
			h[0] == '0' && h[1] == '1' && h[2] == '7' && h[3]|0x20 == 'f':
			return true
		}
	}
}
