package deepseek

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/jsonscan"
	"github.com/phasegate/phasegate/tools"
)

// ErrLeakMalformed is wrapped by the error of a leaked tool call that could
// not be recovered: its block does not parse, or never closed.
var ErrLeakMalformed = errors.New("malformed leaked tool call")

// LeakedCall is a tool call found in content text, or a block of content
// that looked like one and did not parse.
type LeakedCall struct {
	// Call has Type "function", Function.Name and Function.Arguments (one
	// JSON object: the model's own JSON text, trimmed, or for DSML
	// parameters an object built from them, in order: string="true" values
	// as JSON strings, string="false" values as the JSON they hold). ID is
	// empty: the caller assigns one. When Err is set, Name and Arguments
	// hold what could be read, possibly nothing.
	Call chat.ToolCall
	// Raw is the content this call was read from. The Raws of the calls of
	// one block, in order, make up the block from its opening marker to its
	// closing one, so the text Feed and Flush return and the Raws, in
	// stream order, make up the content byte for byte.
	Raw string
	// Err is nil for a recovered call. Otherwise it wraps ErrLeakMalformed
	// and says what was wrong, naming the tool but never quoting argument
	// values.
	Err error
}

// maxOpenerLen is the length of the longest opening marker the scanner
// recognises, counting the byte after a DSML tag name that ends it:
// "< ‖‖ DSML ‖‖ function_calls>", with a space at each of the four places
// DSML allows one and two three-byte bars on each side. Feed holds back at
// most maxOpenerLen-1 bytes of text.
const maxOpenerLen = 36

// maxLeakBlock bounds the bytes held for one leaked block. A block that
// grows past it is refused, and the rest of the content dropped: the guard
// re-asks on a refused call, so nobody reads it.
const maxLeakBlock = 1 << 20

// LeakScanner finds tool calls that a DeepSeek model wrote into its content
// text instead of sending tool_calls deltas, in a stream of content pieces.
// Its zero value is ready to use. It is not safe for concurrent use.
//
// # Formats
//
// DeepSeek's chat templates make tool calls out of special tokens or tags.
// When the serving stack fails to parse them they reach the client as
// content; these forms are recognised, in any mix of the spellings below:
//
//   - V3 and R1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//     then the arguments in a ```json fence, <｜tool▁call▁end｜>, more calls,
//     <｜tool▁calls▁end｜>. R1 also opens with <｜tool▁calls｜>.
//   - V3.1: <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>, with or
//     without the <｜tool▁calls▁begin｜> … <｜tool▁calls▁end｜> wrapper.
//   - DSML, V3.2 and V4: <｜DSML｜function_calls> (V3.2) or <｜DSML｜tool_calls>
//     (V4), then per call <｜DSML｜invoke name="NAME"> holding either
//     <｜DSML｜parameter name="P" string="true|false">VALUE</｜DSML｜parameter>
//     tags or one JSON object, then </｜DSML｜invoke>, and the closing
//     </｜DSML｜function_calls> or </｜DSML｜tool_calls>. An invoke may also
//     stand alone, without the wrapper. A parameter may be self-closing, its
//     value in the string attribute: <｜｜DSML｜｜invoke name="P" string="V"/>.
//
// Spellings seen from agents and serving stacks: the bar is ｜ (U+FF5C), |
// or ‖ (U+2016), single or doubled; the words of a V3 token are joined by ▁
// (U+2581), _, a space or \_; DSML allows a space after <, around its bars
// and before the tag name; letters match in any case. A closing marker need
// not be spelled like its opening one.
//
// # Code is text
//
// A marker is a leaked call only outside Markdown code, as judged from the
// content so far, so that a model explaining these formats in a code block
// the user asked for is not cut short:
//
//   - A fenced code block opens at a line whose first non-blank characters
//     are three or more backticks or tildes, at any indentation, and closes
//     at a line of at least as many of the same character and nothing else
//     but blanks; an unclosed fence runs to the end of the content
//     (CommonMark, except that any indentation is allowed, so fences in list
//     items count). A backtick fence whose info string holds a backtick is
//     an inline code span instead, as in CommonMark.
//   - An inline code span opens at a run of backticks outside a fence and
//     closes at the next run of the same length, or at the end of the line:
//     unlike CommonMark, a span never continues onto the next line, so a
//     stray backtick shields markers for the rest of its line only.
//
// Indented code blocks (four spaces, no fence), HTML, quotes and block
// quotes are not code: a marker there is a leaked call, and what does not
// parse is refused rather than shown.
//
// # Streaming
//
// Every marker starts with '<'. Text passes through at once, except a tail
// that starts with '<' and could still grow into an opening marker (at most
// 35 bytes, the longest opening marker but one), and everything from an opening marker on until its
// block closes. Pieces may be split anywhere, even inside a UTF-8 sequence;
// text is cut only at piece ends and before a '<', so pieces of whole runes
// give text of whole runes. Content that holds no '<' outside code is
// returned piece for piece without copying.
//
// Only opening markers start a block; a closing or inner marker met outside
// a block is text. A block yields its calls, in order, when it closes: one
// LeakedCall per call, with Err set for a call that does not parse and for
// text in the block that is not a call; a closed block with no call in it
// is refused too. At the end of the content, Flush refuses an unclosed
// block, except that calls that closed before the end are recovered, so a
// wrapper whose closing marker alone is missing loses nothing.
//
// # Sources
//
// The formats are those of the parsers in sgl-project/sglang
// (python/sglang/srt/function_call/deepseekv3_detector.py, after the
// DeepSeek-V3-0324 chat template; deepseekv31_detector.py;
// deepseekv32_detector.py, with its JSON-body invoke; deepseekv4_detector.py)
// and ggml-org/llama.cpp (common/parsers/deepseek.cpp: V3.2 names the block
// function_calls, V4 tool_calls; common_chat_parse_deepseek_r1 in
// common/chat.cpp accepts <｜tool_calls_begin｜>, <｜tool calls begin｜>,
// <｜tool\_calls\_begin｜> and <｜tool▁calls｜>). Leaks into content, and their
// spellings, as reported: sgl-project/sglang#35736, TokenRhythm/opensquilla#985
// and NousResearch/hermes-agent#119261 (V4 DSML as content);
// lsdefine/GenericAgent#804 (<‖DSML‖tool_calls>, <｜｜DSML｜｜parameter>, a
// marker split as "hello<‖DS" + "ML‖tool_calls>world");
// MetaFARS/codex-relay#49 (doubled bars, self-closing parameters);
// AgentFlocks/flocks#687 (< | DSML | …>, <||DSML||tool_calls>);
// smg-project/smg#1030 (a real stream splitting "<｜DSML｜", "tool", "_c",
// "alls"). sglang's DeepSeek V4 parser likewise leaves protocol text in
// Markdown code alone (deepseekv4_format.py, mask_literals); ours is the
// narrower rule above, code only, not quotes.
type LeakScanner struct {
	code codeState
	// held is, outside a block, a tail that may start an opening marker.
	held string
	// block is, inside a block, the block so far from its opening marker.
	block strings.Builder
	in    blockKind
	// scanFrom is where the search for the closing marker resumes, as an
	// index into block.
	scanFrom int
	// discard drops content after a block outgrew maxLeakBlock.
	discard bool
	leaked  bool
}

