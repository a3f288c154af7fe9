package messages

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/chunkscan"
)

// ErrInterleaved is the error of a chunk that continues a tool call
// after another block opened: the Messages stream closes a block before
// it opens the next, so it cannot say it. (OpenAI and DeepSeek send one
// call after another; the guard forwards one call.)
var ErrInterleaved = errors.New("a tool call continues after another block opened")

// blockKind is the type of a content block.
type blockKind uint8

const (
	blockText blockKind = iota + 1
	blockThinking
	blockToolUse
)

// Stream translates one chat completion stream into the Messages API's
// event sequence. Each method appends the events it makes to dst, each
// with its event: line, and returns it; it never reads back what it
// wrote. The message opens (message_start) with the first chunk; blocks
// take increasing indexes, and a block is closed before the next opens.
//
// A Stream is owned by one request and is not safe for concurrent use.
type Stream struct {
	reply Reply
	scan  chunkscan.Scanner
	id    string
	// started: message_start was written; ended: the last event was.
	started, ended bool
	// next is the index the next block takes; open is the open block's
	// index, -1 when none, and kind its type.
	next, open int
	kind       blockKind
	// calls maps a chat tool call's index to its block's index.
	calls   map[int]int
	finish  string
	stopSeq []byte
	usage   usage
	counted bool
}

// NewStream returns the translator of a stream that answers r.
func NewStream(r Reply) *Stream { return &Stream{reply: r, open: -1} }

// ID returns the message's id; "" until the message opened.
func (s *Stream) ID() string { return s.id }

// Ended reports that the stream's last event was written.
func (s *Stream) Ended() bool { return s.ended }

// event appends the head of an event of type typ: its event: line and
// its data up to the type member; the caller appends the rest and
// closes it with eventEnd.
func event(dst []byte, typ string) []byte {
	dst = append(append(append(dst, "event: "...), typ...), "\ndata: {\"type\":\""...)
	return append(append(dst, typ...), '"')
}

func eventEnd(dst []byte) []byte { return append(dst, "}\n\n"...) }

// Ping appends a ping event, which clients read as a sign of life while
// the answer is awaited; it may come before the message opens. It
// appends nothing once the stream ended.
func (s *Stream) Ping(dst []byte) []byte {
	if s.ended {
		return dst
	}
	return eventEnd(event(dst, "ping"))
}

// start appends message_start; chatID is the first chunk's id.
func (s *Stream) start(dst, chatID []byte) []byte {
	s.started = true
	s.id = messageID(chatID)
	dst = appendMessageHead(append(event(dst, "message_start"), `,"message":`...), s.id, s.reply.Model)
	dst = appendMessageTail(dst, "", nil, usage{input: s.reply.InputTokens})
	return eventEnd(dst)
}

// Chunk appends the events of one chat.completion.chunk's data. ext,
// the gateway's extension of the chunk, says nothing a message has room
// for and is ignored. A chunk holding an in-band error ends the stream
// as Fail does. After the stream ended, Chunk appends nothing.
func (s *Stream) Chunk(dst, data, ext []byte) ([]byte, error) {
	if s.ended {
		return dst, nil
	}
	f, err := s.scan.Read(data)
	if err != nil {
		return dst, fmt.Errorf("decode chunk: %w", err)
	}
	if !isNull(f.Error) {
		var e chat.Error
		if err := json.Unmarshal(f.Error, &e); err != nil {
			return dst, fmt.Errorf("decode chunk error: %w", err)
		}
		return s.Fail(dst, &e), nil
	}
	if !s.started {
		dst = s.start(dst, f.ID)
	}
	if t := inner(f.Reasoning); t != nil {
		dst = s.text(dst, blockThinking, t)
	}
	if t := inner(f.Content); t != nil {
		dst = s.text(dst, blockText, t)
	}
	for _, c := range f.Calls {
		if dst, err = s.call(dst, c); err != nil {
			return dst, err
		}
	}
	if !isNull(f.Finish) {
		if err := json.Unmarshal(f.Finish, &s.finish); err != nil {
			return dst, fmt.Errorf("decode finish_reason: %w", err)
		}
		s.stopSeq = f.StopReason
	}
	if u, ok := usageOf(f.Usage); ok {
		s.usage, s.counted = u, true
	}
	return dst, nil
}

