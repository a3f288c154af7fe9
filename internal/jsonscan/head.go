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
// an escape that could spell one of its letters (an escaped ASCII
// character, the Kelvin sign, the long s). A head's caller that finds
// none knows the rest does not give those members again, without a walk.
// It searches for each name's last letter and a closing quote, a search
// the runtime vectorises; it may say yes where there is none (inside a
// string value, or deeper in the object), never no where there is one.
func MayName(b []byte, names ...string) bool {
	if mayEscape(b) {
		return true
	}
	for _, name := range names {
		last := name[len(name)-1]
		ends := []string{string(last) + `"`}
		if upper := last &^ 0x20; last >= 'a' && last <= 'z' {
			ends = append(ends, string(upper)+`"`)
		}
		switch last {
		case 'k':
			ends = append(ends, "\u212a\"") // the Kelvin sign folds to k
		case 's':
			ends = append(ends, "\u017f\"") // the long s folds to s
		}
		for _, end := range ends {
			if spells(b, end, name) {
				return true
			}
		}
	}
	return false
}

// spells reports whether a string of b that ends with end (a name's last
// letter and the closing quote) reads as name.
func spells(b []byte, end, name string) bool {
	for k := 0; ; {
		j := bytes.Index(b[k:], []byte(end))
		if j < 0 {
			return false
		}
		close := k + j + len(end) - 1
		open := bytes.LastIndexByte(b[:close], '"')
		if open >= 0 && KeyIs(b[open+1:close], false, name) {
			return true
		}
		k += j + 1
	}
}

// mayEscape reports whether b holds a \u escape that could spell an
// ASCII letter, digit or underscore, or a character that folds to one.
func mayEscape(b []byte) bool {
	for k := 0; ; {
		j := bytes.Index(b[k:], []byte(`\u`))
		if j < 0 {
			return false
		}
		j += k
		if j+6 > len(b) {
			return true // cut short: say yes
		}
		switch hex := string(bytes.ToLower(b[j+2 : j+6])); {
		case hex[:2] == "00" && hex[2] >= '3' && hex[2] <= '7', hex == "212a", hex == "017f":
			return true
		}
		k = j + 1
	}
}