type blockKind uint8

const (
	blockNone   blockKind = iota
	blockCalls            // <｜tool▁calls▁begin｜> … <｜tool▁calls▁end｜>
	blockCall             // <｜tool▁call▁begin｜> … <｜tool▁call▁end｜>
	blockDSML             // <｜DSML｜tool_calls> … </｜DSML｜tool_calls>
	blockInvoke           // <｜DSML｜invoke …> … </｜DSML｜invoke>
)

// Leaked reports whether an opening marker was seen outside code, whether
// or not its block parsed. Flush does not reset it.
func (s *LeakScanner) Leaked() bool { return s.leaked }

// Feed takes the next content piece. It returns the text that is safe to
// pass to the client now, and the leaked calls whose blocks closed in this
// piece.
func (s *LeakScanner) Feed(piece string) (text string, calls []LeakedCall) {
	if s.discard {
		return "", nil
	}
	buf, start, inBuilder := piece, 0, false
	switch {
	case s.in != blockNone:
		s.block.WriteString(piece)
		buf, inBuilder = s.block.String(), true
	case s.held != "":
		buf, s.held = s.held+piece, ""
	}
	pos := 0
	for {
		if s.in == blockNone {
			at, t, m := s.scanText(buf, pos)
			text = joinText(text, buf[pos:at])
			switch m {
			case matchNo:
				return text, calls
			case matchPartial:
				s.held = buf[at:]
				return text, calls
			}
			s.leaked = true
			s.in = t.block()
			start, s.scanFrom, inBuilder = at, t.end, false
		}
		end, closed := s.findClose(buf)
		if !closed {
			if !inBuilder {
				s.block.WriteString(buf[start:])
				s.scanFrom -= start
			}
			if s.block.Len() > maxLeakBlock {
				calls = append(calls, LeakedCall{
					Call: chat.ToolCall{Type: "function"},
					Raw:  s.block.String(),
					Err:  fmt.Errorf("%w: block longer than %d bytes", ErrLeakMalformed, maxLeakBlock),
				})
				s.block.Reset()
				s.in, s.discard = blockNone, true
			}
			return text, calls
		}
		calls = append(calls, parseBlock(s.in, buf[start:end], true)...)
		s.in, inBuilder = blockNone, false
		s.block.Reset()
		s.code.afterBlock()
		pos = end
	}
}

// Flush ends the content. It returns the held-back text that turned out
// not to start a marker, and the calls of a block still open: those that
// closed before the end, then one with Err set for the rest, unless the
// rest is blank and a call was recovered. The scanner is then ready for
// another content stream; Leaked keeps its value.
func (s *LeakScanner) Flush() (text string, calls []LeakedCall) {
	switch {
	case s.discard:
	case s.in != blockNone:
		calls = parseBlock(s.in, s.block.String(), false)
	default:
		text = s.held
	}
	*s = LeakScanner{leaked: s.leaked}
	return text, calls
}

// join concatenates text pieces, copying only when both are non-empty.
func joinText(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	return a + b
}

