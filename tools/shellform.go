package tools

import "strings"

// shellSpecial are the characters a POSIX shell acts on when they are
// not quoted: white space splits words, the operators, expansions ($ `),
// quoting itself, globbing (* ? [ ]), comments, tilde and brace expansion
// (bash, zsh and fish expand braces, fish even {x} alone). Quoting any
// other character changes nothing.
const shellSpecial = " \t\n|&;<>()$`\\\"'*?[]#~{}"

// shellOperators are the operators of the shell, longest first.
var shellOperators = []string{"<<<", "<<-", "&&", "||", ";;", "<<", ">>", ">&", "<&", "&>", "|&", ">|", "<>", "|", "&", ";", "<", ">", "(", ")"}

// shellLexer reads a shell command into its form: words and operators,
// one space apart. A character of a word is written as it is, but for a
// quoted or escaped special character, which is written after a
// backslash, and a $ or ` inside double quotes, which is written after a
// double quote (it still expands there, but the result is not split):
// so "done" and done are the same word, 'a b' is one word and a b two,
// 'flag{x}' and flag{x} differ. Comments are dropped, a newline is a ;,
// and a trailing ; goes. A here-document's body is written as it is.
//
// It is a reading good enough to tell forms apart, not a parser: what it
// does not understand (an unclosed quote, odd nesting) it reads the same
// way every time, which is all a form needs.
type shellLexer struct {
	s   string
	i   int
	out []byte
	// inWord: a word is open (a quote pair opens one even when empty).
	inWord bool
	// last is what was written last: 0 nothing, 'w' a word, 'o' an
	// operator.
	last byte
	// word is the open word's characters without quoting, for a
	// here-document's delimiter.
	word []byte
	// delimNext: the next word is a here-document's delimiter; dash: of
	// a <<- operator.
	delimNext, dash bool
	heredocs        []heredoc
}

type heredoc struct {
	delim string
	dash  bool
}

// appendShellForm appends the form of the shell command s to b.
func appendShellForm(b []byte, s string) []byte {
	lx := &shellLexer{s: s, out: b}
	start := len(b)
	for lx.i < len(lx.s) {
		lx.next()
	}
	lx.endWord()
	// A trailing ; (or newline) is form; op writes no two in a row.
	if out := lx.out; len(out) >= start+2 && out[len(out)-1] == ';' && out[len(out)-2] == ' ' {
		return out[:len(out)-2]
	}
	return lx.out
}

// next reads one character, or one quoted or escaped run.
func (lx *shellLexer) next() {
	c := lx.s[lx.i]
	switch {
	case c == ' ' || c == '\t':
		lx.endWord()
		lx.i++
	case c == '\n':
		lx.endWord()
		lx.op(";")
		lx.i++
		lx.readHeredocs()
	case c == '\\':
		lx.escape()
	case c == '\'':
		lx.single()
	case c == '"':
		lx.double()
	case c == '#' && !lx.inWord:
		for lx.i < len(lx.s) && lx.s[lx.i] != '\n' {
			lx.i++
		}
	case strings.IndexByte("|&;<>()", c) >= 0:
		lx.endWord()
		lx.operator()
	default:
		lx.char(c, false)
		lx.i++
	}
}

// escape reads a backslash and what it escapes; a backslash before a
// newline joins the lines.
func (lx *shellLexer) escape() {
	if lx.i+1 >= len(lx.s) {
		lx.char('\\', false)
		lx.i++
		return
	}
	if c := lx.s[lx.i+1]; c != '\n' {
		lx.char(c, true)
	}
	lx.i += 2
}

// single reads a single-quoted run: every character literal.
func (lx *shellLexer) single() {
	lx.open()
	end := strings.IndexByte(lx.s[lx.i+1:], '\'')
	if end < 0 {
		end = len(lx.s) - lx.i - 1
	}
	for _, c := range []byte(lx.s[lx.i+1 : lx.i+1+end]) {
		lx.char(c, true)
	}
	lx.i += end + 2
}

