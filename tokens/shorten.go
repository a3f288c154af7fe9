package tokens

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/phasegate/phasegate/chat"
)

// markerReserve is the room a shortened tool result keeps for the marker
// (13 tokens with a five-digit count, in both encodings) and the message
// framing (4), so that the result stays within ToolResultMaxTokens.
const markerReserve = 24

// shortenTries bounds the passes that shrink the kept head and tail when
// the bytes-per-token guess was too generous.
const shortenTries = 4

// marker replaces the middle of a shortened tool result.
func marker(omitted int) string {
	return fmt.Sprintf("\n…[phasegate: %d tokens omitted]…\n", omitted)
}

// shorten keeps the head and the tail of a tool result's text, about
// toolMax tokens together with the marker, and reports the new message and
// its count. ok is false when the content is not text or would not get
// shorter. Results are cached by the original's raw bytes.
func (c *Counter) shorten(e *encoding, m chat.Message, count int) (_ chat.Message, _ int, ok bool, _ error) {
	if len(m.Raw) == 0 {
		return c.shortenText(e, m, count)
	}
	k := c.key(kindShortened, e, m.Raw)
	if s, n, ok := c.shortened.get(k); ok {
		return s, n, true, nil
	}
	s, n, ok, err := c.shortenText(e, m, count)
	if ok {
		c.shortened.put(k, s, n)
	}
	return s, n, ok, err
}

// shortenText does the work of shorten. The head and tail are sized from
// the message's bytes per token and recounted; the counts go through the
// cache.
func (c *Counter) shortenText(e *encoding, m chat.Message, count int) (_ chat.Message, _ int, ok bool, _ error) {
	if !textOnly(m.Content) {
		return m, count, false, nil
	}
	text := m.Text()
	target := c.toolMax - markerReserve
	perToken := float64(len(text)) / float64(max(count, 1))
	headBytes := int(float64(target/2) * perToken)
	tailBytes := int(float64(target-target/2) * perToken)
	var head, tail int
	for range shortenTries {
		head = cutBefore(text, headBytes)
		tail = cutAfter(text, len(text)-tailBytes)
		if head >= tail {
			return m, count, false, nil
		}
		got := c.textTokens(e, text[:head]) + c.textTokens(e, text[tail:])
		if got <= target {
			break
		}
		scale := float64(target) / float64(got) * 0.95
		headBytes = int(float64(head) * scale)
		tailBytes = int(float64(len(text)-tail) * scale)
	}
	omitted := c.textTokens(e, text[head:tail])
	s, err := m.With("content", text[:head]+marker(omitted)+text[tail:])
	if err != nil {
		return m, count, false, fmt.Errorf("shorten tool result: %w", err)
	}
	n := c.messageTokens(e, &s)
	if n >= count {
		return m, count, false, nil
	}
	return s, n, true, nil
}

// textOnly reports whether content is a string or an array of text parts
// only: what can be shortened without losing a part.
func textOnly(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return false
	}
	if raw[0] == '"' {
		return true
	}
	var parts []struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &parts) != nil || len(parts) == 0 {
		return false
	}
	for _, p := range parts {
		if p.Type != "text" {
			return false
		}
	}
	return true
}

// snapWindow is how far a cut moves to land after a line break or a
// space: at most 512 bytes, and at most a quarter of the part it trims.
const snapWindow = 512

// cutBefore returns a cut at or before i: after the last line break, else
// after the last space, within the snap window; else at a rune boundary.
func cutBefore(s string, i int) int {
	i = min(max(i, 0), len(s))
	lo := i - min(snapWindow, i/4)
	if j := strings.LastIndexByte(s[lo:i], '\n'); j >= 0 {
		return lo + j + 1
	}
	if j := strings.LastIndexByte(s[lo:i], ' '); j >= 0 {
		return lo + j + 1
	}
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// cutAfter returns a cut at or after i: after the next line break, else
// after the next space, within the snap window; else at a rune boundary.
func cutAfter(s string, i int) int {
	i = min(max(i, 0), len(s))
	hi := i + min(snapWindow, (len(s)-i)/4)
	if j := strings.IndexByte(s[i:hi], '\n'); j >= 0 {
		return i + j + 1
	}
	if j := strings.IndexByte(s[i:hi], ' '); j >= 0 {
		return i + j + 1
	}
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return i
}