// scanText advances the code state over buf[pos:] up to the first '<'
// outside code that starts an opening marker, or may once more bytes come
// (matchPartial), and returns its index; or len(buf) and matchNo.
func (s *LeakScanner) scanText(buf string, pos int) (int, marker, markerMatch) {
	cs := &s.code
	for i := pos; i < len(buf); i++ {
		c := buf[i]
		if textByte[c] {
			// The common case: a byte of prose that changes nothing once
			// the line has started.
			if cs.run == 0 && cs.midLine && cs.line != lineClose {
				continue
			}
			cs.step(c)
			continue
		}
		if c == '<' {
			if cs.run != 0 {
				cs.endRun()
			}
			if cs.fence == 0 && cs.ticks == 0 {
				if t, m := matchTag(buf, i, true); m != matchNo {
					return i, t, m
				}
			}
		}
		cs.step(c)
	}
	return len(buf), marker{}, matchNo
}

// findClose looks for the closing marker of the open block in buf, from
// s.scanFrom on. It returns the index just past it, or false and where to
// resume once more bytes come.
func (s *LeakScanner) findClose(buf string) (int, bool) {
	i := s.scanFrom
	for {
		k := strings.IndexByte(buf[i:], '<')
		if k < 0 {
			s.scanFrom = len(buf)
			return 0, false
		}
		i += k
		t, m := matchTag(buf, i, false)
		if m == matchPartial {
			s.scanFrom = i
			return 0, false
		}
		if m == matchFull && s.in.closedBy(t) {
			end, m := closeEnd(buf, t)
			if m == matchPartial {
				s.scanFrom = i
				return 0, false
			}
			if m == matchFull {
				return end, true
			}
		}
		i++
	}
}

func (k blockKind) closedBy(t marker) bool {
	switch k {
	case blockCalls:
		return t.kind == tagCallsEnd
	case blockCall:
		return t.kind == tagCallEnd
	case blockDSML:
		return t.kind == tagBlock && t.close
	case blockInvoke:
		return t.kind == tagInvoke && t.close
	}
	return false
}

// closeEnd returns the index just past the closing tag t: a DSML tag still
// needs its '>', after optional blanks.
func closeEnd(s string, t marker) (int, markerMatch) {
	if !t.dsml() {
		return t.end, matchFull
	}
	j := skipBlank(s, t.end)
	if j >= len(s) {
		return 0, matchPartial
	}
	if s[j] != '>' {
		return 0, matchNo
	}
	return j + 1, matchFull
}

// Markers.

type tagKind uint8

const (
	tagNone       tagKind = iota
	tagCallsBegin         // <｜tool▁calls▁begin｜>, R1's <｜tool▁calls｜>
	tagCallsEnd           // <｜tool▁calls▁end｜>
	tagCallBegin          // <｜tool▁call▁begin｜>
	tagCallEnd            // <｜tool▁call▁end｜>
	tagSep                // <｜tool▁sep｜>
	tagBlock              // <｜DSML｜function_calls>, <｜DSML｜tool_calls>
	tagInvoke             // <｜DSML｜invoke
	tagParam              // <｜DSML｜parameter
)

// marker is the head of a marker: for a V3 token the whole token, for a
// DSML tag up to the tag name, before its attributes and '>'.
type marker struct {
	kind  tagKind
	close bool // </…>, DSML only
	start int  // index of '<'
	end   int  // index just past the head
}

func (t marker) dsml() bool { return t.kind >= tagBlock }

func (t marker) block() blockKind {
	switch t.kind {
	case tagCallsBegin:
		return blockCalls
	case tagCallBegin:
		return blockCall
	case tagBlock:
		return blockDSML
	case tagInvoke:
		return blockInvoke
	}
	return blockNone
}

// markerMatch says whether text at a '<' is a marker.
type markerMatch uint8

const (
	matchNo      markerMatch = iota
	matchPartial             // s ends before it is decided: more bytes may make a marker
	matchFull
)

func partialOrNo(n int) markerMatch {
	if n < 0 {
		return matchPartial
	}
	return matchNo
}

// matchTag matches a marker head at s[i], which is '<'. With opener set it
// matches only the heads that open a block, and says matchPartial only
// while s could still grow into one.
//
// Grammar (letters in any case):
//
//	V3:   "<" BARS "tool" SEP ( "calls" ( BARS | SEP ("begin"|"end") )
//	                          | "call" SEP ("begin"|"end") | "sep" ) BARS ">"
//	DSML: "<" SP? ("/" SP?)? BARS SP? "dsml" SP? BARS SP?
//	      ("function_calls"|"tool_calls"|"invoke"|"parameter") [> / blank]
//	BARS: one or two of "｜" "|" "‖";  SEP: "▁" "_" " " "\_";  SP: " "
func matchTag(s string, i int, opener bool) (marker, markerMatch) {
	t := marker{start: i}
	j := i + 1
	spaced := false
	if j < len(s) && s[j] == ' ' {
		j++
		spaced = true
	}
	if j >= len(s) {
		return t, matchPartial
	}
	if s[j] == '/' {
		if opener {
			return t, matchNo
		}
		t.close = true
		j++
		if j < len(s) && s[j] == ' ' {
			j++
			spaced = true
		}
	}
	j, m := barsAt(s, j)
	if m != matchFull {
		return t, m
	}
	if j < len(s) && s[j] == ' ' {
		j++
		spaced = true
	}
	if j >= len(s) {
		return t, matchPartial
	}
	switch lowerASCII(s[j]) {
	case 'd':
		return matchDSML(s, j, t, opener)
	case 't':
		if spaced || t.close {
			return t, matchNo
		}
		return matchToken(s, j, t, opener)
	}
	return t, matchNo
}

