package messages

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/phasegate/phasegate/internal/chunkscan"
)

// StopReason is why a message ended, as the Messages API spells it.
type StopReason string

// Stop reasons.
const (
	StopEndTurn   StopReason = "end_turn"
	StopToolUse   StopReason = "tool_use"
	StopMaxTokens StopReason = "max_tokens"
	StopSequence  StopReason = "stop_sequence"
	StopRefusal   StopReason = "refusal"
)

const (
	idPrefixMessage  = "msg_"
	idPrefixToolUse  = "toolu_"
	signatureContext = "phasegate thinking signature\x00"
)

// messageID is the id of the message that answers the chat completion
// chatID (a JSON string as the upstream wrote it): derived from it, so
// one answer has one id however it is read, or fresh when the upstream
// gave none.
func messageID(chatID []byte) string {
	if !isString(chatID) || len(chatID) == 2 {
		var b [12]byte
		_, _ = rand.Read(b[:])
		return idPrefixMessage + hex.EncodeToString(b[:])
	}
	sum := sha256.Sum256(chatID)
	return idPrefixMessage + hex.EncodeToString(sum[:12])
}

// derived is a digest of the message id and a block's index, for what
// the upstream does not give: a tool call's id, a thinking signature.
func derived(msgID string, index int) [sha256.Size]byte {
	return sha256.Sum256(strconv.AppendInt([]byte(signatureContext+msgID+"\x00"), int64(index), 10))
}

// toolUseID is the id of the tool_use block at index when the upstream
// named none.
func toolUseID(msgID string, index int) []byte {
	d := derived(msgID, index)
	return []byte(`"` + idPrefixToolUse + hex.EncodeToString(d[:12]) + `"`)
}

// signature is the signature of the thinking block at index. A chat
// upstream signs nothing; clients want a signature to send the block
// back with, and the gateway reads the block's text whatever it holds,
// so it only has to be stable: one answer, one signature, streamed or
// not.
func signature(msgID string, index int) string {
	d := derived(msgID, index)
	return base64.StdEncoding.EncodeToString(d[:])
}

// usage is a message's usage, from a chat completion's.
type usage struct {
	input, cacheRead, output int
}

// usageOf translates the usage object of a chat completion: cache hits
// (DeepSeek's prompt_cache_hit_tokens, or OpenAI's
// prompt_tokens_details.cached_tokens) are read from the cache and not
// input, as Anthropic counts them. ok is false when raw holds none.
func usageOf(raw []byte) (u usage, ok bool) {
	if isNull(raw) {
		return u, false
	}
	var c struct {
		PromptTokens         int  `json:"prompt_tokens"`
		CompletionTokens     int  `json:"completion_tokens"`
		PromptCacheHitTokens *int `json:"prompt_cache_hit_tokens"`
		PromptTokensDetails  *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return u, false
	}
	u = usage{input: c.PromptTokens, output: c.CompletionTokens}
	switch {
	case c.PromptTokensDetails != nil:
		u.cacheRead = c.PromptTokensDetails.CachedTokens
	case c.PromptCacheHitTokens != nil:
		u.cacheRead = *c.PromptCacheHitTokens
	}
	u.cacheRead = max(0, min(u.cacheRead, u.input))
	u.input -= u.cacheRead
	return u, true
}

