package tools

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// Form identifies a tool call up to the form of its arguments: two calls
// have equal forms when they have the same project and tool name and their
// arguments differ at most in ways that cannot change what the call does
// as a model means it. It is looser than a Signature, and used only with
// results: the guard never refuses a call for its form alone, only a call
// whose earlier runs of the same form returned the same result.
//
// What "form" means is decided per JSON value type:
//
//   - object: keys sorted; a key keeps its case (keys are the tool's
//     parameter names, which a schema spells exactly).
//   - number: its exact value, as in a Signature (1, 1.0 and 1e0 are
//     equal); a string holding just a JSON number is that number ("5" is 5).
//   - boolean: true and false, and a string spelling one in any case
//     ("True", "FALSE"): how a boolean is cased cannot matter.
//   - null: null.
//   - array: its elements' forms, in order: an element is a value of its
//     own (a path, an id, an argv word) and its position can mean
//     something.
//   - string: its tokens (words, and each punctuation mark on its own)
//     in sorted order, after dropping comments (from a # or // at the
//     start of a line or after white space to the end of the line), quote
//     characters (' " `) and punctuation that ends a word (. , ; : ! ?).
//     So white space (print( 'x' ) and print('x')), quoting, an added
//     comment, a trailing full stop and a moved flag ("pip install -U x"
//     and "pip install x -U") make no difference. Case does: paths, code
//     and shell commands are case-sensitive.
//
// Like a Signature, a Form carries argument text; it never leaves the
// process.
type Form string

// formOf returns the form of a call of tool name with parsed arguments
// args in project projectID.
func formOf(projectID, name string, args map[string]any) Form {
	b := make([]byte, 0, 64+len(projectID)+len(name))
	b = strconv.AppendInt(b, int64(len(projectID)), 10)
	b = append(b, ':')
	b = append(b, projectID...)
	b = strconv.AppendInt(b, int64(len(name)), 10)
	b = append(b, ':')
	b = append(b, name...)
	return Form(appendForm(b, args))
}

// appendForm appends the form of a value decoded with UseNumber: its
// canonical JSON, but for strings, which are written by appendStringForm.
func appendForm(b []byte, v any) []byte { return appendTree(b, v, appendStringForm) }

// appendStringForm writes the form of a string value: the number or
// boolean it spells, else its words.
func appendStringForm(b []byte, s string) []byte {
	t := strings.TrimSpace(s)
	switch strings.ToLower(t) {
	case "true", "false":
		return append(b, strings.ToLower(t)...)
	}
	if t != "" && (t[0] == '-' || t[0] >= '0' && t[0] <= '9') && json.Valid([]byte(t)) {
		return appendNumber(b, t)
	}
	return appendString(b, strings.Join(words(s), " "))
}

// words returns the tokens of s, sorted, as the string form reads them:
// runs of letters, digits and other characters that are not ASCII
// punctuation, and each ASCII punctuation mark on its own. White space
// and quote characters only separate tokens; a mark of . , ; : ! ? that
// ends a word (white space, a quote or the end follows it) is dropped.
func words(s string) []string {
	var out []string
	for line := range strings.Lines(s) {
		line = stripComment(line)
		start := -1
		for i := 0; i < len(line); i++ {
			c := line[i]
			word := c >= 0x80 || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
			if word {
				if start < 0 {
					start = i
				}
				continue
			}
			if start >= 0 {
				out = append(out, line[start:i])
				start = -1
			}
			if c <= ' ' || c == 0x7f || c == '\'' || c == '"' || c == '`' {
				continue
			}
			if strings.IndexByte(".,;:!?", c) >= 0 && endsWord(line, i+1) {
				continue
			}
			out = append(out, line[i:i+1])
		}
		if start >= 0 {
			out = append(out, line[start:])
		}
	}
	slices.Sort(out)
	return out
}

// endsWord reports whether position i of line is past the end of a word:
// the end of the line, white space or a quote character.
func endsWord(line string, i int) bool {
	if i >= len(line) {
		return true
	}
	c := line[i]
	return c <= ' ' || c == '\'' || c == '"' || c == '`'
}

// stripComment cuts line at the first # or // that starts it or follows
// white space: "x = 1  # set x" and "run // again" lose their comments,
// "https://host/a#b" keeps its fragment.
func stripComment(line string) string {
	for i := 0; i < len(line); i++ {
		if line[i] != '#' && !strings.HasPrefix(line[i:], "//") {
			continue
		}
		if i == 0 || line[i-1] == ' ' || line[i-1] == '\t' {
			return line[:i]
		}
	}
	return line
}

// progress is what the turn's history says about repeats, for the rule
// that any call may repeat while its results change. Forms are computed
// when a comparison needs them, at most once each: most executions differ
// from a judged call by tool name or result, which cost nothing to
// compare.
type progress struct {
	l     *Ledger
	forms []Form // memo; valid where done
	done  []bool
}

func newProgress(l *Ledger) *progress {
	return &progress{l: l, forms: make([]Form, len(l.executed)), done: make([]bool, len(l.executed))}
}

// form returns the form of execution i, "" when its arguments are
// malformed.
func (p *progress) form(i int) Form {
	if !p.done[i] {
		p.done[i] = true
		if args := p.l.args[i]; args != nil {
			p.forms[i] = formOf(p.l.projectID, p.l.executed[i].Call.Function.Name, args)
		}
	}
	return p.forms[i]
}

// fresh reports whether execution k brought something new: no earlier
// execution of the turn had its form and its result. A malformed call
// still ran, and its effect is unknown: it counts as new.
func (p *progress) fresh(k int) bool {
	ek := p.l.executed[k]
	if p.l.args[k] == nil {
		return true
	}
	for i := range k {
		ei := p.l.executed[i]
		if ei.Call.Function.Name == ek.Call.Function.Name && ei.Result == ek.Result && p.l.args[i] != nil && p.form(i) == p.form(k) {
			return false
		}
	}
	return true
}

// stall is a call that would repeat without progress: the two executions
// of its form it repeats.
type stall struct {
	earlier, last Executed
	identical     bool // both had the judged call's exact signature
}

// stalled reports whether a call of tool name, form f and signature sig
// would make no progress: the last two executions of the turn with form f
// returned the same result, and no execution since the earlier of them
// brought anything new (a different call's new result, such as an edit
// between two test runs, is progress that a repeat may check).
func (p *progress) stalled(name string, f Form, sig Signature) (stall, bool) {
	last, earlier := -1, -1
	for i := len(p.forms) - 1; i >= 0; i-- {
		if p.l.executed[i].Call.Function.Name != name || p.l.args[i] == nil || p.form(i) != f {
			continue
		}
		if last < 0 {
			last = i
			continue
		}
		earlier = i
		break
	}
	if earlier < 0 || p.l.executed[earlier].Result != p.l.executed[last].Result {
		return stall{}, false
	}
	for k := earlier + 1; k < len(p.forms); k++ {
		if k != last && p.fresh(k) {
			return stall{}, false
		}
	}
	e, x := p.l.executed[earlier], p.l.executed[last]
	return stall{earlier: e, last: x, identical: e.Signature == sig && x.Signature == sig}, true
}