// matchToken matches the rest of a V3 token from its word "tool" at s[j].
func matchToken(s string, j int, t marker, opener bool) (marker, markerMatch) {
	n := litFold(s, j, "tool")
	if n <= 0 {
		return t, partialOrNo(n)
	}
	j, m := sepAt(s, j+n)
	if m != matchFull {
		return t, m
	}
	if j >= len(s) {
		return t, matchPartial
	}
	switch lowerASCII(s[j]) {
	case 's':
		if opener {
			return t, matchNo
		}
		if n = litFold(s, j, "sep"); n <= 0 {
			return t, partialOrNo(n)
		}
		t.kind = tagSep
		return closeBars(s, j+n, t)
	case 'c':
		if n = litFold(s, j, "call"); n <= 0 {
			return t, partialOrNo(n)
		}
		return matchCallToken(s, j+n, t, opener)
	}
	return t, matchNo
}

// matchCallToken matches the rest of a V3 call token after its words
// "tool" and "call" (s[j] is what follows "call"): an 's', then begin or
// end.
func matchCallToken(s string, j int, t marker, opener bool) (marker, markerMatch) {
	if j >= len(s) {
		return t, matchPartial
	}
	plural := lowerASCII(s[j]) == 's'
	if plural {
		j++
		if _, m := barsAt(s, j); m == matchPartial {
			return t, matchPartial
		} else if m == matchFull {
			t.kind = tagCallsBegin // R1's <｜tool▁calls｜>
			return closeBars(s, j, t)
		}
	}
	j, m := sepAt(s, j)
	if m != matchFull {
		return t, m
	}
	if j >= len(s) {
		return t, matchPartial
	}
	var n int
	switch lowerASCII(s[j]) {
	case 'b':
		n = litFold(s, j, "begin")
		t.kind = tagCallBegin
		if plural {
			t.kind = tagCallsBegin
		}
	case 'e':
		if opener {
			return t, matchNo
		}
		n = litFold(s, j, "end")
		t.kind = tagCallEnd
		if plural {
			t.kind = tagCallsEnd
		}
	default:
		return t, matchNo
	}
	if n <= 0 {
		return t, partialOrNo(n)
	}
	return closeBars(s, j+n, t)
}

// closeBars matches the bars and '>' that end a V3 token.
func closeBars(s string, j int, t marker) (marker, markerMatch) {
	j, m := barsAt(s, j)
	if m != matchFull {
		return t, m
	}
	if j >= len(s) {
		return t, matchPartial
	}
	if s[j] != '>' {
		return t, matchNo
	}
	t.end = j + 1
	return t, matchFull
}

var dsmlNames = [...]struct {
	name string
	kind tagKind
}{
	{"function_calls", tagBlock},
	{"tool_calls", tagBlock},
	{"invoke", tagInvoke},
	{"parameter", tagParam},
}

// matchDSML matches the rest of a DSML tag head from "dsml" at s[j].
func matchDSML(s string, j int, t marker, opener bool) (marker, markerMatch) {
	n := litFold(s, j, "dsml")
	if n <= 0 {
		return t, partialOrNo(n)
	}
	j += n
	if j < len(s) && s[j] == ' ' {
		j++
	}
	j, m := barsAt(s, j)
	if m != matchFull {
		return t, m
	}
	if j < len(s) && s[j] == ' ' {
		j++
	}
	if j >= len(s) {
		return t, matchPartial
	}
	m = matchNo
	for _, d := range dsmlNames {
		if opener && d.kind == tagParam {
			continue
		}
		n := litFold(s, j, d.name)
		if n < 0 {
			m = matchPartial
		}
		if n > 0 {
			j += n
			if j >= len(s) {
				return t, matchPartial
			}
			switch s[j] {
			case '>', '/', ' ', '\t', '\r', '\n':
				t.kind, t.end = d.kind, j
				return t, matchFull
			}
			return t, matchNo
		}
	}
	return t, m
}

// bars matches one or two bars at s[j] and returns the index after them.
func barsAt(s string, j int) (int, markerMatch) {
	n := barAt(s, j)
	if n <= 0 {
		return j, partialOrNo(n)
	}
	j += n
	n = barAt(s, j)
	if n < 0 {
		return j, matchPartial
	}
	return j + n, matchFull
}

// barAt returns the length of the bar at s[j], 0 if there is none, -1 if s
// ends before that is decided.
func barAt(s string, j int) int {
	if j >= len(s) {
		return -1
	}
	switch s[j] {
	case '|':
		return 1
	case 0xEF:
		return litAt(s, j, "｜")
	case 0xE2:
		return litAt(s, j, "‖")
	}
	return 0
}

// sepAt matches the separator between the words of a V3 token.
func sepAt(s string, j int) (int, markerMatch) {
	if j >= len(s) {
		return j, matchPartial
	}
	n := 0
	switch s[j] {
	case '_', ' ':
		n = 1
	case '\\':
		n = litAt(s, j, `\_`)
	case 0xE2:
		n = litAt(s, j, "▁")
	}
	if n <= 0 {
		return j, partialOrNo(n)
	}
	return j + n, matchFull
}

