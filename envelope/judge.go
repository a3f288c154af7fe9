package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/kaptinlin/jsonrepair"
)

// Result is the verdict on one response, or one envelope.
type Result struct {
	// Found is true when a complete envelope (both delimiters) was found.
	Found bool
	// Phase is the envelope's "phase" when it is a string, known or not;
	// empty when there is none.
	Phase Phase
	// Valid is true when the envelope's JSON parsed, possibly after
	// repair, its phase is known and its data satisfies the phase schema.
	Valid bool
	// Repaired is true when the model's JSON did not parse as written and
	// JSON is the repaired text.
	Repaired bool
	// Errors says what is wrong, one message per problem, in terms the
	// model can act on; nil when Valid.
	Errors []string
	// JSON is the envelope's JSON: the body as the model wrote it, trimmed,
	// or the repaired JSON when Repaired. Empty when nothing was found or
	// the body could not be repaired.
	JSON string
	// Data is the envelope's "data" object, set whenever it is an object,
	// valid or not, so a caller can check whether what is there is usable
	// (the seed's "Missing Required Fields"); nil when there is none.
	Data json.RawMessage
	// Before and After are the text around the envelope, trimmed (the
	// seed's beforeText and afterText); only Parse sets them.
	Before, After string
	// Signals are the keyword fallback's matches on the whole text; only
	// Parse sets them, and only when no envelope was found.
	Signals []Signal
}

// Judge judges body against the seed's phases; see Set.Judge.
func Judge(body string) Result { return Default().Judge(body) }

// Judge parses, repairs when needed, and validates an envelope body: the
// text between the delimiters, as in a Part whose Envelope is true. It
// never fails; what is wrong is in the Result. Safe for concurrent use.
func (s *Set) Judge(body string) Result {
	r := Result{Found: true}
	raw, env, repaired, err := decode(body)
	if err != nil {
		r.Errors = []string{err.Error()}
		return r
	}
	r.JSON, r.Repaired = raw, repaired
	if env == nil {
		r.Errors = []string{"the envelope must be a JSON object with \"phase\" and \"data\", got " + jsonKind(raw)}
		return r
	}
	r.Errors = s.checkShape(&r, env["phase"], env["data"])
	if r.Errors != nil {
		return r
	}
	r.Errors = s.validateData(r.Phase, r.Data)
	r.Valid = r.Errors == nil
	return r
}

// MaxRepairBytes bounds the envelope JSON that Judge tries to repair:
// the repair library's time grows with the square of its input on some
// inputs (about 0.5 s for 16 KiB of `"a"a"a…`, 9 ms for an 11 KB task
// list with a trailing comma), and the input is model output. Larger JSON
// that does not parse as written is reported as a JSON error.
const MaxRepairBytes = 16 << 10

// decode returns body as JSON, trimmed when it parses as written, else
// repaired, and its top-level fields: nil when it is JSON but not an
// object. A map, not a struct: keys match exactly, as in the seed's
// parsed.phase, where encoding/json would also take "Phase". The error
// words the model's JSON error.
func decode(body string) (raw string, env map[string]json.RawMessage, repaired bool, err error) {
	raw = strings.TrimSpace(body)
	if raw == "" {
		return "", nil, false, errors.New("the envelope is empty: write a JSON object between the delimiters")
	}
	// One pass checks the syntax and reads the fields.
	strict := json.Unmarshal([]byte(raw), &env)
	var syntax *json.SyntaxError
	if !errors.As(strict, &syntax) {
		return raw, env, false, nil // an object, or JSON of another kind (env nil)
	}
	if len(raw) > MaxRepairBytes {
		return "", nil, false, fmt.Errorf("JSON parse error: %v (not repaired: over %d bytes)", strict, MaxRepairBytes)
	}
	fixed, err := jsonrepair.Repair(raw)
	// A repair that is not an object guessed too much ("hello" becomes a
	// string): the model's own JSON error says more.
	env = nil
	if err != nil || json.Unmarshal([]byte(fixed), &env) != nil || env == nil {
		return "", nil, false, fmt.Errorf("JSON parse error: %v", strict)
	}
	return strings.TrimSpace(fixed), env, true, nil
}

// checkShape applies the seed's parsing algorithm checks (missing phase,
// missing data) and the phase's name, and fills r.Phase and r.Data.
func (s *Set) checkShape(r *Result, phase, data json.RawMessage) []string {
	var errs []string
	var name string
	switch {
	case isAbsent(phase):
		errs = append(errs, "missing required field phase")
	case json.Unmarshal(phase, &name) != nil:
		errs = append(errs, "phase is "+jsonKind(string(phase))+", want string")
	default:
		r.Phase = Phase(name)
		if !s.Known(r.Phase) {
			errs = append(errs, fmt.Sprintf("phase: value %s is not one of %s", quoteJSON(name), s.phaseList()))
		}
	}
	switch {
	case isAbsent(data):
		errs = append(errs, "missing required field data")
	case jsonKind(string(data)) != "object":
		errs = append(errs, "data is "+jsonKind(string(data))+", want object")
	default:
		r.Data = data
	}
	return errs
}

// validateData checks data against the phase's schema.
func (s *Set) validateData(p Phase, data json.RawMessage) []string {
	doc, err := jsonUnmarshal(data)
	if err != nil {
		return []string{"JSON parse error in data: " + err.Error()}
	}
	if err := s.phases[p].schema.Validate(doc); err != nil {
		return describeValidation(err)
	}
	return nil
}

func jsonUnmarshal(data json.RawMessage) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber() // the schema library wants json.Number, not float64
	var v any
	err := d.Decode(&v)
	return v, err
}

func isAbsent(v json.RawMessage) bool {
	return len(v) == 0 || string(v) == "null"
}

// jsonKind names the JSON type of a valid JSON text.
func jsonKind(raw string) string {
	switch raw = strings.TrimSpace(raw); {
	case raw == "" || raw == "null":
		return "null"
	case raw[0] == '{':
		return "object"
	case raw[0] == '[':
		return "array"
	case raw[0] == '"':
		return "string"
	case raw == "true" || raw == "false":
		return "boolean"
	default:
		return "number"
	}
}

func (s *Set) phaseList() string {
	q := make([]string, len(s.names))
	for i, p := range s.names {
		q[i] = quoteJSON(string(p))
	}
	return strings.Join(q, ", ")
}

// Parse judges text against the seed's phases; see Set.Parse.
func Parse(text string) Result { return Default().Parse(text) }

// Parse judges a whole response the way the seed's parsing algorithm does:
// the first start delimiter and the first end delimiter after it. With no
// complete envelope, Found is false, Errors says which delimiter is
// missing, and Signals holds the keyword fallback's matches.
func (s *Set) Parse(text string) Result {
	start := strings.Index(text, StartDelimiter)
	end := -1
	if start >= 0 {
		end = strings.Index(text[start+len(StartDelimiter):], EndDelimiter)
	}
	if start < 0 || end < 0 {
		r := Result{Signals: Fallback(text)}
		r.Errors = []string{"missing start delimiter " + StartDelimiter}
		if start >= 0 {
			r.Errors = []string{"missing end delimiter " + EndDelimiter}
		}
		return r
	}
	bodyStart := start + len(StartDelimiter)
	end += bodyStart
	r := s.Judge(text[bodyStart:end])
	r.Before = strings.TrimSpace(text[:start])
	r.After = strings.TrimSpace(text[end+len(EndDelimiter):])
	return r
}
