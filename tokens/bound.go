package tokens

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/jsonscan"
)

// FitBounded is Fit for a request that may not need counting: when the
// size of its messages and tool definitions shows that the prompt fits
// (see sizeBound), nothing is counted (no tokenizer is loaded for it) and
// the result is the messages as they came, with Uncounted set and
// PromptTokens and Estimate 0 (or the count, when every message and tool
// definition was counted before and is still cached). A request the bound
// cannot settle is fitted by Fit. The outcome is Fit's either way: the
// bound is never below the count, so a prompt it passes is one Fit keeps
// whole.
func (c *Counter) FitBounded(model string, msgs []chat.Message, tools []chat.Tool, maxTokens, capTokens int) (Fit, error) {
	m := c.models.resolve(model)
	l := c.learnedOf(m, model, false)
	limits, input := l.limits(m.limits)
	r := l.loadRatio()
	b, err := newBudget(limits, input, r, maxTokens, capTokens)
	if err != nil || !c.withinHistory(msgs) {
		return c.Fit(model, msgs, tools, maxTokens, capTokens)
	}
	switch n, exact := c.sizeBound(m.enc, msgs, tools, b.raw); {
	case n > b.raw:
		return c.Fit(model, msgs, tools, maxTokens, capTokens)
	case exact: // every message was in the cache: the count came for free
		return Fit{Messages: msgs, PromptTokens: n, Estimate: estimate(n, r)}, nil
	}
	return Fit{Messages: msgs, Uncounted: true}, nil
}

// CountPrompt counts a prompt as Fit does, without fitting it: the
// tiktoken count of msgs and tools with their framing, and that count
// corrected by model's learned ratio. It is what a request FitBounded did
// not count costs once its count is needed after all.
func (c *Counter) CountPrompt(model string, msgs []chat.Message, tools []chat.Tool) (counted, estimated int) {
	m := c.models.resolve(model)
	n := c.fixedTokens(m.enc, tools)
	for i := range msgs {
		n += c.messageTokens(m.enc, &msgs[i])
	}
	return n, estimate(n, c.learnedOf(m, model, false).loadRatio())
}

// withinHistory reports whether msgs keep to HistoryWindow.
func (c *Counter) withinHistory(msgs []chat.Message) bool {
	if c.history == 0 || len(msgs) <= c.history {
		return true
	}
	n := 0
	for i := range msgs {
		if !systemRole(msgs[i].Role) {
			n++
		}
	}
	return n <= c.history
}

// fixedTokens counts what every prompt with tools has besides its
// messages: the reply priming and the tool definitions.
func (c *Counter) fixedTokens(e *encoding, tools []chat.Tool) int {
	n := framing(tools)
	for i := range tools {
		n += c.toolTokens(e, &tools[i])
	}
	return n
}

// framing is what a prompt costs besides its messages and its tool
// definitions: the reply priming, and the tools' closing when it has any.
func framing(tools []chat.Tool) int {
	if len(tools) > 0 {
		return replyPriming + funcEnd
	}
	return replyPriming
}

// sizeBound returns a number of tokens at least the count of msgs and
// tools, or any number above limit once it is sure to exceed it, and
// whether it is the count itself. A tool definition or a message the cache
// already holds is taken from it; any other is bounded by toolBound or
// messageBound, so a request that fits by its size loads no tokenizer.
func (c *Counter) sizeBound(e *encoding, msgs []chat.Message, tools []chat.Tool, limit int) (n int, exact bool) {
	n, exact = framing(tools), true
	for i := range tools {
		if k, ok := c.cachedCount(kindTool, e, tools[i].Raw); ok {
			n += k
			continue
		}
		n += c.toolBound(e, &tools[i])
		exact = false
	}
	for i := range msgs {
		if n > limit {
			return n, false
		}
		if k, ok := c.cachedCount(kindMessage, e, msgs[i].Raw); ok {
			n += k
			continue
		}
		n += c.messageBound(e, &msgs[i])
		exact = false
	}
	return n, exact
}

// cachedCount returns the count of raw the cache holds, if it holds one.
func (c *Counter) cachedCount(kind uint8, e *encoding, raw []byte) (int, bool) {
	if len(raw) == 0 {
		return 0, false
	}
	return c.cache.get(c.key(kind, e, raw))
}