// litAt returns len(lit) if s[j:] starts with lit, -1 if s[j:] is a proper
// prefix of it, 0 otherwise.
func litAt(s string, j int, lit string) int {
	for k := 0; k < len(lit); k++ {
		if j+k >= len(s) {
			return -1
		}
		if s[j+k] != lit[k] {
			return 0
		}
	}
	return len(lit)
}

// litFold is litAt ignoring ASCII case; lit is lower case.
func litFold(s string, j int, lit string) int {
	for k := 0; k < len(lit); k++ {
		if j+k >= len(s) {
			return -1
		}
		if lowerASCII(s[j+k]) != lit[k] {
			return 0
		}
	}
	return len(lit)
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// Code state.

type lineKind uint8

const (
	lineNormal lineKind = iota
	lineInfo            // a fence opened on this line: the rest is its info string
	lineClose           // inside a fence, the line so far may close it
)

// codeState follows Markdown code in the text outside blocks, one byte at
// a time, so that any split of the content gives the same answers.
type codeState struct {
	fence    byte // '`' or '~' inside a fenced code block, else 0
	fenceLen int
	ticks    int // length of the backtick run that opened the inline code span, 0 outside one
	run      byte
	runLen   int
	runStart bool // the run began at the start of its line, after blanks only
	midLine  bool // a non-blank byte was seen on this line
	line     lineKind
}

// textByte marks the bytes that matter to codeState only by not being
// blank: everything but backticks, tildes, blanks, newlines and '<'.
var textByte = func() (t [256]bool) {
	for i := range t {
		t[i] = true
	}
	for _, c := range "`~ \t\r\n<" {
		t[c] = false
	}
	return t
}()

func (cs *codeState) step(c byte) {
	if cs.run != 0 && c != cs.run {
		cs.endRun()
	}
	switch c {
	case '`', '~':
		if cs.run == 0 {
			cs.run, cs.runLen, cs.runStart = c, 0, !cs.midLine
		}
		cs.runLen++
		cs.midLine = true
	case '\n':
		if cs.fence != 0 && cs.line == lineClose {
			cs.fence, cs.fenceLen = 0, 0
		}
		cs.ticks = 0 // an inline code span ends with its line
		cs.line, cs.midLine = lineNormal, false
	case ' ', '\t', '\r':
	default:
		cs.midLine = true
		if cs.line == lineClose {
			cs.line = lineNormal
		}
	}
}

// endRun decides what the run of backticks or tildes that just ended does.
func (cs *codeState) endRun() {
	c, n := cs.run, cs.runLen
	cs.run, cs.runLen = 0, 0
	switch {
	case cs.fence != 0 && cs.line == lineInfo:
		if cs.fence == '`' && c == '`' {
			// A backtick fence's info string holds no backtick
			// (CommonMark 4.5): the opening run was an inline span.
			cs.ticks = cs.fenceLen
			cs.fence, cs.fenceLen, cs.line = 0, 0, lineNormal
			if n == cs.ticks {
				cs.ticks = 0
			}
		}
	case cs.fence != 0:
		if cs.line == lineClose {
			cs.line = lineNormal
		} else if cs.runStart && c == cs.fence && n >= cs.fenceLen {
			cs.line = lineClose
		}
	case cs.ticks != 0:
		if c == '`' && n == cs.ticks {
			cs.ticks = 0
		}
	case cs.runStart && n >= 3:
		cs.fence, cs.fenceLen, cs.line = c, n, lineInfo
	case c == '`':
		cs.ticks = n
	}
}

// afterBlock records that a leaked block just ended, in the middle of a
// line.
func (cs *codeState) afterBlock() { cs.midLine = true }

// Parsing a block.

// results collects the calls of a block and where each ends, so that their
// Raws tile the block.
type leakResults struct {
	calls []LeakedCall
	ends  []int
}

func (r *leakResults) add(end int, fc chat.FunctionCall, err error) {
	r.calls = append(r.calls, LeakedCall{Call: chat.ToolCall{Type: "function", Function: fc}, Err: err})
	r.ends = append(r.ends, end)
}

func (r *leakResults) fail(end int, name, format string, args ...any) {
	r.add(end, chat.FunctionCall{Name: name}, fmt.Errorf("%w: "+format, append([]any{ErrLeakMalformed}, args...)...))
}

func (r *leakResults) tile(b string) []LeakedCall {
	prev := 0
	for i := range r.calls {
		end := max(r.ends[i], prev)
		if i == len(r.calls)-1 {
			end = len(b)
		}
		r.calls[i].Raw = b[prev:end]
		prev = end
	}
	return r.calls
}

// endReason says why a block ends without its closing marker.
func endReason(closed bool) string {
	if closed {
		return "unexpected text in the block"
	}
	return "block not closed before the end of the content"
}

func parseBlock(k blockKind, b string, closed bool) []LeakedCall {
	if k == blockDSML || k == blockInvoke {
		return parseDSML(b, closed)
	}
	return parseTokens(b, closed)
}

// parseTokens reads the calls of a V3 or V3.1 block.
func parseTokens(b string, closed bool) []LeakedCall {
	toks := tokenMarkers(b)
	var r leakResults
	p, i := 0, 0
	if len(toks) > 0 && toks[0].start == 0 && toks[0].kind == tagCallsBegin {
		p, i = toks[0].end, 1
	}
	for {
		if i == len(toks) {
			if !allBlank(b[p:]) || len(r.calls) == 0 {
				r.fail(len(b), "", "%s", endReason(closed))
			}
			break
		}
		t := toks[i]
		if !allBlank(b[p:t.start]) {
			r.fail(t.start, "", "unexpected text in the block")
		}
		if t.kind == tagCallsEnd {
			if len(r.calls) == 0 {
				r.fail(t.end, "", "no tool call in the block")
			}
			break
		}
		if t.kind == tagCallBegin && i+2 < len(toks) && toks[i+1].kind == tagSep && toks[i+2].kind == tagCallEnd {
			sep, end := toks[i+1], toks[i+2]
			fc, err := tokenCall(b[t.end:sep.start], b[sep.end:end.start])
			r.add(end.end, fc, err)
			p, i = end.end, i+3
			continue
		}
		// Not a well-formed call: refuse up to its end, or to the next call.
		end, next := malformedEnd(b, toks, i)
		if end == len(b) && !closed {
			r.fail(end, "", "%s", endReason(false))
		} else {
			r.fail(end, "", "tool call markers out of order")
		}
		p, i = end, next
	}
	return r.tile(b)
}

// tokenMarkers finds the V3 and V3.1 tokens of a block, in order.
func tokenMarkers(b string) []marker {
	var toks []marker
	for i := 0; ; {
		k := strings.IndexByte(b[i:], '<')
		if k < 0 {
			return toks
		}
		i += k
		if t, m := matchTag(b, i, false); m == matchFull && !t.dsml() {
			toks = append(toks, t)
			i = t.end
			continue
		}
		i++
	}
}

// malformedEnd is where the call that is not well formed at toks[i] ends
// (its end token included), or the next call begins, and the index of the
// token after it.
func malformedEnd(b string, toks []marker, i int) (end, next int) {
	j := i
	if toks[i].kind == tagCallBegin {
		j++
	}
	for j < len(toks) && toks[j].kind != tagCallBegin && toks[j].kind != tagCallEnd && toks[j].kind != tagCallsEnd {
		j++
	}
	if j == len(toks) {
		return len(b), len(toks)
	}
	if toks[j].kind == tagCallEnd {
		return toks[j].end, j + 1
	}
	return toks[j].start, j
}

// tokenCall reads one V3 or V3.1 call from the text before and after its
// <｜tool▁sep｜>.
func tokenCall(header, body string) (chat.FunctionCall, error) {
	var fc chat.FunctionCall
	h := strings.TrimSpace(header)
	var args string
	if h == "" || strings.EqualFold(h, "function") && !strings.HasPrefix(strings.TrimLeft(body, " \t\r\n"), "{") {
		// V3: function<｜tool▁sep｜>NAME, then the arguments, usually fenced.
		rest := strings.TrimLeft(body, " \t\r\n")
		n := strings.IndexAny(rest, " \t\r\n`{")
		if n < 0 {
			n = len(rest)
		}
		fc.Name, args = rest[:n], rest[n:]
	} else {
		// V3.1: NAME<｜tool▁sep｜>ARGUMENTS.
		fc.Name, args = h, body
	}
	if !validToolName(fc.Name) {
		fc.Name = ""
		return fc, fmt.Errorf("%w: no valid tool name", ErrLeakMalformed)
	}
	fc.Arguments = stripFence(args)
	if fc.Arguments == "" {
		fc.Arguments = "{}"
	}
	if !isJSONObject(fc.Arguments) {
		return fc, fmt.Errorf("%w: arguments of %s are not one JSON object", ErrLeakMalformed, tools.QuoteName(fc.Name))
	}
	return fc, nil
}

// stripFence trims s and removes a Markdown fence around it.
func stripFence(s string) string {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "```") {
		return t
	}
	nl := strings.IndexByte(t, '\n')
	if nl < 0 {
		return t
	}
	inner := strings.TrimRight(t[nl+1:], " \t\r\n")
	if !strings.HasSuffix(inner, "```") {
		return t
	}
	return strings.TrimSpace(inner[:len(inner)-3])
}

