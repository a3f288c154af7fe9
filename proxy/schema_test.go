package proxy_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// openAPISchemas is the part of OpenAI's OpenAPI specification
// (github.com/openai/openai-openapi, MIT license) the wire tests validate
// against: the component schemas below and every schema they refer to.
const openAPISchemas = "testdata/openai-schemas.json"

// openAPIRoots are the component schemas vendored.
var openAPIRoots = []string{"CreateChatCompletionResponse", "CreateChatCompletionStreamResponse", "ErrorResponse", "Model", "ListModelsResponse"}

var openAPISpec = flag.String("openapi", "", "re-extract "+openAPISchemas+" from this OpenAPI specification (JSON, optionally gzipped)")

// TestVendorOpenAPISchemas rewrites the vendored schemas from the
// specification named by -openapi; without it, it checks that the
// vendored file holds every root.
func TestVendorOpenAPISchemas(t *testing.T) {
	if *openAPISpec == "" {
		doc := readSchemas(t)
		for _, r := range openAPIRoots {
			if doc.Components.Schemas[r] == nil {
				t.Errorf("%s lacks %s; run this test with -openapi", openAPISchemas, r)
			}
		}
		return
	}
	raw, err := os.ReadFile(*openAPISpec)
	if err != nil {
		t.Fatal(err)
	}
	if zr, err := gzip.NewReader(bytes.NewReader(raw)); err == nil {
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(zr); err != nil {
			t.Fatal(err)
		}
		raw = buf.Bytes()
	}
	var spec schemaDoc
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	out := schemaDoc{}
	out.Components.Schemas = map[string]any{}
	var walk func(name string)
	walk = func(name string) {
		if out.Components.Schemas[name] != nil {
			return
		}
		s := spec.Components.Schemas[name]
		if s == nil {
			t.Fatalf("the specification has no schema %s", name)
		}
		out.Components.Schemas[name] = s
		for _, ref := range refsOf(s) {
			walk(strings.TrimPrefix(ref, "#/components/schemas/"))
		}
	}
	for _, r := range openAPIRoots {
		walk(r)
	}
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(openAPISchemas, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

type schemaDoc struct {
	Components struct {
		Schemas map[string]any `json:"schemas"`
	} `json:"components"`
}

func readSchemas(tb testing.TB) schemaDoc {
	tb.Helper()
	raw, err := os.ReadFile(openAPISchemas)
	if err != nil {
		tb.Fatal(err)
	}
	var doc schemaDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		tb.Fatal(err)
	}
	return doc
}

// refsOf lists the $ref values in schema s, sorted.
func refsOf(s any) []string {
	var refs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if r, ok := v["$ref"].(string); ok {
				refs = append(refs, r)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(s)
	sort.Strings(refs)
	return refs
}

// nullable turns OpenAPI 3.0's "nullable": true, which some of the
// specification's schemas still use, into the JSON Schema it means: null
// is allowed too.
func nullable(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = nullable(x)
		}
		if v["nullable"] == true {
			delete(v, "nullable")
			return map[string]any{"anyOf": []any{v, map[string]any{"type": "null"}}}
		}
		return v
	case []any:
		for i, x := range v {
			v[i] = nullable(x)
		}
	}
	return v
}

// openAPIValidator validates JSON values against the vendored schemas.
type openAPIValidator map[string]*jsonschema.Schema

func newOpenAPIValidator(tb testing.TB) openAPIValidator {
	tb.Helper()
	raw, err := os.ReadFile(openAPISchemas)
	if err != nil {
		tb.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		tb.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	const url = "https://phasegate.test/openai-schemas.json"
	if err := c.AddResource(url, nullable(doc)); err != nil {
		tb.Fatal(err)
	}
	v := openAPIValidator{}
	for _, r := range openAPIRoots {
		if v[r], err = c.Compile(url + "#/components/schemas/" + r); err != nil {
			tb.Fatalf("compile %s: %v", r, err)
		}
	}
	return v
}

// check reports whether data is valid against the schema named.
func (v openAPIValidator) check(tb testing.TB, schema string, data []byte) {
	tb.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		tb.Errorf("%s is not JSON: %v: %s", schema, err, data)
		return
	}
	if err := v[schema].Validate(doc); err != nil {
		tb.Errorf("%s does not validate: %v\n%s", schema, err, data)
	}
}