// double reads a double-quoted run: a backslash escapes only $ ` " \ and
// a newline; $ and ` still expand.
func (lx *shellLexer) double() {
	lx.open()
	lx.i++
	for lx.i < len(lx.s) && lx.s[lx.i] != '"' {
		c := lx.s[lx.i]
		switch {
		case c == '\\' && lx.i+1 < len(lx.s) && strings.IndexByte("$`\"\\\n", lx.s[lx.i+1]) >= 0:
			if n := lx.s[lx.i+1]; n != '\n' {
				lx.char(n, true)
			}
			lx.i += 2
			continue
		case c == '$' || c == '`':
			lx.out = append(lx.out, '"')
			lx.char(c, false)
		default:
			lx.char(c, true)
		}
		lx.i++
	}
	lx.i++ // the closing quote
}

// open opens a word, writing the space before it.
func (lx *shellLexer) open() {
	if lx.inWord {
		return
	}
	if lx.last != 0 {
		lx.out = append(lx.out, ' ')
	}
	lx.inWord, lx.word = true, lx.word[:0]
}

// char writes one character of a word.
func (lx *shellLexer) char(c byte, quoted bool) {
	lx.open()
	if quoted && strings.IndexByte(shellSpecial, c) >= 0 {
		lx.out = append(lx.out, '\\')
	}
	lx.out = append(lx.out, c)
	lx.word = append(lx.word, c)
}

// endWord closes the open word; a here-document's delimiter is noted.
func (lx *shellLexer) endWord() {
	if !lx.inWord {
		return
	}
	lx.inWord, lx.last = false, 'w'
	if lx.delimNext {
		lx.heredocs = append(lx.heredocs, heredoc{delim: string(lx.word), dash: lx.dash})
		lx.delimNext = false
	}
}

// operator reads the longest operator at the position.
func (lx *shellLexer) operator() {
	for _, op := range shellOperators {
		if strings.HasPrefix(lx.s[lx.i:], op) {
			lx.i += len(op)
			lx.op(op)
			if op == "<<" || op == "<<-" {
				lx.delimNext, lx.dash = true, op == "<<-"
			}
			return
		}
	}
}

// op writes an operator. A ; after another operator (a newline after &&,
// or after a ;) or at the start changes nothing, and is not written.
func (lx *shellLexer) op(op string) {
	if op == ";" && lx.last != 'w' {
		return
	}
	if lx.last != 0 {
		lx.out = append(lx.out, ' ')
	}
	lx.out = append(lx.out, op...)
	lx.last = 'o'
}

// readHeredocs reads the bodies of the here-documents the line that just
// ended opened, each up to its delimiter line, and writes each as one
// word kept as written.
func (lx *shellLexer) readHeredocs() {
	for _, h := range lx.heredocs {
		start := lx.i
		end := len(lx.s)
		for lx.i < len(lx.s) {
			eol := strings.IndexByte(lx.s[lx.i:], '\n')
			if eol < 0 {
				eol = len(lx.s) - lx.i
			}
			line := lx.s[lx.i : lx.i+eol]
			if h.dash {
				line = strings.TrimLeft(line, "\t")
			}
			lx.i += eol + 1
			if line == h.delim {
				end = lx.i - eol - 1
				break
			}
		}
		lx.i = min(lx.i, len(lx.s))
		lx.out = append(lx.out, " <<"...)
		lx.out = appendString(lx.out, lx.s[start:min(end, len(lx.s))])
		lx.last = 'w'
	}
	lx.heredocs = lx.heredocs[:0]
}

