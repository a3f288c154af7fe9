package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"iter"
	"strconv"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/chunkscan"
)

// Stream translates one chat completion stream into the Responses event
// sequence. Each method appends the events it makes to dst, each with its
// event: line and the next sequence_number, and returns it; Events then
// tells them apart without reading them again. It is owned by one
// request.
type Stream struct {
	r   *Response
	seq int
	// open is the index of the message or reasoning item text goes to,
	// -1 when none.
	open int
	// calls maps a chat tool call index to its output item.
	calls  map[int]int
	finish string
	ended  bool
	// scan reads the stream's chunks.
	scan chunkscan.Scanner
	// starts are the offsets in dst at which each event made since the
	// last call to Events starts.
	starts []int
}

// NewStream returns the translator of the stream that builds r.
func NewStream(r *Response) *Stream { return &Stream{r: r, open: -1} }

// Response is the response the stream builds.
func (s *Stream) Response() *Response { return s.r }

// Ended reports that the stream's last event was made.
func (s *Stream) Ended() bool { return s.ended }

// event appends the head of an event of type typ, up to the comma after
// its sequence_number; the caller appends the rest and closes it with
// eventEnd.
func (s *Stream) event(dst []byte, typ string) []byte {
	s.starts = append(s.starts, len(dst))
	dst = append(append(append(dst, "event: "...), typ...), "\ndata: {\"type\":\""...)
	dst = append(append(dst, typ...), `","sequence_number":`...)
	dst = strconv.AppendInt(dst, int64(s.seq), 10)
	s.seq++
	return dst
}

func eventEnd(dst []byte) []byte { return append(dst, "}\n\n"...) }

// Events yields, one at a time, the events the Stream appended to out
// since the last call to Events, and forgets them. out is the dst they
// were appended to, from its start: a writer that numbers or keeps each
// event (a resumable stream's log) takes them from here, never by
// splitting the text again.
func (s *Stream) Events(out []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		starts := s.starts
		s.starts = s.starts[:0]
		for i, at := range starts {
			end := len(out)
			if i+1 < len(starts) {
				end = starts[i+1]
			}
			if at > end || end > len(out) || !yield(out[at:end]) {
				return
			}
		}
	}
}

// itemRef appends ,"item_id":…,"output_index":… of item i.
func (s *Stream) itemRef(dst []byte, i int) []byte {
	dst = append(append(append(dst, `,"item_id":"`...), s.r.items[i].id...), `","output_index":`...)
	return strconv.AppendInt(dst, int64(i), 10)
}

// Start appends response.created and response.in_progress.
func (s *Stream) Start(dst []byte) []byte {
	for _, typ := range []string{"response.created", "response.in_progress"} {
		dst = s.r.AppendJSON(append(s.event(dst, typ), `,"response":`...))
		dst = eventEnd(dst)
	}
	return dst
}

// inner returns the contents of the JSON string raw (without its
// quotes), or nil when raw is not a non-empty string.
func inner(raw json.RawMessage) []byte {
	if len(raw) < 3 || raw[0] != '"' {
		return nil
	}
	return raw[1 : len(raw)-1]
}

// Chunk appends the events of one chat.completion.chunk: its data, and
// ext, when set, the gateway's extension the guard gave it (the value of
// its phasegate member, which the chat route adds to the chunk it
// writes; its usage_estimated marks the usage). An in-band error (data
// holding "error") ends the stream as Fail does.
func (s *Stream) Chunk(dst, data, ext []byte) ([]byte, error) {
	c, err := s.scan.Read(data)
	if err != nil {
		return dst, fmt.Errorf("decode chunk: %w", err)
	}
	if len(c.Error) > 0 && !isNull(c.Error) {
		var e chat.Error
		if err := json.Unmarshal(c.Error, &e); err != nil {
			return dst, fmt.Errorf("decode chunk error: %w", err)
		}
		return s.Fail(dst, &e), nil
	}
	if t := inner(c.Reasoning); t != nil {
		dst = s.text(dst, TypeReasoning, t)
	}
	if t := inner(c.Content); t != nil {
		dst = s.text(dst, TypeMessage, t)
	}
	for _, tc := range c.Calls {
		dst = s.call(dst, tc.Index, quoted(tc.ID), quoted(tc.Name), inner(tc.Arguments))
	}
	if len(c.Finish) > 0 && !isNull(c.Finish) {
		if err := json.Unmarshal(c.Finish, &s.finish); err != nil {
			return dst, fmt.Errorf("decode finish_reason: %w", err)
		}
	}
	if len(c.Usage) > 0 && !isNull(c.Usage) {
		if ext != nil { // read only where it tells: beside a usage
			if c.Estimated, err = chunkscan.Extension(ext, c.Estimated); err != nil {
				return dst, fmt.Errorf("decode chunk extension: %w", err)
			}
		}
		s.r.setUsage(c.Usage, c.Estimated)
	}
	return dst, nil
}

// quoted is the JSON string raw, or "" when raw is not a string.
func quoted(raw []byte) []byte {
	if len(raw) < 2 || raw[0] != '"' {
		return []byte(`""`)
	}
	return raw
}

