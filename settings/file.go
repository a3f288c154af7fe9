package settings

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/tokens"
)

// fileConfig is the config file: every scalar setting under its key, plus
// the structured settings. Each part decodes itself from its YAML node
// (UnmarshalYAML), so the YAML library does the decoding and every
// problem keeps its line.
type fileConfig struct {
	path    string
	scalars map[string]Value
	routes  []fileRoute
	models  map[string]tokens.Limits
	// envelopes are the envelope rules per model and the added phases.
	envelopes fileEnvelopes
	guard     fileGuard
	sessions  fileSessions
	prices    filePrices
}

// problems collects what is wrong in a part of the file, each as the YAML
// library words a type error ("line N: ..."), so that the library carries
// on with the rest and reports every problem at once.
type problems struct{ errs []string }

func (p *problems) add(line int, format string, args ...any) {
	p.errs = append(p.errs, fmt.Sprintf("line %d: %s", line, fmt.Sprintf(format, args...)))
}

// addDecode records the problems of decoding a value, each prefixed with
// where the value sits ("routes[0]: ", "guard: modes: gpt-*: ").
func (p *problems) addDecode(line int, prefix string, err error) {
	if err == nil {
		return
	}
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		p.add(line, "%s%v", prefix, err)
		return
	}
	for _, e := range te.Errors {
		n, msg, ok := cutLine(e)
		if !ok {
			n, msg = line, e
		}
		p.add(n, "%s%s", prefix, msg)
	}
}

func (p *problems) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	return &yaml.TypeError{Errors: p.errs}
}

var lineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

// cutLine splits "line N: msg".
func cutLine(e string) (int, string, bool) {
	m := lineRE.FindStringSubmatch(e)
	if m == nil {
		return 0, "", false
	}
	n, _ := strconv.Atoi(m[1])
	return n, libraryWords(m[2]), true
}

// libraryWords rewords the YAML library's own type errors ("cannot
// unmarshal !!seq into string") in the file's terms.
func libraryWords(msg string) string {
	if strings.HasPrefix(msg, "cannot unmarshal !!seq") || strings.HasPrefix(msg, "cannot unmarshal !!map") {
		return "must be a single value, not a list or a mapping"
	}
	if strings.HasPrefix(msg, "cannot unmarshal") {
		return "is not a value of the right kind"
	}
	return msg
}

// eachField calls decode with every key and value of mapping n, in the
// order written, after reporting (under what) a node that is not a
// mapping, a key given twice and a key not in known, with the nearest
// known key as a suggestion. mustBe says what the mapping must be.
func eachField(n *yaml.Node, what, mustBe string, known []string, decode func(k, v *yaml.Node)) error {
	var p problems
	if n.Kind != yaml.MappingNode {
		p.add(n.Line, "%s must be %s", what, mustBe)
		return p.err()
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if first, dup := seen[k.Value]; dup {
			p.add(k.Line, "%s is set twice (first on line %d)", prefixed(what, k.Value), first)
			continue
		}
		seen[k.Value] = k.Line
		if known != nil && !slices.Contains(known, k.Value) {
			p.add(k.Line, "%sunknown key %s%s", prefix(what), k.Value, DidYouMean(k.Value, known, ""))
			continue
		}
		decode(k, v)
	}
	return p.err()
}

// prefix is what, as the start of a message: "routes[0]: ", or "" at the
// top of the file.
func prefix(what string) string {
	if what == "" {
		return ""
	}
	return what + ": "
}

func prefixed(what, key string) string { return prefix(what) + key }

// present is n, or for a null ("key:" with no value) an empty string at
// its place: the YAML library never hands a null to a value's
// UnmarshalYAML, and a value that must be given must refuse it.
func present(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Line: n.Line, Column: n.Column}
	}
	return n
}

// loadFile reads a YAML config file. An unknown key is an error, with the
// nearest known key as a suggestion. A file with bad keys is still read
// for the rest, so that every problem is reported at once; scalars is nil
// when the file could not be read at all.
func loadFile(path string) (fileConfig, error) {
	fc := fileConfig{path: path}
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is said once, below
		}
		return fc, fmt.Errorf("config file %s: %w", path, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fc, yamlSyntaxError(path, b, err)
	}
	fc.scalars = map[string]Value{}
	if len(doc.Content) == 0 {
		return fc, nil // an empty file
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		fc.scalars = nil
		return fc, fmt.Errorf("%s:%d: the config file must be a mapping of settings (key: value), one a line", path, root.Line)
	}
	var top fileTop
	err = root.Decode(&top)
	fc.routes, fc.models, fc.envelopes, fc.guard = top.Routes, top.Models, top.Envelopes, top.Guard
	fc.sessions, fc.prices = top.Sessions, top.Prices
	for key, s := range top.scalars {
		fc.scalars[key] = Value{Raw: s.raw, Source: Source{From: FromFile, File: path, Line: s.line}}
	}
	return fc, fileErrors(path, err)
}