// maxTagLen bounds a DSML tag from '<' to '>', attributes included, so
// that a head whose quote never closes costs a bounded scan. It is far
// above a tag name and a tool or parameter name; only the self-closing
// form, whose value is an attribute, can come near it.
const maxTagLen = 4096

// dtag is a whole DSML tag.
type dtag struct {
	marker
	self   bool // ends with "/>"
	after  int  // index just past '>'
	name   string
	str    string
	hasStr bool
}

func (t dtag) is(k tagKind, close bool) bool { return t.kind == k && t.close == close && !t.self }

func isInvokeOpen(t dtag) bool  { return t.is(tagInvoke, false) }
func isInvokeClose(t dtag) bool { return t.is(tagInvoke, true) }
func isParamClose(t dtag) bool  { return t.is(tagParam, true) }

// parseTail reads the attributes and the end of the tag, from its head's
// end: name and string, quoted with " or ', or bare.
func (t *dtag) parseTail(b string) bool {
	b = b[:min(len(b), t.start+maxTagLen)]
	j := t.marker.end
	for {
		j = skipBlank(b, j)
		if j >= len(b) {
			return false
		}
		switch b[j] {
		case '>':
			t.after = j + 1
			return true
		case '/':
			if j+1 < len(b) && b[j+1] == '>' && !t.close {
				t.self, t.after = true, j+2
				return true
			}
			return false
		}
		if t.close {
			return false
		}
		k := j
		for j < len(b) && (b[j] == '_' || b[j] == '-' || b[j] == ':' || 'a' <= lowerASCII(b[j]) && lowerASCII(b[j]) <= 'z' || '0' <= b[j] && b[j] <= '9') {
			j++
		}
		key := b[k:j]
		if key == "" {
			return false
		}
		j = skipBlank(b, j)
		if j >= len(b) || b[j] != '=' {
			return false
		}
		j = skipBlank(b, j+1)
		if j >= len(b) {
			return false
		}
		var val string
		if q := b[j]; q == '"' || q == '\'' {
			e := strings.IndexByte(b[j+1:], q)
			if e < 0 {
				return false
			}
			val, j = b[j+1:j+1+e], j+2+e
		} else {
			k := j
			for j < len(b) && !isBlank(b[j]) && b[j] != '>' {
				j++
			}
			val = b[k:j]
		}
		switch strings.ToLower(key) {
		case "name":
			t.name = val
		case "string":
			t.str, t.hasStr = val, true
		}
	}
}

