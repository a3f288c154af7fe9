package envelope

import (
	"bytes"
	"cmp"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// Phase names a phase of the orchestrator protocol; its value is the
// spelling of the envelope's "phase" field.
type Phase string

// The seed's five phases ("Phase Types").
const (
	PhaseAnalysis    Phase = "analysis"
	PhaseTaskList    Phase = "task_list"
	PhaseProgress    Phase = "progress"
	PhaseCompletion  Phase = "completion"
	PhaseAggregation Phase = "aggregation"
)

// Phases lists the known phases in the seed's order.
var Phases = []Phase{PhaseAnalysis, PhaseTaskList, PhaseProgress, PhaseCompletion, PhaseAggregation}

//go:embed schemas/*.json
var schemaFiles embed.FS

// phaseSchema is a phase's compiled schema for the envelope's "data" and
// the fields it requires, for notices.
type phaseSchema struct {
	schema   *jsonschema.Schema
	required []string
}

// compiledPhases compiles the phase schemas once per process; a compiled
// schema is read-only and safe for concurrent validation.
var compiledPhases = sync.OnceValues(compilePhases)

func compilePhases() (map[Phase]phaseSchema, error) {
	out := make(map[Phase]phaseSchema, len(Phases))
	for _, p := range Phases {
		src, err := schemaFiles.ReadFile("schemas/" + string(p) + ".json")
		if err != nil {
			return nil, err
		}
		sch, err := compileSchema(string(p), src)
		if err != nil {
			return nil, fmt.Errorf("compile %s schema: %w", p, err)
		}
		var top struct{ Required []string }
		if err := json.Unmarshal(src, &top); err != nil {
			return nil, fmt.Errorf("read %s schema: %w", p, err)
		}
		out[p] = phaseSchema{schema: sch, required: top.Required}
	}
	return out, nil
}

func compileSchema(name string, src []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(src))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	url := "mem:///" + name + ".json" // never fetched
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// mustPhases returns the compiled schemas; they are embedded, so a failure
// is a bug in this package, caught by its tests.
func mustPhases() map[Phase]phaseSchema {
	m, err := compiledPhases()
	if err != nil {
		panic(err)
	}
	return m
}

// Required returns the fields the phase's data must have, nil for an
// unknown phase.
func Required(p Phase) []string {
	return mustPhases()[p].required
}

// describeValidation words a validation error as one message per failure,
// in the model's terms: where in the envelope ("data.tasks[0].id") and
// what is wrong. The messages are sorted by where, then by text: the
// library visits properties in map order, and the same envelope must get
// the same errors.
func describeValidation(err error) []string {
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return []string{err.Error()}
	}
	type leaf struct{ at, msg string }
	var leaves []leaf
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		for _, c := range e.Causes {
			walk(c)
		}
		if len(e.Causes) == 0 {
			leaves = append(leaves, leaf{location(e.InstanceLocation), describeLeaf(e)})
		}
	}
	walk(verr)
	slices.SortFunc(leaves, func(a, b leaf) int {
		return cmp.Or(strings.Compare(a.at, b.at), strings.Compare(a.msg, b.msg))
	})
	out := make([]string, len(leaves))
	for i, l := range leaves {
		out[i] = l.msg
	}
	return out
}

func describeLeaf(e *jsonschema.ValidationError) string {
	at := location(e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		names := make([]string, len(k.Missing))
		for i, n := range k.Missing {
			names[i] = joinField(at, n)
		}
		return "missing required field " + strings.Join(names, ", ")
	case *kind.Type:
		return fmt.Sprintf("%s is %s, want %s", at, k.Got, strings.Join(k.Want, " or "))
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = quoteJSON(w)
		}
		return fmt.Sprintf("%s: value %s is not one of %s", at, quoteJSON(k.Got), strings.Join(want, ", "))
	case *kind.Minimum:
		return fmt.Sprintf("%s: %s is less than the minimum %s", at, k.Got.RatString(), k.Want.RatString())
	case *kind.Maximum:
		return fmt.Sprintf("%s: %s is more than the maximum %s", at, k.Got.RatString(), k.Want.RatString())
	default:
		return fmt.Sprintf("%s: %v", at, e)
	}
}

// location spells a JSON pointer inside "data" as data.a.b[0].
func location(tokens []string) string {
	at := "data"
	for _, t := range tokens {
		at = joinField(at, t)
	}
	return at
}

func joinField(at, tok string) string {
	if tok != "" && strings.Trim(tok, "0123456789") == "" {
		return at + "[" + tok + "]"
	}
	return at + "." + tok
}

func quoteJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
