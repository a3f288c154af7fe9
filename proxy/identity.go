package proxy

import (
	"bytes"
	"slices"
	"strconv"
	"time"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/jsonscan"
	"github.com/phasegate/phasegate/protocol"
)

// identity gives every chunk of one response the same id, created time
// and model, whichever upstream answer or the guard wrote it: the guard
// may ask the model again within one response (a refusal, the forced
// final answer, an envelope re-ask), and each answer comes with an id and
// a created time of its own.
//
// The first chunk the client is sent decides them. When that is an
// upstream's chunk, its id, created and model stand, so a response of one
// answer reaches the client byte for byte as the upstream sent it (the
// gateway's extension aside). When it is the guard's (it wrote before any
// upstream chunk, as on a spent cycle budget), they are the ones the
// guard minted: its id, the time it wrote, the model the client asked
// for. A created time of zero or an empty model becomes the time the
// chunk was written and the model asked for. Later chunks get these three
// values in place of their own, in the pass that adds the gateway's
// extension; every other byte of them is kept. A chunk that is not a JSON
// object, or lacks a field, is written as it came.
//
// An identity is owned by one request.
type identity struct {
	set   bool
	vals  [][]byte // the JSON values every chunk gets, by field
	model string   // the model the client asked for
	now   func() time.Time
	spans []jsonscan.Span // reused
	// head is the start of the chunk scanned last, when it holds each of
	// the three fields once, before "choices"; to is what it became.
	head jsonscan.Head
	to   []byte
}

// identityNames are the fields an identity gives, by index, and the
// member whose key ends a chunk's head.
var identityNames = []string{fieldID: "id", fieldCreated: "created", fieldModel: "model", fieldChoices: "choices"}

const (
	fieldID = iota
	fieldCreated
	fieldModel
	fieldChoices
)

func newIdentity(model string) *identity {
	return &identity{model: model, now: time.Now, vals: make([][]byte, len(identityNames))}
}

// appendChunk appends chunk data carrying the response's identity (data
// as it is when i is nil) and, when ext is set, the gateway's extension
// ext as its protocol.ExtensionKey member: one pass over data.
func (i *identity) appendChunk(dst, data, ext []byte) []byte {
	if i == nil {
		return appendExtension(dst, data, ext)
	}
	if n := i.head.Of(data); n > 0 && !jsonscan.MayName(data[n:], identityNames[:fieldChoices]...) {
		return jsonscan.Splice(append(dst, i.to...), data[n:], nil, nil, protocol.ExtensionKey, ext)
	}
	spans, ok := jsonscan.Find(i.spans[:0], data, identityNames...)
	i.spans = spans
	if !ok {
		i.head.Forget()
		return appendExtension(dst, data, ext)
	}
	if !i.set {
		i.learn(data, spans)
	}
	i.remember(data, spans)
	return jsonscan.Splice(dst, data, spans, i.vals, protocol.ExtensionKey, ext)
}

// appendExtension appends data with ext added as its
// protocol.ExtensionKey member, data as it is when ext is nil.
func appendExtension(dst, data, ext []byte) []byte {
	if ext == nil {
		return append(dst, data...)
	}
	return chat.AppendExtension(dst, data, protocol.ExtensionKey, ext)
}

// remember keeps the head of data, the members before its first
// "choices", and what it became, when the head holds each of the three
// fields once: the chunks of one answer share their head, so the next
// ones are told by it (and by the rest naming none of the three) without
// a scan.
func (i *identity) remember(data []byte, spans []jsonscan.Span) {
	i.head.Forget()
	choices := slices.IndexFunc(spans, func(s jsonscan.Span) bool { return s.Name == fieldChoices })
	if choices != 3 {
		return
	}
	seen := 0
	for _, s := range spans[:3] {
		seen |= 1 << s.Name
	}
	if seen != 1<<fieldID|1<<fieldCreated|1<<fieldModel {
		return
	}
	end := spans[choices].Key
	i.head.Learn(data, end)
	i.to = jsonscan.Splice(i.to[:0], data[:end], spans[:3], i.vals, "", nil)
}

// learn takes the identity from the first chunk: its own values, a real
// time for a created of zero and the requested model for an empty one.
func (i *identity) learn(data []byte, spans []jsonscan.Span) {
	i.set = true
	i.vals[fieldModel] = strconv.AppendQuote(nil, i.model)
	i.vals[fieldCreated] = strconv.AppendInt(nil, i.now().Unix(), 10)
	for _, s := range spans {
		v := bytes.Clone(data[s.Start:s.End])
		switch {
		case s.Name == fieldID:
			i.vals[fieldID] = v
		case s.Name == fieldCreated && string(v) != "0":
			i.vals[fieldCreated] = v
		case s.Name == fieldModel && string(v) != `""`:
			i.vals[fieldModel] = v
		}
	}
}
