package proxy

import (
	"bytes"
	"strconv"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// identity gives every chunk of one response the same id, created time
// and model, whichever upstream answer or the guard wrote it: the guard
// may ask the model again within one response (a refusal, the forced
// final answer, an envelope re-ask), and each answer comes with an id and
// a created time of its own.
//
// The first chunk the client is sent decides them. When that is an
// upstream's chunk, its id, created and model stand, so a response of one
// answer reaches the client byte for byte as the upstream sent it. When it
// is the guard's (it wrote before any upstream chunk, as on a spent cycle
// budget), the id is the one the guard minted, the model the one the
// client asked for, and a created time of zero becomes the time the chunk
// was written. Later chunks get these three values in place of their own;
// every other byte of them is kept. A chunk that is not a JSON object, or
// lacks a field, is written as it came.
//
// An identity is owned by one request.
type identity struct {
	set              bool
	id, created, mod []byte // the JSON values every chunk gets
	model            string // the model the client asked for
	now              func() time.Time
	dec              jsontext.Decoder
	src              bytes.Buffer
	out              []byte      // the rewritten chunk, reused
	edits            []fieldEdit // reused
	last             []fieldEdit // the fields of the chunk scanned last
	// from is the head of the chunk scanned last, to what it became.
	from, to []byte
}

// fieldEdit is where one of the three fields' value sits in a chunk.
type fieldEdit struct {
	start, end int
	field      int // fieldID, fieldCreated or fieldModel
}

const (
	fieldID = iota
	fieldCreated
	fieldModel
)

var identityNames = [...][]byte{fieldID: []byte(`"id"`), fieldCreated: []byte(`"created"`), fieldModel: []byte(`"model"`)}

var identityDecodeOptions = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

func newIdentity(model string) *identity {
	return &identity{model: model, now: time.Now}
}

// rewrite returns chunk data carrying the response's identity: data itself
// when it does already (or i is nil), else a copy with the three values
// replaced, valid until the next call.
func (i *identity) rewrite(data []byte) []byte {
	if i == nil {
		return data
	}
	if i.from != nil && bytes.HasPrefix(data, i.from) && endsValue(data[len(i.from):]) && !mayName(data[len(i.from):]) {
		if bytes.Equal(i.from, i.to) {
			return data
		}
		i.out = append(append(i.out[:0], i.to...), data[len(i.from):]...)
		return i.out
	}
	out := i.rewriteScanned(data)
	i.remember(data, out)
	return out
}

// rewriteScanned rewrites data by scanning it.
func (i *identity) rewriteScanned(data []byte) []byte {
	edits := i.scan(data)
	i.last = edits
	if !i.set {
		i.learn(data, edits)
	}
	changed := false
	for _, e := range edits {
		if v := i.value(e.field); v != nil && !bytes.Equal(data[e.start:e.end], v) {
			changed = true
		}
	}
	if !changed {
		return data
	}
	i.out = i.out[:0]
	at := 0
	for _, e := range edits {
		if v := i.value(e.field); v != nil {
			i.out = append(append(i.out, data[at:e.start]...), v...)
			at = e.end
		}
	}
	i.out = append(i.out, data[at:]...)
	return i.out
}

// remember keeps the head of data, up to its last identity field, and
// what it became in out, when the head holds each of the three once: the
// chunks of one answer share their head, so the next ones are told by it
// without a scan.
func (i *identity) remember(data, out []byte) {
	if len(i.last) != 3 {
		return
	}
	seen, end := 0, 0
	for _, e := range i.last {
		seen |= 1 << e.field
		end = max(end, e.end)
	}
	if seen != 1<<fieldID|1<<fieldCreated|1<<fieldModel {
		return
	}
	i.from = append(i.from[:0], data[:end]...)
	i.to = append(i.to[:0], out[:len(out)-(len(data)-end)]...)
}

// endsValue reports whether rest, what follows a remembered head, starts
// after the end of the head's last value: a number such as a created
// time 7 may go on as 70.
func endsValue(rest []byte) bool {
	return len(rest) > 0 && (rest[0] == ',' || rest[0] == '}' || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\n' || rest[0] == '\r')
}

func (i *identity) value(field int) []byte {
	switch field {
	case fieldID:
		return i.id
	case fieldCreated:
		return i.created
	}
	return i.mod
}

// learn takes the identity from the first chunk: its own values, a real
// time for a created of zero and the requested model for an empty one.
func (i *identity) learn(data []byte, edits []fieldEdit) {
	i.set = true
	i.mod = strconv.AppendQuote(nil, i.model)
	i.created = strconv.AppendInt(nil, i.now().Unix(), 10)
	for _, e := range edits {
		v := bytes.Clone(data[e.start:e.end])
		switch {
		case e.field == fieldID:
			i.id = v
		case e.field == fieldCreated && string(v) != "0":
			i.created = v
		case e.field == fieldModel && string(v) != `""`:
			i.mod = v
		}
	}
}

// scan finds the values of the top-level id, created and model fields of
// data, each of them however often it is given; none when data is not
// one JSON object.
func (i *identity) scan(data []byte) []fieldEdit {
	i.src = *bytes.NewBuffer(data)
	i.dec.Reset(&i.src, identityDecodeOptions...)
	if tok, err := i.dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil
	}
	edits := i.edits[:0]
	for i.dec.PeekKind() == '"' {
		name, err := i.dec.ReadValue()
		if err != nil {
			return nil
		}
		field := fieldOf(name)
		if field < 0 {
			if i.dec.SkipValue() != nil {
				return nil
			}
			continue
		}
		v, err := i.dec.ReadValue()
		if err != nil {
			return nil
		}
		end := int(i.dec.InputOffset())
		edits = append(edits, fieldEdit{start: end - len(v), end: end, field: field})
	}
	if tok, err := i.dec.ReadToken(); err != nil || tok.Kind() != '}' {
		return nil
	}
	i.edits = edits
	return edits
}

// fieldOf is the field a member name (as written, quoted) names, or -1:
// matched as a client's decoder matches it, escapes read and case
// ignored (encoding/json reads "ID" into a field tagged "id", and keeps
// the last of names given twice), so that every spelling is rewritten.
func fieldOf(name []byte) int {
	if bytes.IndexByte(name, '\\') >= 0 {
		unquoted, err := jsontext.AppendUnquote(nil, name)
		if err != nil {
			return -1
		}
		name = strconv.AppendQuote(nil, string(unquoted))
	}
	for f, n := range identityNames {
		if bytes.EqualFold(name, n) {
			return f
		}
	}
	return -1
}

// mayName reports whether b, the rest of a chunk after a remembered head,
// may hold a member named id, created or model: the string in any case,
// or an escaped ASCII letter, which could spell one. Such a chunk is
// scanned, not rewritten by its head alone. It looks for the last letter
// of each name and its closing quote, a search the runtime vectorises.
func mayName(b []byte) bool {
	for k := 0; ; {
		j := bytes.Index(b[k:], []byte(`\u00`))
		if j < 0 {
			break
		}
		if j += k; j+4 < len(b) && b[j+4] >= '4' && b[j+4] <= '7' {
			return true
		}
		k = j + 1
	}
	for _, end := range [...]string{`d"`, `D"`, `l"`, `L"`} {
		for k := 0; ; {
			j := bytes.Index(b[k:], []byte(end))
			if j < 0 {
				break
			}
			for _, n := range identityNames {
				if at := k + j + 2 - len(n); at >= 0 && bytes.EqualFold(b[at:k+j+2], n) {
					return true
				}
			}
			k += j + 1
		}
	}
	return false
}
