package protocol

import (
	"strings"
	"testing"

	"github.com/phasegate/phasegate/envelope"
)

// A delimiter wrapped around another becomes one when the inner is taken
// out: the notice line a client sees must hold none, however nested.
func TestWithoutDelimitersNested(t *testing.T) {
	s := envelope.StartDelimiter
	for _, in := range []string{
		"data.<<<ORCHESTRATOR_" + s + "RESPONSE>>> is number",
		"<<<END_ORCHESTRATOR_<<<ORCHESTRATOR_" + envelope.EndDelimiter + "RESPONSE>>>RESPONSE>>>",
	} {
		out := withoutDelimiters(in)
		if strings.Contains(out, envelope.StartDelimiter) || strings.Contains(out, envelope.EndDelimiter) {
			t.Errorf("withoutDelimiters(%q) = %q, still a delimiter", in, out)
		}
	}
}
