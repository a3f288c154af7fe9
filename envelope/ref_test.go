package envelope

import (
	"testing"

	"github.com/phasegate/phasegate/internal/schema/schematest"
)

// A phase schema is the one document it was given: a "$ref" to a file
// (which would compile, were it read) or to an http URL is refused, and
// the server the URL names is never asked.
func TestNewSetRefusesExternalRefs(t *testing.T) {
	refs, asked := schematest.ExternalRefs(t, `{"type":"object"}`)
	for name, ref := range refs {
		src := []byte(`{"$ref":"` + ref + `"}`)
		if _, err := NewSet(map[Phase][]byte{"review": src}); err == nil {
			t.Errorf("%s: NewSet accepted a $ref to %s", name, ref)
		}
	}
	if n := asked(); n != 0 {
		t.Errorf("the server of an http $ref was asked %d times, want never", n)
	}
}
