package envelope

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/phasegate/phasegate/internal/schema"
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

// Set is the phases envelopes are judged by: the seed's five, and any a
// caller adds or redefines with NewSet. A Set is read-only once built and
// safe for concurrent use.
type Set struct {
	phases map[Phase]phaseSchema
	// names lists the phases: the seed's in its order, then the added
	// ones sorted.
	names []Phase
}

// defaultSet compiles the seed's phase schemas once per process.
var defaultSet = sync.OnceValues(func() (*Set, error) { return NewSet(nil) })

// Default returns the Set of the seed's five phases. The schemas are
// embedded, so a failure to compile them is a bug in this package, caught
// by its tests.
func Default() *Set {
	s, err := defaultSet()
	if err != nil {
		panic(err)
	}
	return s
}

// NewSet returns the seed's phases plus those of extra, each a JSON Schema
// (draft 2020-12) for the envelope's "data" object; a phase of extra that
// the seed defines replaces the seed's schema.
func NewSet(extra map[Phase][]byte) (*Set, error) {
	s := &Set{phases: make(map[Phase]phaseSchema, len(Phases)+len(extra))}
	for _, p := range Phases {
		src, err := schemaFiles.ReadFile("schemas/" + string(p) + ".json")
		if err != nil {
			return nil, err
		}
		if err := s.add(p, src); err != nil {
			return nil, err
		}
	}
	s.names = slices.Clone(Phases)
	added := slices.Sorted(maps.Keys(extra))
	for _, p := range added {
		if p == "" {
			return nil, errors.New("a phase needs a name")
		}
		if err := s.add(p, extra[p]); err != nil {
			return nil, err
		}
		if !slices.Contains(s.names, p) {
			s.names = append(s.names, p)
		}
	}
	return s, nil
}

func (s *Set) add(p Phase, src []byte) error {
	sch, err := schema.Compile(string(p), src)
	if err != nil {
		return fmt.Errorf("compile the schema of phase %s: %s", p, oneLine(err.Error()))
	}
	var top struct{ Required []string }
	if err := json.Unmarshal(src, &top); err != nil {
		return fmt.Errorf("read the schema of phase %s: %w", p, err)
	}
	s.phases[p] = phaseSchema{schema: sch, required: top.Required}
	return nil
}

// oneLine joins the lines of the schema library's nested errors, so a
// config error stays one line.
func oneLine(msg string) string {
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(strings.TrimSpace(l), "- ")
	}
	return strings.Join(lines, "; ")
}

// Phases lists the phases of s: the seed's, then the added ones.
func (s *Set) Phases() []Phase { return slices.Clone(s.names) }

// Known reports whether p is a phase of s.
func (s *Set) Known(p Phase) bool {
	_, ok := s.phases[p]
	return ok
}

// Required returns the fields the phase's data must have, nil for an
// unknown phase.
func (s *Set) Required(p Phase) []string {
	return s.phases[p].required
}

// Required returns the fields the seed's phase p requires of its data.
func Required(p Phase) []string { return Default().Required(p) }

// describeValidation words a validation error as one message per failure,
// in the model's terms: where in the envelope ("data.tasks[0].id") and
// what is wrong, in the order of schema.Describe.
func describeValidation(err error) []string {
	if msgs := schema.Describe(err, describeLeaf); len(msgs) > 0 {
		return msgs
	}
	return []string{err.Error()}
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