// fileErrors turns the problems of a decoded file into errors of the form
// path:line: message.
func fileErrors(path string, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		if err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
		return nil
	}
	errs := make([]error, 0, len(te.Errors))
	for _, e := range te.Errors {
		if n, msg, ok := cutLine(e); ok {
			errs = append(errs, fmt.Errorf("%s:%d: %s", path, n, msg))
		} else {
			errs = append(errs, fmt.Errorf("config file %s: %s", path, e))
		}
	}
	return errors.Join(errs...)
}

// fileTop is the top of the config file.
type fileTop struct {
	Routes    fileRoutes
	Models    map[string]tokens.Limits
	Envelopes fileEnvelopes
	Guard     fileGuard
	Sessions  fileSessions
	Prices    filePrices
	scalars   map[string]scalarText
}

// topKeys are the keys of the config file: the sections, each setting's
// key and each alias's.
func topKeys() []string {
	known := []string{"routes", "models", "envelopes", "guard", "sessions", "prices"}
	for _, s := range all {
		known = append(known, s.Key())
	}
	for alias := range aliases {
		known = append(known, strings.ToLower(alias))
	}
	return known
}

// UnmarshalYAML decodes the top of the file: each section into its type,
// each setting into its text.
func (t *fileTop) UnmarshalYAML(n *yaml.Node) error {
	t.scalars = map[string]scalarText{}
	var p problems
	err := eachField(n, "", "a mapping of settings", topKeys(), func(k, v *yaml.Node) {
		var err error
		switch k.Value {
		case "routes":
			err = v.Decode(&t.Routes)
		case "models":
			var m fileModels
			err, t.Models = v.Decode(&m), m
		case "envelopes":
			err = v.Decode(&t.Envelopes)
		case "guard":
			err = v.Decode(&t.Guard)
		case "sessions":
			err = v.Decode(&t.Sessions)
		case "prices":
			err = v.Decode(&t.Prices)
		default:
			s := scalarText{key: k.Value}
			if err = v.Decode(&s); err == nil && v.Tag != "!!null" {
				t.scalars[k.Value] = s
			}
		}
		if err != nil {
			p.addDecode(v.Line, "", err)
		}
	})
	if err != nil {
		p.addDecode(n.Line, "", err)
	}
	return p.err()
}

// scalarText is a setting's value in the file as the text the environment
// would give it: a list setting may be a YAML list (repeatable_tools:
// [run_tests, git_status], or one "- item" a line), read as its
// comma-separated items.
type scalarText struct {
	key  string
	raw  string
	line int
}

// UnmarshalYAML reads a single value, or a list of names for a list
// setting.
func (s *scalarText) UnmarshalYAML(n *yaml.Node) error {
	var p problems
	s.line = n.Line
	switch {
	case n.Kind == yaml.SequenceNode && isListKey(s.key):
		items := make([]string, 0, len(n.Content))
		for _, item := range n.Content {
			if item.Kind != yaml.ScalarNode || item.Tag == "!!null" || strings.Contains(item.Value, ",") {
				p.add(item.Line, "%s: each item of the list must be one name, such as %s: [a, b] (or the comma-separated a,b)", s.key, s.key)
				return p.err()
			}
			items = append(items, item.Value)
		}
		s.raw = strings.Join(items, ",")
	case n.Kind != yaml.ScalarNode:
		p.add(n.Line, "%s must be a single value, not a list or a mapping", s.key)
	default:
		s.raw = n.Value
	}
	return p.err()
}

// isListKey reports whether a file key is a list setting's.
func isListKey(key string) bool {
	for _, s := range all {
		if s.Key() == key {
			return s.kind == kindList
		}
	}
	return false
}

// fileRoute is one entry of routes: the model (a name, or a prefix ending
// in *) and the provider it goes to.
type fileRoute struct {
	model, provider string
	line            int
}

// fileRoutes is routes, in the order written.
type fileRoutes []fileRoute