// appendCodeForm appends the form of source code to b: per line, its
// indentation, then its tokens with white space only between two word
// characters, without comments (# or // that begin a comment, /* */) and
// without a ; that ends the line; string literals ('…', "…", `…`, and
// Python's triple-quoted ones) are written as written, in double quotes.
// Blank lines go.
func appendCodeForm(b []byte, s string) []byte {
	lineStart := len(b)
	atLineStart := true
	pendingSpace := false
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\n':
			b = endCodeLine(b, lineStart)
			lineStart, atLineStart, pendingSpace = len(b), true, false
			i++
		case c == ' ' || c == '\t' || c == '\r':
			if atLineStart {
				b = append(b, c)
			} else {
				pendingSpace = true
			}
			i++
		case (c == '#' || c == '/') && codeComment(s, i, b[lineStart:], atLineStart, pendingSpace):
			block := strings.HasPrefix(s[i:], "/*")
			i = skipComment(s, i)
			if block && atLineStart {
				b, atLineStart = b[:lineStart], false // what follows is not indented by the comment
			}
		case c == '\'' || c == '"' || c == '`':
			if pendingSpace && len(b) > lineStart && isWordChar(b[len(b)-1]) {
				b = append(b, ' ')
			}
			var lit string
			lit, i = stringLiteral(s, i)
			b = append(b, '"')
			b = append(b, lit...)
			b = append(b, '"')
			atLineStart, pendingSpace = false, false
		default:
			if pendingSpace && len(b) > lineStart && isWordChar(b[len(b)-1]) && isWordChar(c) {
				b = append(b, ' ')
			}
			b = append(b, c)
			atLineStart, pendingSpace = false, false
			i++
		}
	}
	return endCodeLine(b, lineStart)
}

// endCodeLine ends the line begun at lineStart: a trailing ; goes, a
// blank line goes, else a newline ends it.
func endCodeLine(b []byte, lineStart int) []byte {
	trim := func() {
		for len(b) > lineStart && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
			b = b[:len(b)-1]
		}
	}
	trim()
	if len(b) > lineStart && b[len(b)-1] == ';' {
		b = b[:len(b)-1]
		trim()
	}
	if len(b) == lineStart {
		return b
	}
	for _, c := range b[lineStart:] {
		if c != ' ' && c != '\t' {
			return append(b, '\n')
		}
	}
	return b[:lineStart] // indentation alone
}

func isWordChar(c byte) bool {
	return c >= 0x80 || c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// codeComment reports whether a comment starts at s[i]: # at the start of
// a line or after white space, followed by white space, # or ! (so
// #include and a private #field stay code); // or /* at the start of a
// line or after ; { } (so Python's floor division a // 2 stays code).
func codeComment(s string, i int, line []byte, atLineStart, afterSpace bool) bool {
	rest := s[i:]
	switch {
	case rest[0] == '#':
		if !atLineStart && !afterSpace {
			return false
		}
		return len(rest) == 1 || strings.IndexByte(" \t\n#!", rest[1]) >= 0
	case strings.HasPrefix(rest, "//"), strings.HasPrefix(rest, "/*"):
		return atLineStart || len(line) > 0 && strings.IndexByte(";{}", line[len(line)-1]) >= 0
	}
	return false
}

// skipComment returns the position after the comment at s[i]: the end of
// its line, or past its */.
func skipComment(s string, i int) int {
	if strings.HasPrefix(s[i:], "/*") {
		if end := strings.Index(s[i+2:], "*/"); end >= 0 {
			return i + 2 + end + 2
		}
		return len(s)
	}
	if eol := strings.IndexByte(s[i:], '\n'); eol >= 0 {
		return i + eol
	}
	return len(s)
}

// stringLiteral reads the literal at s[i] and returns its text, between
// its quote marks, and the position after it. A backslash escapes the
// next character; a literal that does not close runs to the end.
func stringLiteral(s string, i int) (string, int) {
	q := s[i : i+1]
	if strings.HasPrefix(s[i:], q+q+q) && q != "`" {
		q = q + q + q
	}
	start := i + len(q)
	for j := start; j < len(s); j++ {
		switch {
		case s[j] == '\\':
			j++
		case strings.HasPrefix(s[j:], q):
			return s[start:j], j + len(q)
		case len(q) == 1 && q != "`" && s[j] == '\n':
			return s[start:j], j
		}
	}
	return s[start:], len(s)
}