// text appends a delta t (a JSON string's body) of a text or thinking
// block, opening one when the open block is of another kind.
func (s *Stream) text(dst []byte, kind blockKind, t []byte) []byte {
	if s.open < 0 || s.kind != kind {
		dst = s.closeBlock(dst)
		dst = s.openBlock(dst, kind)
		if kind == blockThinking {
			dst = append(dst, `{"type":"thinking","thinking":"","signature":""}`...)
		} else {
			dst = append(dst, `{"type":"text","text":""}`...)
		}
		dst = eventEnd(dst)
	}
	dst = s.blockEvent(dst, "content_block_delta", s.open)
	if kind == blockThinking {
		dst = append(dst, `,"delta":{"type":"thinking_delta","thinking":"`...)
	} else {
		dst = append(dst, `,"delta":{"type":"text_delta","text":"`...)
	}
	return eventEnd(append(append(dst, t...), `"}`...))
}

// call appends the events of a tool call fragment.
func (s *Stream) call(dst []byte, c chunkscan.Call) ([]byte, error) {
	i, ok := s.calls[c.Index]
	switch {
	case !ok:
		dst = s.closeBlock(dst)
		if s.calls == nil {
			s.calls = make(map[int]int)
		}
		s.calls[c.Index] = s.next
		id := c.ID
		if s.reply.taken(id) {
			id = toolUseID(s.id, s.next)
		}
		dst = s.openBlock(dst, blockToolUse)
		dst = eventEnd(append(appendToolUseHead(dst, id, c.Name), `,"input":{}}`...))
	case i != s.open && inner(c.Arguments) != nil:
		return dst, fmt.Errorf("tool call %d: %w", c.Index, ErrInterleaved)
	}
	args := inner(c.Arguments)
	if args == nil {
		return dst, nil
	}
	dst = s.blockEvent(dst, "content_block_delta", s.open)
	dst = append(append(dst, `,"delta":{"type":"input_json_delta","partial_json":"`...), args...)
	return eventEnd(append(dst, `"}`...)), nil
}

// blockEvent appends the head of an event about block i.
func (s *Stream) blockEvent(dst []byte, typ string, i int) []byte {
	return strconv.AppendInt(append(event(dst, typ), `,"index":`...), int64(i), 10)
}

// openBlock appends the head of content_block_start for the next block,
// up to its content_block member's value, which the caller appends.
func (s *Stream) openBlock(dst []byte, kind blockKind) []byte {
	s.open, s.kind = s.next, kind
	s.next++
	return append(s.blockEvent(dst, "content_block_start", s.open), `,"content_block":`...)
}

// closeBlock ends the open block: a thinking block gets its signature
// first.
func (s *Stream) closeBlock(dst []byte) []byte {
	if s.open < 0 {
		return dst
	}
	if s.kind == blockThinking {
		dst = append(s.blockEvent(dst, "content_block_delta", s.open), `,"delta":{"type":"signature_delta","signature":"`...)
		dst = eventEnd(append(append(dst, signature(s.id, s.open)...), `"}`...))
	}
	dst = eventEnd(s.blockEvent(dst, "content_block_stop", s.open))
	s.open = -1
	return dst
}

// End appends the end of a stream that finished: the open block closed,
// message_delta with the stop reason and the usage, message_stop. It
// does nothing once the stream ended.
func (s *Stream) End(dst []byte) []byte {
	if s.ended {
		return dst
	}
	if !s.started {
		dst = s.start(dst, nil)
	}
	s.ended = true
	dst = s.closeBlock(dst)
	reason, seq := stopReason(s.finish, s.stopSeq, s.reply.StopSequences, len(s.calls) > 0)
	u := s.usage
	if !s.counted {
		u = usage{input: s.reply.InputTokens}
	}
	dst = append(append(append(event(dst, "message_delta"), `,"delta":{"stop_reason":"`...), reason...), `","stop_sequence":`...)
	if seq == nil {
		seq = []byte("null")
	}
	dst = u.appendJSON(append(append(dst, seq...), `},"usage":`...))
	return eventEnd(event(eventEnd(dst), "message_stop"))
}

// Fail appends the end of a stream that failed after it started: the
// open block closed, then an error event. It does nothing once the
// stream ended.
func (s *Stream) Fail(dst []byte, e *chat.Error) []byte {
	if s.ended {
		return dst
	}
	s.ended = true
	return ErrorEvent(s.closeBlock(dst), e)
}
