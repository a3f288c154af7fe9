package jsonscan

import (
	"bytes"
	"iter"
)

// Span is where a top-level member lies in an object: its key's opening
// quote at data[Key], its value at data[Start:End]; Name is the index,
// among the names asked for, of the name its key reads as.
type Span struct{ Key, Start, End, Name int }

// Find walks the JSON object data and appends to spans the value of each
// of its top-level members whose key reads as one of names (lower-case
// ASCII) as encoding/json matches a key to a field: escapes read, case
// ignored; every one, in order, when a name is given twice (the decoder
// keeps the last). ok is false when data is not one valid JSON object;
// the Walker validates as it goes, in one pass.
func Find(spans []Span, data []byte, names ...string) (_ []Span, ok bool) {
	w := Walk(data)
	if w.Peek() != '{' {
		return spans, false
	}
	w.Object(func(key []byte) {
		escaped := bytes.IndexByte(key, '\\') >= 0
		at, start := w.MemberStart(), w.valueStart()
		v := w.Value()
		for n, name := range names {
			if KeyIs(key, escaped, name) {
				spans = append(spans, Span{Key: at, Start: start, End: start + len(v), Name: n})
				break
			}
		}
	})
	w.End()
	return spans, w.Err() == nil
}

// valueStart is where the value the walk is at starts.
func (w *Walker) valueStart() int {
	w.ws()
	return w.i
}

// Splice appends to dst the object data with the value at each span
// replaced by vals[span.Name] (nil keeps it) and, when ext is not nil, one
// more member named key (ASCII, no quote or backslash) whose value is ext,
// before the object's closing brace. Every other byte of data is kept.
// data is the valid object the spans were found in (Find), or, with no
// spans, the members of one after a Head and its closing brace; a data
// with no closing brace is appended as it is, ext left out. ext is a JSON
// value.
func Splice(dst, data []byte, spans []Span, vals [][]byte, key string, ext []byte) []byte {
	at := 0
	for _, s := range spans {
		if v := vals[s.Name]; v != nil {
			dst = append(append(dst, data[at:s.Start]...), v...)
			at = s.End
		}
	}
	end := bytes.LastIndexByte(data, '}')
	if ext == nil || end < at {
		return append(dst, data[at:]...)
	}
	dst = append(dst, data[at:end]...)
	if before := bytes.TrimRight(data[:end], " \t\r\n"); len(before) > 0 && before[len(before)-1] != '{' {
		dst = append(dst, ',') // the object has members
	}
	dst = append(append(append(append(dst, '"'), key...), `":`...), ext...)
	return append(dst, data[end:]...)
}

// StringValues yields the string value of each key spelled exactly name
// (FindKey's keys), in order: its body between the quotes, or, for a
// string that does not close in data, nil, and then no more.
func StringValues(data []byte, name string) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for v := FindKey(data, name, 0); v >= 0; v = FindKey(data, name, v) {
			if v >= len(data) || data[v] != '"' {
				continue
			}
			end := StringClose(data, v+1)
			if end < 0 {
				yield(nil)
				return
			}
			if !yield(data[v+1 : end]) {
				return
			}
		}
	}
}

// HasString reports whether data has a key spelled exactly name whose
// value is a string (see StringValues).
func HasString(data []byte, name string) bool {
	for range StringValues(data, name) {
		return true
	}
	return false
}
