// Package schema compiles the JSON Schemas the gateway judges by (the
// parameters schemas clients declare for their tools, the phases of the
// envelope protocol) and words what failed a validation, the same way for
// both: a schema is the one document it was given, never a reason to read
// a file or the network, and the failures of one instance come in the same
// order whatever order the library visited them in.
package schema

import (
	"bytes"
	"cmp"
	"errors"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Compile compiles src, one JSON Schema document, under name. A schema
// that names no draft is read as draft 2020-12, pinned so that a library
// upgrade cannot change what is refused. A "$ref" outside the document (a
// file path, an http URL) is an error: the library's default loader reads
// files, and a schema that comes from a client must not make the gateway
// touch its disk or the network.
func Compile(name string, src []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(src))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	url := "mem:///" + name + ".json" // the document itself: never loaded
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// ErrExternalRef is the error of a "$ref" to a resource outside the
// schema's own document.
var ErrExternalRef = errors.New("external schema references are not loaded")

type noLoader struct{}

func (noLoader) Load(string) (any, error) { return nil, ErrExternalRef }

// Describe words each leaf failure of a validation error with word and
// returns the messages without repeats, sorted by where in the instance
// they failed (its JSON pointer, token by token), then by text: the
// library visits an object's properties in map order, and the same
// instance must get the same messages. It returns nil when err is not a
// *jsonschema.ValidationError.
func Describe(err error, word func(*jsonschema.ValidationError) string) []string {
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return nil
	}
	type leaf struct {
		at  []string
		msg string
	}
	var leaves []leaf
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		for _, c := range e.Causes {
			walk(c)
		}
		if len(e.Causes) == 0 {
			leaves = append(leaves, leaf{e.InstanceLocation, word(e)})
		}
	}
	walk(verr)
	slices.SortFunc(leaves, func(a, b leaf) int {
		return cmp.Or(slices.Compare(a.at, b.at), strings.Compare(a.msg, b.msg))
	})
	out := make([]string, 0, len(leaves))
	for _, l := range leaves {
		if !slices.Contains(out, l.msg) {
			out = append(out, l.msg)
		}
	}
	return out
}
