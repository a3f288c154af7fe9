package messages

import (
	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/jsonscan"
)

// Limits bound the shape of one Messages request, as the chat route's
// limits bound a chat request, so that a hostile or broken client cannot
// make the gateway decode without bound. They are checked in one pass
// over the raw body, before anything is decoded. Zero fields take their
// defaults, which are the chat route's.
type Limits struct {
	// MaxDepth bounds the nesting of JSON objects and arrays. Default 64.
	MaxDepth int
	// MaxMessages bounds the messages of a request. Default 10,000.
	MaxMessages int
	// MaxBlocks bounds the content blocks of a request: those of the
	// system prompt, of every message, and of every tool result, counted
	// together. Default 50,000.
	MaxBlocks int
	// MaxTools bounds the tools a request declares. Default 512.
	MaxTools int
}

// DefaultLimits returns the limits a zero Limits stands for.
func DefaultLimits() Limits {
	return Limits{MaxDepth: 64, MaxMessages: 10_000, MaxBlocks: 50_000, MaxTools: 512}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	for _, f := range []struct{ v, def *int }{{&l.MaxDepth, &d.MaxDepth}, {&l.MaxMessages, &d.MaxMessages},
		{&l.MaxBlocks, &d.MaxBlocks}, {&l.MaxTools, &d.MaxTools}} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return l
}

// arrayKind is what a counted array of the request holds.
type arrayKind uint8

const (
	kindOther    arrayKind = iota
	kindTop                // the request object itself (for objects: what encloses them)
	kindMessages           // the top-level messages
	kindTools              // the top-level tools
	kindSystem             // the blocks of the top-level system
	kindContent            // the blocks of a message
	kindResult             // the blocks of a block (a tool result's content)
)

// frame is one open object or array of the scan.
type frame struct {
	array bool
	// kind is what an array holds; for an object, in is the kind of the
	// array that holds it (kindTop for the request object).
	kind, in arrayKind
	commas   int
	nonEmpty bool
	// key is the last string closed directly in an object: the key of
	// the value that follows it.
	key []byte
}

// checkShape refuses, before anything is decoded, a body that nests
// deeper than l allows or holds more messages, blocks or tools. It
// counts the elements of arrays by their commas and does not validate
// the JSON: the decoder does that next, within these bounds.
func checkShape(body []byte, l Limits) error {
	stack := make([]frame, 0, 16)
	blocks := 0
	for i := 0; i < len(body); i++ {
		c := body[i]
		var top *frame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		switch c {
		case ' ', '\t', '\r', '\n', ':':
			continue
		case ',':
			if top != nil && top.array {
				top.commas++
			}
			continue
		case '}', ']':
			if len(stack) == 0 {
				continue
			}
			f := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if err := counted(f, &blocks, l); err != nil {
				return err
			}
			continue
		}
		if top != nil && top.array {
			top.nonEmpty = true
		}
		switch c {
		case '"':
			end := jsonscan.StringClose(body, i+1)
			if end < 0 {
				end = len(body) // it does not close: nothing more nests
			}
			if top != nil && !top.array {
				top.key = body[i+1 : end]
			}
			i = end
		case '{', '[':
			if len(stack) >= l.MaxDepth {
				return chat.InvalidRequest("", "the request nests JSON objects and arrays more than %d deep", l.MaxDepth)
			}
			stack = append(stack, open(top, c == '['))
		}
	}
	return nil
}

// open returns the frame of a container opened inside parent (nil at
// the top).
func open(parent *frame, array bool) frame {
	f := frame{array: array}
	switch {
	case parent == nil:
		f.in = kindTop
	case parent.array:
		f.in = parent.kind
	case array && parent.in == kindTop:
		f.kind = topMember(parent.key)
	case array && (parent.in == kindMessages || parent.in == kindContent) && string(key(parent.key)) == "content":
		f.kind = kindContent
		if parent.in == kindContent {
			f.kind = kindResult
		}
	}
	return f
}

// topMember is the kind of a top-level array, given its key as written.
// Keys match exactly once escapes are read, as the translation reads
// them.
func topMember(raw []byte) arrayKind {
	switch string(key(raw)) {
	case "messages":
		return kindMessages
	case "tools":
		return kindTools
	case "system":
		return kindSystem
	}
	return kindOther
}

// counted checks the count of the array f, just closed; blocks is the
// running count of content blocks.
func counted(f frame, blocks *int, l Limits) error {
	if !f.array || f.kind == kindOther {
		return nil
	}
	n := f.commas
	if f.nonEmpty {
		n++
	}
	switch f.kind {
	case kindMessages:
		if n > l.MaxMessages {
			return chat.InvalidRequest("messages", "the request has %d messages; this gateway accepts at most %d", n, l.MaxMessages)
		}
	case kindTools:
		if n > l.MaxTools {
			return chat.InvalidRequest("tools", "the request declares %d tools; this gateway accepts at most %d", n, l.MaxTools)
		}
	default:
		if *blocks += n; *blocks > l.MaxBlocks {
			return chat.InvalidRequest("messages", "the request has more than %d content blocks; this gateway accepts at most %d", l.MaxBlocks, l.MaxBlocks)
		}
	}
	return nil
}
