package tools

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// toolParams are parameter schemas as agents declare them: flat, and
// nested with bounds and a map.
var toolParams = []string{
	`{"type":"object","properties":{"path":{"type":"string","description":"File to read"}},"required":["path"]}`,
	`{"type":"object","properties":{"command":{"type":"string","description":"Shell command to run"},"timeout":{"type":"integer","minimum":1,"maximum":600},"cwd":{"type":"string"},"env":{"type":"object","additionalProperties":{"type":"string"}}},"required":["command"],"additionalProperties":false}`,
}

// distinct returns params made unique by a comment, as another client's
// declaration of a similar tool would be.
func distinct(params string, i int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"$comment":"%06d",%s`, i, params[1:]))
}

func TestSchemaCache(t *testing.T) {
	c := newSchemaCache(64 << 10)
	first, err := c.compile(json.RawMessage(toolParams[0]))
	if err != nil {
		t.Fatal(err)
	}
	again, _ := c.compile(json.RawMessage(toolParams[0]))
	if again != first {
		t.Errorf("the same schema compiled twice, want it from the cache")
	}
	if _, err := c.compile(json.RawMessage(`{"type":"nope"}`)); err == nil {
		t.Errorf("a broken schema: got no error")
	}
	if _, err := c.compile(json.RawMessage(`{"type":"nope"}`)); err == nil {
		t.Errorf("a broken schema, from the cache: got no error")
	}
	big := json.RawMessage(`{"description":"` + strings.Repeat("x", maxCachedSchemaBytes) + `"}`)
	if _, err := c.compile(big); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.compiled.Get(string(big)); ok {
		t.Errorf("a schema over %d bytes was cached", maxCachedSchemaBytes)
	}
	for i := range 1000 {
		if _, err := c.compile(distinct(toolParams[1], i)); err != nil {
			t.Fatal(err)
		}
		if got := c.compiled.Bytes(); got > 64<<10 {
			t.Fatalf("after %d schemas: %d bytes held, want at most %d", i+1, got, 64<<10)
		}
	}
}

// TestCompiledPerSourceByte checks the estimate the cache is bounded by
// against the heap that compiled schemas hold.
func TestCompiledPerSourceByte(t *testing.T) {
	for _, params := range toolParams {
		const n = 200
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		keep := make([]any, n)
		size := 0
		for i := range n {
			raw := distinct(params, i)
			s, err := compileSchema(raw)
			if err != nil {
				t.Fatal(err)
			}
			keep[i], size = s, size+len(raw)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(keep)
		got := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(size)
		t.Logf("%d-byte schema: %.1f bytes compiled per source byte", len(params), got)
		if got > compiledPerSourceByte {
			t.Errorf("compiled schemas hold %.1f bytes per source byte, more than the %d the cache counts", got, compiledPerSourceByte)
		}
	}
}