// UnmarshalYAML reads routes: a list of {model, provider}.
func (rs *fileRoutes) UnmarshalYAML(n *yaml.Node) error {
	var p problems
	if n.Kind != yaml.SequenceNode {
		p.add(n.Line, "routes must be a list of entries with model and provider")
		return p.err()
	}
	for i, item := range n.Content {
		what := fmt.Sprintf("routes[%d]", i)
		r := fileRoute{line: item.Line}
		err := eachField(item, what, "a mapping with keys model, provider", []string{"model", "provider"}, func(k, v *yaml.Node) {
			target := map[string]*string{"model": &r.model, "provider": &r.provider}[k.Value]
			if err := present(v).Decode((*text)(target)); err != nil {
				p.addDecode(v.Line, what+": "+k.Value+" ", err)
			}
		})
		if err != nil {
			p.addDecode(item.Line, "", err)
			continue
		}
		if r.model == "" || r.provider == "" {
			p.add(item.Line, "routes[%d] needs both model (a name, or a prefix ending in *) and provider", i)
			continue
		}
		*rs = append(*rs, r)
	}
	return p.err()
}

// text is a single value of a structured setting.
type text string

// UnmarshalYAML refuses a list or a mapping.
func (t *text) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		var p problems
		p.add(n.Line, "must be a single value")
		return p.err()
	}
	*t = text(n.Value)
	return nil
}

// fileModels is models: a mapping of model name to token limits; absent
// fields keep the built-in values.
type fileModels map[string]tokens.Limits

// modelKeys are the keys of one model's limits.
var modelKeys = []string{"context_window", "completion_reserve", "safety_margin", "encoding"}

// UnmarshalYAML reads each model's limits.
func (ms *fileModels) UnmarshalYAML(n *yaml.Node) error {
	*ms = fileModels{}
	var p problems
	err := eachField(n, "models", "a mapping of model names to their limits", nil, func(k, v *yaml.Node) {
		what := "models: " + k.Value
		var l tokens.Limits
		err := eachField(v, what, "a mapping with keys "+strings.Join(modelKeys, ", "), modelKeys, func(fk, fv *yaml.Node) {
			target := map[string]yaml.Unmarshaler{
				"context_window":     (*wholeNumber)(&l.ContextWindow),
				"completion_reserve": (*wholeNumber)(&l.CompletionReserve),
				"safety_margin":      (*fraction)(&l.SafetyMargin),
				"encoding":           (*encoding)(&l.Encoding),
			}[fk.Value]
			if fv.Kind != yaml.ScalarNode {
				p.add(fv.Line, "%s: %s must be a single value", what, fk.Value)
				return
			}
			if err := present(fv).Decode(target); err != nil {
				p.addDecode(fv.Line, what+": "+fk.Value+": "+fv.Value+": ", err)
			}
		})
		if err != nil {
			p.addDecode(v.Line, "", err)
			return
		}
		(*ms)[k.Value] = l
	})
	if err != nil {
		p.addDecode(n.Line, "", err)
	}
	return p.err()
}

// mustBe is the problem of a value that is not what it must be.
func mustBe(n *yaml.Node, rule string) error {
	var p problems
	p.add(n.Line, "must be %s", rule)
	return p.err()
}

// wholeNumber is a count of 0 or more.
type wholeNumber int

// UnmarshalYAML reads a whole number of 0 or more.
func (w *wholeNumber) UnmarshalYAML(n *yaml.Node) error {
	v, err := strconv.Atoi(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil || v < 0 {
		return mustBe(n, "a whole number of 0 or more")
	}
	*w = wholeNumber(v)
	return nil
}

// fraction is a share from 0 up to (not including) 1.
type fraction float64

// UnmarshalYAML reads a fraction from 0 up to (not including) 1.
func (f *fraction) UnmarshalYAML(n *yaml.Node) error {
	var v float64
	if n.Kind != yaml.ScalarNode || n.Decode(&v) != nil || v < 0 || v >= 1 {
		return mustBe(n, "a fraction from 0 up to (not including) 1, such as 0.05")
	}
	*f = fraction(v)
	return nil
}

// encoding is the name of a tokenizer's encoding.
type encoding string

// UnmarshalYAML reads one of the encodings the token counter knows.
func (e *encoding) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || (n.Value != tokens.EncodingO200K && n.Value != tokens.EncodingCL100K) {
		return mustBe(n, tokens.EncodingO200K+" or "+tokens.EncodingCL100K)
	}
	*e = encoding(n.Value)
	return nil
}

// routes converts the file's routes for the proxy.
func (r fileRoute) route() proxy.Route { return proxy.Route{Pattern: r.model, Provider: r.provider} }