func (u usage) appendJSON(dst []byte) []byte {
	dst = strconv.AppendInt(append(dst, `{"input_tokens":`...), int64(u.input), 10)
	dst = strconv.AppendInt(append(dst, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":`...), int64(u.cacheRead), 10)
	dst = strconv.AppendInt(append(dst, `,"output_tokens":`...), int64(u.output), 10)
	return append(dst, '}')
}

// stopReason translates a chat finish reason. stopSeq is the stop
// sequence the upstream says ended the answer (vLLM's stop_reason,
// SGLang's matched_stop), a stop_sequence stop when it is one of the
// request's; tools reports that the answer holds tool_use blocks, which
// makes it a tool_use stop whatever finish an upstream gave. It returns
// the reason and the stop_sequence member's value.
func stopReason(finish string, stopSeq []byte, stops []string, tools bool) (StopReason, []byte) {
	switch finish {
	case "length":
		return StopMaxTokens, nil
	case "content_filter":
		return StopRefusal, nil
	case "tool_calls", "function_call":
		return StopToolUse, nil
	}
	if tools {
		return StopToolUse, nil
	}
	if finish == "stop" && isString(stopSeq) {
		var s string
		if json.Unmarshal(stopSeq, &s) == nil && slices.Contains(stops, s) {
			return StopSequence, stopSeq
		}
	}
	return StopEndTurn, nil
}

// appendMessageHead appends a message object up to its content array,
// opened.
func appendMessageHead(dst []byte, id, model string) []byte {
	dst = append(append(append(dst, `{"id":"`...), id...), `","type":"message","role":"assistant","model":`...)
	return append(appendString(dst, model), `,"content":[`...)
}

// appendMessageTail appends what follows the content of a message
// object: the array's end, the stop and the usage, and the object's end.
func appendMessageTail(dst []byte, reason StopReason, seq []byte, u usage) []byte {
	dst = append(dst, `],"stop_reason":`...)
	if reason == "" {
		dst = append(dst, "null"...)
	} else {
		dst = append(append(append(dst, '"'), reason...), '"')
	}
	dst = append(dst, `,"stop_sequence":`...)
	if seq == nil {
		seq = []byte("null")
	}
	dst = append(append(dst, seq...), `,"usage":`...)
	return append(u.appendJSON(dst), '}')
}

// FromCompletion translates the body of one chat.completion into the
// message object that answers r: a thinking block from its
// reasoning_content, a text block from its content, a tool_use block
// for each tool call, in that order, as Stream makes them.
func FromCompletion(r Reply, body []byte) ([]byte, error) {
	c, err := chunkscan.DecodeCompletion(body)
	if err != nil {
		return nil, fmt.Errorf("decode chat completion: %w", err)
	}
	id := messageID(c.ID)
	u, ok := usageOf(c.Usage)
	if !ok {
		u = usage{input: r.InputTokens}
	}
	dst := appendMessageHead(make([]byte, 0, len(body)+256), id, r.Model)
	n := 0
	if t := inner(c.Reasoning); t != nil {
		dst = appendThinkingBlock(dst, t, signature(id, n))
		n++
	}
	if t := inner(c.Content); t != nil {
		dst = append(append(append(comma(dst, n), `{"type":"text","text":"`...), t...), `"}`...)
		n++
	}
	for _, tc := range c.Calls {
		callID := tc.ID
		if r.taken(callID) {
			callID = toolUseID(id, n)
		}
		dst = appendToolUseHead(comma(dst, n), callID, tc.Name)
		dst = append(append(dst, `,"input":`...), input(tc.Arguments)...)
		dst = append(dst, '}')
		n++
	}
	var finish string
	_ = json.Unmarshal(c.Finish, &finish)
	reason, seq := stopReason(finish, c.StopReason, r.StopSequences, len(c.Calls) > 0)
	return appendMessageTail(dst, reason, seq, u), nil
}

// taken reports that a tool call's id cannot be its tool_use id: the
// upstream gave none, or the request's history holds a tool_use of that
// id (see Reply.ToolUseIDs).
func (r *Reply) taken(id []byte) bool {
	in := inner(id)
	return in == nil || r.ToolUseIDs[string(in)]
}

func comma(dst []byte, n int) []byte {
	if n > 0 {
		return append(dst, ',')
	}
	return dst
}

func appendThinkingBlock(dst, text []byte, sig string) []byte {
	dst = append(append(append(dst, `{"type":"thinking","thinking":"`...), text...), `","signature":"`...)
	return append(append(dst, sig...), `"}`...)
}

// appendToolUseHead appends a tool_use block up to its input member;
// name is a JSON string, or nil for "".
func appendToolUseHead(dst, id, name []byte) []byte {
	if !isString(name) {
		name = []byte(`""`)
	}
	dst = append(append(append(dst, `{"type":"tool_use","id":`...), id...), `,"name":`...)
	return append(dst, name...)
}

// input is the tool_use input of a call's arguments (a JSON string
// holding JSON): the JSON it holds, or {} when it holds none (an empty
// string, or arguments cut short), as Anthropic's SDKs read a stream
// whose arguments do not parse.
func input(args json.RawMessage) []byte {
	if !isString(args) {
		return []byte("{}")
	}
	var s string
	if json.Unmarshal(args, &s) != nil || !json.Valid([]byte(s)) {
		return []byte("{}")
	}
	return bytes.TrimSpace([]byte(s))
}

// inner returns the body of the JSON string raw (without its quotes), or
// nil when raw is not a non-empty string.
func inner(raw []byte) []byte {
	if len(raw) < 3 || raw[0] != '"' {
		return nil
	}
	return raw[1 : len(raw)-1]
}
