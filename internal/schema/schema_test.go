package schema_test

import (
	"strings"
	"testing"

	"github.com/phasegate/phasegate/internal/schema"
	"github.com/phasegate/phasegate/internal/schema/schematest"
)

// A schema is the one document it was given: a "$ref" to a file (which
// would compile, were it read) or to an http URL fails with the words of
// ErrExternalRef (the library does not wrap its loader's error), and the
// server the URL names is never asked.
func TestCompileRefusesExternalRefs(t *testing.T) {
	refs, asked := schematest.ExternalRefs(t, `{"type":"object"}`)
	for name, ref := range refs {
		if _, err := schema.Compile("ref_"+name, []byte(`{"$ref":"`+ref+`"}`)); err == nil || !strings.Contains(err.Error(), schema.ErrExternalRef.Error()) {
			t.Errorf("%s: Compile of a $ref to %s: %v, want ErrExternalRef", name, ref, err)
		}
	}
	if n := asked(); n != 0 {
		t.Errorf("the server of an http $ref was asked %d times, want never", n)
	}
}
