package tools

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
)

// Form identifies a tool call up to the form of its arguments: two calls
// have equal forms when they have the same project and tool name and their
// arguments differ at most in ways that cannot change what the call does.
// It is looser than a Signature, and used only with results: the guard
// never refuses a call for its form alone, only a call whose earlier runs
// of the same form brought nothing new.
//
// What "form" means is decided per JSON value type, and for a string by
// the language it is written in:
//
//   - object: keys sorted; a key keeps its case (keys are the tool's
//     parameter names, which a schema spells exactly).
//   - number: its exact value, as in a Signature (1, 1.0 and 1e0 are
//     equal); a string holding just a JSON number is that number ("5" is 5).
//   - boolean: true and false, and a string spelling one in any case.
//   - null: null.
//   - array: its elements' forms, in order.
//   - a shell command (the key is command or cmd, the tool is a shell,
//     its schema says so, or the string uses the shell's quoting or
//     operators): its words and operators as the shell reads them, in
//     order. White space, a trailing ; or newline, a comment, and the
//     quoting of a word whose quoting changes nothing (echo "done" is echo
//     done) are form; quoting, escaping and braces that change what runs
//     are not (submit 'flag{x}' passes one word, submit flag{x} may expand).
//     A here-document's body is kept as written.
//   - source code (the key is code or source, the tool runs code, or its
//     schema says so): its tokens, without comments and without the white
//     space inside a line; string literals are kept as written, but for
//     their quote marks ('done' is "done"); indentation is kept.
//   - any other string: its words, sorted, without quote characters,
//     comments and the marks that end a sentence, so a search query
//     respaced or re-punctuated is the same query.
//
// Like a Signature, a Form carries argument text; it never leaves the
// process.
type Form string

// stringKind is the language a string argument is read in.
type stringKind uint8

const (
	kindText stringKind = iota
	kindShell
	kindCode
)

// kinds tells the language of the string arguments of a tool: hints
// holds what the tool's schema says of its top-level parameters, schema
// is a digest of that schema (0 for none), which the cache of forms is
// keyed by.
type kinds struct {
	tool   string
	hints  map[string]stringKind
	schema uint64
}

// of is the language of the strings under top-level key.
func (k kinds) of(key string) stringKind {
	if h, ok := k.hints[key]; ok {
		return h
	}
	tool, key := strings.ToLower(k.tool), strings.ToLower(key)
	switch key {
	case "command", "cmd", "cmdline", "command_line", "commands", "shell_command", "bash_command":
		return kindShell
	case "code", "source", "source_code", "snippet", "program", "python", "javascript":
		return kindCode
	case "script", "input":
		switch {
		case codeTool(tool):
			return kindCode
		case shellTool(tool):
			return kindShell
		}
	}
	return kindText
}

func shellTool(name string) bool {
	for _, w := range []string{"bash", "shell", "terminal", "command", "cmd", "zsh", "powershell"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

func codeTool(name string) bool {
	for _, w := range []string{"code", "python", "jupyter", "notebook", "repl", "eval", "interpreter", "javascript"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// schemaHints reads the languages a parameters schema gives its
// top-level string parameters in their descriptions: "shell", "bash" or
// "command line" make a shell command, "code", "python" or "javascript"
// source code.
func schemaHints(params json.RawMessage) map[string]stringKind {
	var s struct {
		Properties map[string]struct {
			Description string `json:"description"`
		} `json:"properties"`
	}
	if len(params) == 0 || json.Unmarshal(params, &s) != nil {
		return nil
	}
	var out map[string]stringKind
	for name, p := range s.Properties {
		d := strings.ToLower(p.Description)
		k := kindText
		switch {
		case strings.Contains(d, "shell") || strings.Contains(d, "bash") || strings.Contains(d, "command line"):
			k = kindShell
		case strings.Contains(d, "python") || strings.Contains(d, "javascript") || strings.Contains(d, "source code") || strings.Contains(d, "code to"):
			k = kindCode
		default:
			continue
		}
		if out == nil {
			out = map[string]stringKind{}
		}
		out[name] = k
	}
	return out
}

// formOf returns the form of a call of tool name with parsed arguments
// args in project projectID; k says the language of its strings.
func formOf(projectID, name string, args map[string]any, k kinds) Form {
	b := append(appendCallHead(nil, projectID, name), '{')
	for i, key := range slices.Sorted(maps.Keys(args)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, key)
		b = append(b, ':')
		lang := k.of(key)
		b = appendTree(b, args[key], func(b []byte, s string) []byte { return appendStringForm(b, s, lang) })
	}
	return Form(append(b, '}'))
}

// NewForm returns the form of a call of tool name with the given
// arguments, read as a call of an undeclared tool (no schema hints) in
// project "". Arguments that are not one JSON object are malformed and
// have no form.
func NewForm(name, arguments string) (Form, error) {
	args, problem := parseArguments(arguments)
	if problem != "" {
		return "", &argumentsError{problem}
	}
	return formOf("", name, args, kinds{tool: name}), nil
}

type argumentsError struct{ problem string }

func (e *argumentsError) Error() string { return ErrMalformedArguments.Error() + ": " + e.problem }
func (e *argumentsError) Unwrap() error { return ErrMalformedArguments }

// appendStringForm writes the form of a string value: the number or
// boolean it spells, else its form in its language.
func appendStringForm(b []byte, s string, lang stringKind) []byte {
	t := strings.TrimSpace(s)
	switch strings.ToLower(t) {
	case "true", "false":
		return append(b, strings.ToLower(t)...)
	}
	if t != "" && (t[0] == '-' || t[0] >= '0' && t[0] <= '9') && json.Valid([]byte(t)) {
		return appendNumber(b, t)
	}
	if lang == kindText && strings.ContainsAny(s, shellSyntax) {
		lang = kindShell // it is written as a shell reads it, so read it so
	}
	switch lang {
	case kindShell:
		b = append(b, "sh:"...)
		return appendString(b, string(appendShellForm(nil, s)))
	case kindCode:
		b = append(b, "code:"...)
		return appendString(b, string(appendCodeForm(nil, s)))
	}
	return appendString(b, strings.Join(words(s), " "))
}

// shellSyntax are the characters whose presence makes a plain string read
// as a shell command: quoting, expansion, operators.
const shellSyntax = "'\"`$\\{}|;&<>*?[]()"

// words returns the tokens of s, sorted, as the text form reads them:
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
