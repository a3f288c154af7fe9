package tools

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/schema"
	"github.com/phasegate/phasegate/internal/schema/schematest"
)

// A parameters schema is the one document the client declared: a "$ref"
// to a file (which would compile, were it read) or to an http URL leaves
// the tool without a schema and a SchemaErr, and the server the URL names
// is never asked.
func TestPolicyRefusesExternalRefs(t *testing.T) {
	refs, asked := schematest.ExternalRefs(t, `{"type":"object","required":["x"]}`)
	for name, ref := range refs {
		tool := chat.Tool{Type: "function", Function: chat.FunctionDef{Name: "ref_" + name, Parameters: json.RawMessage(`{"$ref":"` + ref + `"}`)}}
		j := NewPolicy([]chat.Tool{tool}, nil, nil).Judge(toolCall("c1", tool.Function.Name, `{}`))
		var se *SchemaError
		if j.Verdict != VerdictForward || !errors.As(j.SchemaErr, &se) || !strings.Contains(se.Error(), schema.ErrExternalRef.Error()) {
			t.Errorf("%s: a $ref to %s judged %s with SchemaErr %v, want forward and an external reference error", name, ref, j.Verdict, j.SchemaErr)
		}
	}
	if n := asked(); n != 0 {
		t.Errorf("the server of an http $ref was asked %d times, want never", n)
	}
}

// The same arguments get the same reason: the schema library visits
// properties in map order, and the failures are sorted after it.
func TestSchemaInvalidReasonIsStable(t *testing.T) {
	params := `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"},"c":{"type":"boolean"},"d":{"type":"array"}}}`
	tool := chat.Tool{Type: "function", Function: chat.FunctionDef{Name: "many", Parameters: json.RawMessage(params)}}
	call := toolCall("c1", "many", `{"a":1,"b":"x","c":2,"d":{}}`)
	first := NewPolicy([]chat.Tool{tool}, nil, nil).Judge(call).Reason
	if strings.Count(first, "wrong type") != 4 {
		t.Fatalf("reason %q, want four type failures", first)
	}
	for range 50 {
		if got := NewPolicy([]chat.Tool{tool}, nil, nil).Judge(call).Reason; got != first {
			t.Fatalf("the same call got two reasons:\n%s\n%s", first, got)
		}
	}
}