// dsmlTags are the DSML tags of a block in order, with, for each index i,
// the index of the first tag at i or later of the kinds the walk jumps to
// (len(t) when there is none), so that the walk is linear in the block.
type dsmlTags struct {
	t                                   []dtag
	nextOpen, nextClose, nextParamClose []int
}

func tokenizeDSML(b string) *dsmlTags {
	d := &dsmlTags{}
	for i := 0; ; {
		k := strings.IndexByte(b[i:], '<')
		if k < 0 {
			break
		}
		i += k
		if h, m := matchTag(b, i, false); m == matchFull && h.dsml() {
			t := dtag{marker: h}
			if t.parseTail(b) {
				d.t = append(d.t, t)
				i = t.after
				continue
			}
		}
		i++
	}
	n := len(d.t)
	d.nextOpen, d.nextClose, d.nextParamClose = make([]int, n+1), make([]int, n+1), make([]int, n+1)
	d.nextOpen[n], d.nextClose[n], d.nextParamClose[n] = n, n, n
	for i := n - 1; i >= 0; i-- {
		d.nextOpen[i], d.nextClose[i], d.nextParamClose[i] = d.nextOpen[i+1], d.nextClose[i+1], d.nextParamClose[i+1]
		switch t := d.t[i]; {
		case isInvokeOpen(t):
			d.nextOpen[i] = i
		case isInvokeClose(t):
			d.nextClose[i] = i
		case isParamClose(t):
			d.nextParamClose[i] = i
		}
	}
	return d
}

// parseDSML reads the calls of a DSML block: a wrapper of invokes, or one
// invoke.
func parseDSML(b string, closed bool) []LeakedCall {
	d := tokenizeDSML(b)
	n := len(d.t)
	var r leakResults
	p, i := 0, 0
	if n > 0 && d.t[0].start == 0 && d.t[0].is(tagBlock, false) {
		p, i = d.t[0].after, 1
	}
	for {
		if i == n {
			if !allBlank(b[p:]) || len(r.calls) == 0 {
				r.fail(len(b), "", "%s", endReason(closed))
			}
			break
		}
		t := d.t[i]
		if !allBlank(b[p:t.start]) {
			r.fail(t.start, "", "unexpected text in the block")
		}
		if t.is(tagBlock, true) {
			if len(r.calls) == 0 {
				r.fail(t.after, "", "no tool call in the block")
			}
			break
		}
		if !isInvokeOpen(t) {
			o, end := d.nextOpen[i+1], len(b)
			if o < n {
				end = d.t[o].start
			}
			r.fail(end, "", "DSML tags out of order")
			p, i = end, o
			continue
		}
		fc, next, err := d.invokeCall(b, i)
		end := len(b)
		if err == nil {
			end = d.t[next-1].after
		} else {
			// Resume at the next invoke after the failure, or after
			// this invoke's closing tag if that comes first: never
			// before the failure, so the walk stays linear.
			o, c := d.nextOpen[next], d.nextClose[next]
			switch {
			case o < c:
				end, next = d.t[o].start, o
			case c < n:
				end, next = d.t[c].after, c+1
			default:
				next = n
				if !closed {
					err = fmt.Errorf("%w: %s", ErrLeakMalformed, endReason(false))
				}
			}
		}
		r.add(end, fc, err)
		p, i = end, next
	}
	return r.tile(b)
}

type dsmlParam struct {
	name  string
	value []byte // JSON
}

