package settings

import (
	"errors"
	"fmt"
	"strings"

	goyaml "github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"
)

// yamlSyntaxError reports a config file that is not valid YAML at the line
// and column of the fault. yaml.v3 says where the enclosing construct
// began (line 1 for a bad line 2 of a mapping) and leaves the line out of
// some errors (a tab at the start of the file); goccy's parser points at
// the token at fault, so the file is parsed again by it to place the
// error. Should that parser accept what yaml.v3 refused, yaml.v3's own
// message stands.
func yamlSyntaxError(path string, b []byte, v3err error) error {
	_, err := parser.ParseBytes(b, 0)
	var ye goyaml.Error
	if err != nil && errors.As(err, &ye) && ye.GetToken() != nil {
		pos := ye.GetToken().Position
		msg := ye.GetMessage()
		if line := lineOf(b, pos.Line); strings.Contains(line, "\t") {
			msg += " (YAML indents with spaces: a tab may not indent a line)"
		}
		return fmt.Errorf("%s:%d:%d: not valid YAML: %s", path, pos.Line, pos.Column, msg)
	}
	msg := strings.TrimPrefix(v3err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, text, ok := strings.Cut(rest, ": "); ok {
			return fmt.Errorf("%s:%s: not valid YAML: %s", path, n, text)
		}
	}
	return fmt.Errorf("config file %s: not valid YAML: %s", path, msg)
}

// lineOf returns line n (from 1) of b, "" when there is none.
func lineOf(b []byte, n int) string {
	lines := strings.Split(string(b), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	return lines[n-1]
}
