package tools

import (
	"encoding/json"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/phasegate/phasegate/internal/lru"
	"github.com/phasegate/phasegate/internal/schema"
)

// schemaCache holds compiled parameter schemas across requests: agents send
// the same tool declarations on every request, and compiling a schema costs
// far more than judging a call against it. A compiled schema is read-only
// and safe for concurrent validation. An LRU bounded by bytes; safe for
// concurrent use.
type schemaCache struct {
	compiled *lru.Cache[string, compiled]
}

type compiled struct {
	schema *jsonschema.Schema
	err    error
	// cost is what its patterns compiled to, in instructions (SchemaCost).
	cost int64
}

// maxCachedSchemaBytes keeps unusually large schemas out of the cache.
const maxCachedSchemaBytes = 64 << 10

// schemaCacheBytes bounds the schemas kept: about 700 tool schemas of
// 300 bytes, the size of a typical one with four parameters.
const schemaCacheBytes = 4 << 20

// compiledPerSourceByte is the heap a compiled schema holds per byte of
// its source, rounded up: 14 to 18 for flat and nested tool schemas of
// 100 to 300 bytes (TestCompiledPerSourceByte).
const compiledPerSourceByte = 20

var schemas = newSchemaCache(schemaCacheBytes)

func newSchemaCache(maxBytes int64) *schemaCache {
	return &schemaCache{compiled: lru.New(lru.Options[string, compiled]{
		MaxBytes: maxBytes,
		Bytes: func(params string, c compiled) int64 {
			return int64(len(params))*(1+compiledPerSourceByte) + c.cost*instBytes
		},
	})}
}

// compile returns the compiled schema of params, from the cache when it
// was compiled before. A schema whose patterns are over
// DefaultSchemaBudget is not compiled: its error is a *SchemaCostError.
func (c *schemaCache) compile(params json.RawMessage) (*jsonschema.Schema, error) {
	if len(params) > maxCachedSchemaBytes {
		if _, err := SchemaCost(params, DefaultSchemaBudget()); err != nil {
			return nil, err
		}
		return compileSchema(params)
	}
	if e, ok := c.compiled.Get(string(params)); ok {
		return e.schema, e.err
	}
	cost, err := SchemaCost(params, DefaultSchemaBudget())
	var sch *jsonschema.Schema
	if err == nil {
		sch, err = compileSchema(params)
	}
	c.compiled.Put(string(params), compiled{schema: sch, err: err, cost: cost})
	return sch, err
}

// compileSchema compiles a tool's parameters schema; a "$ref" outside it
// is an error (schema.Compile).
func compileSchema(params json.RawMessage) (*jsonschema.Schema, error) {
	return schema.Compile("parameters", params)
}