// messageBound returns a number at least countMessage's count of m, from
// its size where it can: len(m.Raw), plus the framing of the message and
// of each of its tool calls.
//
// Why that bounds the count: every token of these encodings stands for at
// least one byte of text, even when the text is cut into pieces first, so
// a string counts at most its length in bytes; decoding a JSON string never
// makes it longer than its literal in m.Raw when m.Raw is valid UTF-8 (an
// escape decodes to fewer bytes than it takes, and only invalid bytes
// would grow, into U+FFFD); each string countMessage counts is decoded from
// its own literal in m.Raw, and a name's extra token is paid for by its
// key. Three things are not text, and are added as countMessage adds them:
// the framing of the message, that of each tool call (a call may be as
// short as "{}"), and the fixed count of a content part that is not text
// (an image of 765 tokens may be 40 bytes): a message with an array
// content is counted. So is one whose raw form is not valid UTF-8, or has
// a key that encoding/json reads as role, content or reasoning_content
// without spelling it so: countMessage counts such a string twice, once
// through the decoded field and once as an unknown field.
// TestMessageBound checks the bound against the count.
func (c *Counter) messageBound(e *encoding, m *chat.Message) int {
	if len(m.Raw) == 0 || !utf8.Valid(m.Raw) || contentParts(m.Content) || foldedKey(m.Raw) {
		return c.messageTokens(e, m)
	}
	return tokensPerMessage + perToolCall*len(m.ToolCalls) + len(m.Raw)
}

// toolBound returns a number at least countTool's count of t, from its
// size: len(t.Raw), the per-function framing, the properties' framing, and
// the larger of propKey and enumItem for each structural byte ('{', '['
// and ',') of t.Raw.
//
// Why that bounds the count: each text countTool counts is built from
// strings decoded from their own literals in t.Raw (the name, the
// description, a property's name, type and description, an enum item) or
// compacted from their own values (a schema keyword and its value), joined
// by ':' separators; a decoded string is never longer than its literal when
// t.Raw is valid UTF-8 (see messageBound), compacting never lengthens, and
// each separator is paid for by the quotes of the key or name before it. So
// the texts together count at most len(t.Raw). The rest are constants:
// funcInit and propInit once, and propKey or enumItem for each
// property and each enum item. Those are members of a JSON object or array,
// and an object or array of k members holds k-1 commas and one opening
// bracket, so there are no more of them than structural bytes; enumInit is
// negative. A tool whose raw form is missing or not valid UTF-8 is counted.
// TestToolBound and FuzzToolBound check the bound against the count.
func (c *Counter) toolBound(e *encoding, t *chat.Tool) int {
	if len(t.Raw) == 0 || !utf8.Valid(t.Raw) {
		return c.toolTokens(e, t)
	}
	marks := 0
	for _, b := range t.Raw {
		if b == '{' || b == '[' || b == ',' {
			marks++
		}
	}
	return e.funcInit + propInit + max(propKey, enumItem)*marks + len(t.Raw)
}

// contentParts reports whether raw message content is an array of parts.
func contentParts(raw json.RawMessage) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '['
}

// foldedKeys are the keys countMessage counts both as the decoded field
// and, when spelled otherwise, as an unknown string field.
var foldedKeys = []string{"role", "content", "reasoning_content"}

// foldedKey reports whether raw, a JSON value, has a string (a key, or a
// value: it does not tell them apart, and a value only costs a count)
// that matches one of foldedKeys as encoding/json matches keys, ignoring
// case with its Unicode folds (the long s, the Kelvin sign), without being
// spelled as it. It skips from quote to quote: no decoding, no allocation.
func foldedKey(raw json.RawMessage) bool {
	const longest = 3 * len("reasoning_content") // a fold takes at most 3 bytes a letter
	for i := 0; i < len(raw); {
		q := bytes.IndexByte(raw[i:], '"')
		if q < 0 {
			return false
		}
		start := i + q + 1
		end := jsonscan.StringClose(raw, start)
		if end < 0 {
			return true // not valid JSON: let the count decide
		}
		if s := raw[start:end]; len(s) >= len("role") && len(s) <= longest {
			for _, want := range foldedKeys {
				if string(s) != want && strings.EqualFold(string(s), want) {
					return true
				}
			}
		}
		i = end + 1
	}
	return false
}
