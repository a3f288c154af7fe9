package main

import (
	"errors"
	"fmt"
	"strings"

	goyaml "github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"
	"gopkg.in/yaml.v3"
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

// fileList reads a list setting written as a YAML list (repeatable_tools:
// [run_tests, git_status], or one "- item" a line) as the comma-separated
// value the environment gives it. A setting that is not a list, and an
// item that is not a single value or holds a comma, are reported with how
// to write them.
func fileList(key string, n *yaml.Node, bad func(int, string, ...any)) (string, bool) {
	s, ok := settingKeyed(key)
	if !ok || s.kind != kindList {
		bad(n.Line, "%s must be a single value, not a list or a mapping", key)
		return "", false
	}
	items := make([]string, 0, len(n.Content))
	for _, item := range n.Content {
		if item.Kind != yaml.ScalarNode || item.Tag == "!!null" || strings.Contains(item.Value, ",") {
			bad(item.Line, "%s: each item of the list must be one name, such as %s: [a, b] (or the comma-separated a,b)", key, key)
			return "", false
		}
		items = append(items, item.Value)
	}
	return strings.Join(items, ","), true
}

// settingKeyed returns the setting of a config-file key.
func settingKeyed(key string) (setting, bool) {
	for _, s := range settings {
		if s.key() == key {
			return s, true
		}
	}
	return setting{}, false
}
