package envelope

import (
	"errors"
	"strings"
)

// The delimiters of the orchestrator protocol; text may come before the
// start delimiter and after the end delimiter.
const (
	StartDelimiter = "<<<ORCHESTRATOR_RESPONSE>>>"
	EndDelimiter   = "<<<END_ORCHESTRATOR_RESPONSE>>>"
)

// ErrUnterminated is returned by Flush when the text ended inside an
// envelope: a start delimiter without its end delimiter.
var ErrUnterminated = errors.New("envelope: missing end delimiter")

// Part is one piece of scanned text, in the order it was written: text to
// pass on, or the body of a complete envelope.
type Part struct {
	// Text is text outside any envelope when Envelope is false; when
	// Envelope is true it is the body between the delimiters (exclusive),
	// untrimmed, to be judged with Judge.
	Text     string
	Envelope bool
}

// Scanner finds envelopes in text that arrives in pieces split anywhere,
// even inside a delimiter. It holds back only what it must: outside an
// envelope, a tail that could be the start of the start delimiter (at most
// len(StartDelimiter)-1 bytes); inside one, the envelope until its end
// delimiter. The zero value is ready to use. A Scanner is not safe for
// concurrent use.
type Scanner struct {
	pending string          // held tail: a possible delimiter prefix
	body    strings.Builder // the open envelope's body so far
	inside  bool            // a start delimiter was seen, its end not yet
}

// Inside reports whether the scanner is inside an envelope: a caller that
// streams should hold its output from here until Feed returns the envelope.
func (s *Scanner) Inside() bool { return s.inside }

// Held returns the number of bytes held back: a possible delimiter prefix,
// and inside an envelope its body so far. A caller that must bound what it
// holds checks it after Feed and gives up on the envelope (Flush) when it
// is too large.
func (s *Scanner) Held() int { return len(s.pending) + s.body.Len() }

// Feed scans the next piece and returns, in order, the text that is safe to
// pass on now and every envelope completed by this piece. Adjacent parts
// are never both text. Text without '<' outside an envelope is returned
// as is, unless a held tail precedes it.
func (s *Scanner) Feed(piece string) []Part {
	if !s.inside && s.pending == "" && strings.IndexByte(piece, '<') < 0 {
		if piece == "" {
			return nil
		}
		return []Part{{Text: piece}}
	}
	data := s.pending + piece
	s.pending = ""
	var parts []Part
	for data != "" {
		if s.inside {
			data = s.scanInside(data, &parts)
		} else {
			data = s.scanOutside(data, &parts)
		}
	}
	return parts
}

// scanOutside consumes data up to and including a start delimiter, or
// holds back its tail, and returns what is left to scan.
func (s *Scanner) scanOutside(data string, parts *[]Part) string {
	if i := strings.Index(data, StartDelimiter); i >= 0 {
		appendText(parts, data[:i])
		s.inside = true
		return data[i+len(StartDelimiter):]
	}
	keep := prefixSuffix(data, StartDelimiter)
	appendText(parts, data[:len(data)-keep])
	s.pending = data[len(data)-keep:]
	return ""
}

// scanInside consumes data up to and including an end delimiter, or keeps
// it in the body, and returns what is left to scan.
func (s *Scanner) scanInside(data string, parts *[]Part) string {
	if i := strings.Index(data, EndDelimiter); i >= 0 {
		s.body.WriteString(data[:i])
		*parts = append(*parts, Part{Text: s.body.String(), Envelope: true})
		s.body.Reset()
		s.inside = false
		return data[i+len(EndDelimiter):]
	}
	keep := prefixSuffix(data, EndDelimiter)
	s.body.WriteString(data[:len(data)-keep])
	s.pending = data[len(data)-keep:]
	return ""
}

// Discard drops the body of the open envelope held so far. The scanner
// stays inside the envelope, so its end delimiter is still found and what
// follows is text again; the envelope Feed then returns holds only what
// came after Discard. A caller that bounds what it holds discards an
// envelope it has given up on.
func (s *Scanner) Discard() { s.body.Reset() }

// Flush ends the text. It returns the text still held: a tail that turned
// out not to be a delimiter, or, with ErrUnterminated, an open envelope as
// it was written (start delimiter and body), so that nothing is lost. The
// Scanner is then empty and may be reused.
func (s *Scanner) Flush() ([]Part, error) {
	var err error
	text := s.pending
	if s.inside {
		text = StartDelimiter + s.body.String() + s.pending
		err = ErrUnterminated
	}
	*s = Scanner{}
	if text == "" {
		return nil, err
	}
	return []Part{{Text: text}}, err
}

// Find scans a whole text; it is Feed and Flush in one.
func Find(text string) ([]Part, error) {
	var s Scanner
	parts := s.Feed(text)
	rest, err := s.Flush()
	for _, p := range rest {
		appendText(&parts, p.Text)
	}
	return parts, err
}

// appendText appends non-empty text to parts, merged into a last text part.
func appendText(parts *[]Part, text string) {
	if text == "" {
		return
	}
	if n := len(*parts); n > 0 && !(*parts)[n-1].Envelope {
		(*parts)[n-1].Text += text
		return
	}
	*parts = append(*parts, Part{Text: text})
}

// prefixSuffix returns the length of the longest suffix of data that is a
// proper prefix of delim.
func prefixSuffix(data, delim string) int {
	n := min(len(data), len(delim)-1)
	for ; n > 0; n-- {
		if strings.HasSuffix(data, delim[:n]) {
			return n
		}
	}
	return 0
}
