package envelope

import (
	"slices"
	"strings"
	"testing"
)

// An orchestrator with phases of its own judges them with the same
// machinery; a redefined seed phase takes the caller's schema.
func TestNewSetAddsAndRedefinesPhases(t *testing.T) {
	s, err := NewSet(map[Phase][]byte{
		"review":   []byte(`{"type":"object","required":["verdict"],"properties":{"verdict":{"enum":["approve","reject"]}}}`),
		"progress": []byte(`{"type":"object","required":["percent"]}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Phases(), append(slices.Clone(Phases), "review"); !slices.Equal(got, want) {
		t.Errorf("Phases() = %v, want %v", got, want)
	}
	if r := s.Judge(`{"phase":"review","data":{"verdict":"approve"}}`); !r.Valid {
		t.Errorf("valid review judged %+v", r)
	}
	r := s.Judge(`{"phase":"review","data":{"verdict":"maybe"}}`)
	if r.Valid || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], `data.verdict: value "maybe" is not one of "approve", "reject"`) {
		t.Errorf("bad enum judged %+v", r)
	}
	if r := s.Judge(`{"phase":"progress","data":{"percent":5}}`); !r.Valid {
		t.Errorf("redefined progress judged %+v, want valid under the new schema", r)
	}
	if r := Judge(`{"phase":"review","data":{"verdict":"approve"}}`); r.Valid {
		t.Error("the default set knows a phase added to another set")
	}
	n := s.Notice(s.Judge(`{"phase":"review","data":{}}`), "")
	for _, want := range []string{"missing required field data.verdict", `"phase": "review"`, "must have the fields verdict"} {
		if !strings.Contains(n, want) {
			t.Errorf("notice %q lacks %q", n, want)
		}
	}
	if r := s.Judge(`{"phase":"nope","data":{}}`); r.Valid || !strings.Contains(r.Errors[0], `"review"`) {
		t.Errorf("unknown phase judged %+v, want the added phase listed", r)
	}
}

func TestNewSetRejectsBadSchemas(t *testing.T) {
	for name, src := range map[Phase]string{
		"broken": `{"type":`,
		"badkw":  `{"type":"nosuchtype"}`,
		"":       `{"type":"object"}`,
	} {
		if _, err := NewSet(map[Phase][]byte{name: []byte(src)}); err == nil {
			t.Errorf("NewSet(%q: %s) accepted a bad schema", name, src)
		}
	}
}