// invokeCall reads the call of the invoke tag d.t[i]: its parameters up to
// </｜DSML｜invoke>, or one JSON object. It returns the index of the tag
// after the invoke's closing tag, or, with an error, of the tag where the
// invoke stopped making sense.
func (d *dsmlTags) invokeCall(b string, i int) (fc chat.FunctionCall, next int, err error) {
	t := d.t[i]
	fc.Name = t.name
	if !validToolName(t.name) {
		fc.Name = ""
		return fc, i + 1, fmt.Errorf("%w: no valid tool name", ErrLeakMalformed)
	}
	name := tools.QuoteName(fc.Name)
	notClosed := fmt.Errorf("%w: invoke of %s not closed", ErrLeakMalformed, name)
	if q := skipBlank(b, t.after); q < len(b) && b[q] == '{' {
		c := d.nextClose[i+1]
		if c == len(d.t) {
			return fc, c, notClosed
		}
		fc.Arguments = strings.TrimSpace(b[q:d.t[c].start])
		if !isJSONObject(fc.Arguments) {
			return fc, c, fmt.Errorf("%w: arguments of %s are not one JSON object", ErrLeakMalformed, name)
		}
		return fc, c + 1, nil
	}
	var params []dsmlParam
	seen := map[string]bool{}
	q := t.after
	for k := i + 1; ; {
		if k == len(d.t) {
			return fc, k, notClosed
		}
		pt := d.t[k]
		if !allBlank(b[q:pt.start]) {
			return fc, k, fmt.Errorf("%w: unexpected text in the invoke of %s", ErrLeakMalformed, name)
		}
		if isInvokeClose(pt) {
			fc.Arguments = string(objectOf(params))
			return fc, k + 1, nil
		}
		p, after, next, err := d.param(b, k, name)
		if err != nil {
			return fc, next, err
		}
		q, k = after, next
		if p.name == "" {
			return fc, k, fmt.Errorf("%w: parameter of %s without a name", ErrLeakMalformed, name)
		}
		if seen[p.name] {
			return fc, k, fmt.Errorf("%w: parameter %s of %s given twice", ErrLeakMalformed, tools.QuoteName(p.name), name)
		}
		seen[p.name] = true
		params = append(params, p)
	}
}

// param reads the parameter tag at d.t[k] of the invoke of name: its name
// and JSON value, where its text ends and the index of the tag after it;
// on an error, the index to go on from.
func (d *dsmlTags) param(b string, k int, name string) (p dsmlParam, after, next int, err error) {
	pt := d.t[k]
	switch {
	case pt.self && !pt.close && (pt.kind == tagParam || pt.kind == tagInvoke):
		// <｜｜DSML｜｜invoke name="P" string="VALUE"/>: the value is the
		// attribute (MetaFARS/codex-relay#49).
		if !pt.hasStr {
			return p, 0, k, fmt.Errorf("%w: parameter of %s without a value", ErrLeakMalformed, name)
		}
		return dsmlParam{pt.name, appendJSONString(nil, pt.str)}, pt.after, k + 1, nil
	case pt.is(tagParam, false):
		c := d.nextParamClose[k+1]
		if c == len(d.t) {
			return p, 0, k + 1, fmt.Errorf("%w: parameter of %s not closed", ErrLeakMalformed, name)
		}
		v, err := paramValue(b[pt.after:d.t[c].start], pt)
		if err != nil {
			return p, 0, c, fmt.Errorf("%w: parameter %s of %s: %w", ErrLeakMalformed, tools.QuoteName(pt.name), name, err)
		}
		return dsmlParam{pt.name, v}, d.t[c].after, c + 1, nil
	}
	return p, 0, k, fmt.Errorf("%w: DSML tags out of order in the invoke of %s", ErrLeakMalformed, name)
}

var (
	errNotJSON    = errors.New(`value of a string="false" parameter is not JSON`)
	errStringFlag = errors.New(`string attribute is neither "true" nor "false"`)
)

// paramValue converts the text of a DSML parameter to JSON: kept verbatim
// as a string when string="true", as DeepSeek's template writes it; parsed
// when string="false"; without the attribute, parsed if it is JSON and a
// string otherwise.
func paramValue(raw string, t dtag) ([]byte, error) {
	var compact bytes.Buffer
	switch {
	case !t.hasStr:
		if json.Compact(&compact, []byte(strings.TrimSpace(raw))) == nil {
			return compact.Bytes(), nil
		}
		return appendJSONString(nil, raw), nil
	case strings.EqualFold(t.str, "true"):
		return appendJSONString(nil, raw), nil
	case strings.EqualFold(t.str, "false"):
		if json.Compact(&compact, []byte(strings.TrimSpace(raw))) != nil {
			return nil, errNotJSON
		}
		return compact.Bytes(), nil
	}
	return nil, errStringFlag
}

// objectOf writes the parameters as one JSON object, in order.
func objectOf(params []dsmlParam) []byte {
	b := []byte{'{'}
	for i, p := range params {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, p.name)
		b = append(b, ':')
		b = append(b, p.value...)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string, leaving <, > and & as they
// are.
func appendJSONString(dst []byte, s string) []byte { return jsonscan.AppendString(dst, s, false) }

// validName reports whether n can be a tool name: not empty, at most 256
// bytes of valid UTF-8, no spaces or controls (Unicode's), quotes or
// brackets. Whether the request declares it is the Policy's question.
func validToolName(n string) bool {
	if n == "" || len(n) > 256 || !utf8.ValidString(n) {
		return false
	}
	for _, r := range n {
		if unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune("<>{}\"'`", r) {
			return false
		}
	}
	return true
}

func isJSONObject(s string) bool { return strings.HasPrefix(s, "{") && json.Valid([]byte(s)) }

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func allBlank(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isBlank(s[i]) {
			return false
		}
	}
	return true
}

func skipBlank(s string, j int) int {
	for j < len(s) && isBlank(s[j]) {
		j++
	}
	return j
}