// text appends the delta t to the open item of type typ, opening one
// (and closing the other) when needed.
func (s *Stream) text(dst []byte, typ string, t []byte) []byte {
	if s.open < 0 || s.r.items[s.open].typ != typ {
		dst = s.closeOpen(dst)
		prefix := "msg_"
		if typ == TypeReasoning {
			prefix = "rs_"
		}
		s.open = s.r.add(&outItem{typ: typ, id: NewID(prefix)})
		dst = s.itemAdded(dst, s.open)
		dst = s.part(dst, "response.content_part.added", s.open)
	}
	it := s.r.items[s.open]
	it.text = append(it.text, t...)
	evt := "response.output_text.delta"
	if typ == TypeReasoning {
		evt = "response.reasoning_text.delta"
	}
	dst = s.itemRef(s.event(dst, evt), s.open)
	dst = append(append(append(dst, `,"content_index":0,"delta":"`...), t...), '"')
	if typ == TypeMessage {
		dst = append(dst, `,"logprobs":[]`...)
	}
	return eventEnd(dst)
}

// part appends a content_part event of item i: its part as it stands.
func (s *Stream) part(dst []byte, evt string, i int) []byte {
	it := s.r.items[i]
	dst = append(s.itemRef(s.event(dst, evt), i), `,"content_index":0,"part":`...)
	if it.typ == TypeMessage {
		dst = appendTextPart(dst, it.text)
	} else {
		dst = append(append(append(dst, `{"type":"reasoning_text","text":"`...), it.text...), `"}`...)
	}
	return eventEnd(dst)
}

func (s *Stream) itemAdded(dst []byte, i int) []byte {
	dst = append(strconv.AppendInt(append(s.event(dst, "response.output_item.added"), `,"output_index":`...), int64(i), 10), `,"item":`...)
	return eventEnd(s.r.items[i].appendItem(dst, false))
}

// call appends the events of a tool call fragment of chat index idx; id
// and name are JSON strings.
func (s *Stream) call(dst []byte, idx int, id, name, args []byte) []byte {
	i, ok := s.calls[idx]
	if !ok {
		dst = s.closeOpen(dst)
		if s.calls == nil {
			s.calls = make(map[int]int)
		}
		i = s.r.add(s.r.call(id, name))
		s.calls[idx] = i
		dst = s.itemAdded(dst, i)
	}
	if len(args) == 0 {
		return dst
	}
	s.r.items[i].args = append(s.r.items[i].args, args...)
	dst = s.itemRef(s.event(dst, "response.function_call_arguments.delta"), i)
	return eventEnd(append(append(append(dst, `,"delta":"`...), args...), '"'))
}

// closeOpen ends the open message or reasoning item.
func (s *Stream) closeOpen(dst []byte) []byte {
	if s.open < 0 {
		return dst
	}
	i := s.open
	s.open = -1
	return s.doneItem(dst, i)
}

// doneItem appends the .done events of item i, finishing it.
func (s *Stream) doneItem(dst []byte, i int) []byte {
	it := s.r.items[i]
	if it.status == StatusInProgress {
		it.status = StatusCompleted
	}
	s.r.seal(it)
	switch it.typ {
	case TypeFunctionCall:
		dst = append(append(s.itemRef(s.event(dst, "response.function_call_arguments.done"), i), `,"name":`...), it.name...)
		dst = eventEnd(append(append(append(dst, `,"arguments":"`...), it.args...), '"'))
	default:
		evt, tail := "response.output_text.done", `","logprobs":[]`
		if it.typ == TypeReasoning {
			evt, tail = "response.reasoning_text.done", `"`
		}
		dst = s.itemRef(s.event(dst, evt), i)
		dst = eventEnd(append(append(append(dst, `,"content_index":0,"text":"`...), it.text...), tail...))
		dst = s.part(dst, "response.content_part.done", i)
	}
	dst = append(strconv.AppendInt(append(s.event(dst, "response.output_item.done"), `,"output_index":`...), int64(i), 10), `,"item":`...)
	return eventEnd(it.appendJSON(dst))
}

// End appends the end of a stream that finished: the open items done,
// then response.completed, or response.incomplete when the model was cut
// short. It does nothing once the stream ended.
func (s *Stream) End(dst []byte) []byte {
	if s.ended {
		return dst
	}
	s.ended = true
	var open []int
	for i, it := range s.r.items {
		if it.status == StatusInProgress {
			open = append(open, i)
		}
	}
	s.r.end(s.finish)
	for _, i := range open {
		dst = s.doneItem(dst, i)
	}
	s.open = -1
	evt := "response.completed"
	if s.r.status == StatusIncomplete {
		evt = "response.incomplete"
	}
	return eventEnd(s.r.AppendJSON(append(s.event(dst, evt), `,"response":`...)))
}

// Fail appends the end of a stream that failed after it started: an
// error event, then response.failed. It does nothing once the stream
// ended.
func (s *Stream) Fail(dst []byte, e *chat.Error) []byte {
	if s.ended {
		return dst
	}
	s.ended = true
	s.r.fail(e.Status, e.Message)
	dst = s.event(dst, "error")
	code, _ := json.Marshal(e.Code)
	param, _ := json.Marshal(e.Param)
	msg, _ := json.Marshal(e.Message)
	dst = append(append(append(dst, `,"code":`...), orNull(code)...), `,"message":`...)
	dst = eventEnd(append(append(append(dst, msg...), `,"param":`...), orNull(param)...))
	return eventEnd(s.r.AppendJSON(append(s.event(dst, "response.failed"), `,"response":`...)))
}

// orNull is b, or null for a value that is not a string or null.
func orNull(b []byte) []byte {
	if len(b) == 0 || (b[0] != '"' && !bytes.Equal(b, []byte("null"))) {
		return []byte("null")
	}
	return b
}
