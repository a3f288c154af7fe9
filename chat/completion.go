package chat

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"

	"github.com/phasegate/phasegate/internal/jsonscan"
)

// Completion returns the assembled chat.completion. It is written as
// encoding/json writes the completion as a map (members in key order,
// strings escaped as it escapes them, raw values compacted), in one pass
// over the assembled fields.
func (a *Assembler) Completion() ([]byte, error) {
	o := object{b: make([]byte, 0, a.size()), extra: a.extra}
	o.b = append(o.b, '{')
	o.extras = o.sortedExtras()
	o.key("choices")
	o.b = append(o.b, `[{"finish_reason":`...)
	o.nullableString(a.finish)
	o.b = append(o.b, `,"index":0,"logprobs":null,"message":`...)
	a.appendMessage(&o)
	o.b = append(o.b, "}]"...)
	o.key("created")
	o.b = strconv.AppendInt(o.b, a.header.Created, 10)
	o.key("id")
	o.b = appendJSONString(o.b, a.header.ID)
	o.key("model")
	o.b = appendJSONString(o.b, a.header.Model)
	o.key("object")
	o.b = append(o.b, `"chat.completion"`...)
	if a.header.SystemFingerprint != "" {
		o.key("system_fingerprint")
		o.b = appendJSONString(o.b, a.header.SystemFingerprint)
	}
	if len(a.usage) > 0 {
		o.key("usage")
		o.raw(a.usage)
	}
	o.key("")
	if o.err != nil {
		return nil, fmt.Errorf("encode completion: %w", o.err)
	}
	return append(o.b, '}'), nil
}

// size is about the length of the completion written, escapes aside:
// what Completion makes room for at once.
func (a *Assembler) size() int {
	n := 384 + len(a.header.ID) + len(a.header.Model) + len(a.header.SystemFingerprint) +
		a.content.Len() + a.reasoning.Len() + len(a.usage)
	for k, v := range a.extra {
		n += len(k) + len(v) + 4
	}
	for _, c := range a.calls {
		n += 64 + len(c.ID) + len(c.Function.Name) + len(c.Function.Arguments)
	}
	return n
}

// appendMessage appends choice 0's message: content (null when the answer
// is only tool calls), reasoning_content when there was any, refusal
// (required by the schema, null: the gateway never assembles one), role,
// and the tool calls in index order.
func (a *Assembler) appendMessage(o *object) {
	role := "assistant"
	if a.role != "" {
		role = a.role
	}
	o.b = append(o.b, `{"content":`...)
	if a.hasText || len(a.calls) == 0 {
		o.b = appendJSONString(o.b, a.content.String())
	} else {
		o.b = append(o.b, "null"...)
	}
	if a.hasReason {
		o.b = append(o.b, `,"reasoning_content":`...)
		o.b = appendJSONString(o.b, a.reasoning.String())
	}
	o.b = append(o.b, `,"refusal":null,"role":`...)
	o.b = appendJSONString(o.b, role)
	if len(a.calls) > 0 {
		enc, err := json.Marshal(a.sortedCalls())
		if err != nil && o.err == nil {
			o.err = err
		}
		o.b = append(append(o.b, `,"tool_calls":`...), enc...)
	}
	o.b = append(o.b, '}')
}

// sortedCalls returns the assembled tool calls in index order.
func (a *Assembler) sortedCalls() []ToolCall {
	calls := make([]ToolCall, 0, len(a.calls))
	for _, i := range slices.Sorted(maps.Keys(a.calls)) {
		calls = append(calls, *a.calls[i])
	}
	return calls
}

// object writes the members of a JSON object in key order, the kept
// members of the chunks (extra, whose keys are none of a completion's
// own) merged in among the completion's.
type object struct {
	b      []byte
	n      int
	extra  map[string]json.RawMessage
	extras []string // the keys of extra not yet written, in order
	err    error
}

func (o *object) sortedExtras() []string {
	if len(o.extra) == 0 {
		return nil
	}
	keys := make([]string, 0, len(o.extra))
	for k := range o.extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// key writes the extra members whose keys come before k, then k's; ""
// writes the extra members left.
func (o *object) key(k string) {
	for len(o.extras) > 0 && (k == "" || o.extras[0] < k) {
		e := o.extras[0]
		o.extras = o.extras[1:]
		o.name(e)
		o.raw(o.extra[e])
	}
	if k != "" {
		o.name(k)
	}
}

func (o *object) name(k string) {
	if o.n > 0 {
		o.b = append(o.b, ',')
	}
	o.n++
	o.b = append(appendJSONString(o.b, k), ':')
}

func (o *object) nullableString(s *string) {
	if s == nil {
		o.b = append(o.b, "null"...)
		return
	}
	o.b = appendJSONString(o.b, *s)
}

// raw writes v as encoding/json writes a json.RawMessage (appendRaw).
func (o *object) raw(v json.RawMessage) {
	var err error
	if o.b, err = appendRaw(o.b, v); err != nil && o.err == nil {
		o.err = err
	}
}

// appendRaw appends v as encoding/json writes a json.RawMessage member:
// null when nil, as it is when it is valid and has no space and nothing
// encoding/json escapes, else by encoding/json, which compacts it (and
// fails on what is not JSON).
func appendRaw(dst []byte, v json.RawMessage) ([]byte, error) {
	if v == nil {
		return append(dst, "null"...), nil
	}
	plain := true
	for _, c := range v {
		switch c {
		case ' ', '\t', '\n', '\r', '<', '>', '&', 0xE2:
			plain = false
		}
	}
	if plain && json.Valid(v) {
		return append(dst, v...), nil
	}
	enc, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(dst, enc...), nil
}

// appendJSONString appends s as json.Marshal writes a string: <, > and &
// escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte { return jsonscan.AppendString(b, s, true) }
