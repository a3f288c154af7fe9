package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"runtime"
	"strings"
	"testing"
)

// TestPatternCost checks the estimate against what regexp/syntax
// compiles: never below it (the bound would leak), and not far above it
// (ordinary patterns would be refused).
func TestPatternCost(t *testing.T) {
	for _, p := range []string{
		`^[a-z0-9_-]{1,64}$`, `^\d{4}-\d{2}-\d{2}$`, `^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`,
		`x{0,1000}`, `(abcdefghij){0,1000}`, `(ab|cd){3,7}`, `^.{0,1000}$`, `(?i)hello world`, `a*b+c?`, `((a{2}){3}){4}`,
		`^(?:[a-z]+\.)*[a-z]{2,}$`, `[\p{L}\p{N}]{1,30}`, `x{1000}`, `(?:x{2,}){10}`, `[^\n]{0,500}`, `[\p{Greek}\p{Han}]{0,100}`,
	} {
		re, err := syntax.Parse(p, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			t.Fatal(err)
		}
		got, want := PatternCost(p), int64(len(prog.Inst))
		if anchored(re) {
			continue // classes weigh more than an instruction: TestCompiledPatternBytes
		}
		if most := 3*want + 8 + classRunes(re)/4; got < want || got > most {
			t.Errorf("PatternCost(%q) = %d, compiled to %d instructions: want between %d and %d", p, got, want, want, most)
		}
	}
}

func TestSchemaCost(t *testing.T) {
	many := func(n int, pattern string) json.RawMessage {
		props := make([]string, n)
		for i := range props {
			props[i] = fmt.Sprintf(`"p%d":{"type":"string","pattern":%q}`, i, pattern)
		}
		return json.RawMessage(`{"type":"object","properties":{` + strings.Join(props, ",") + `}}`)
	}
	for _, tc := range []struct {
		name        string
		params      json.RawMessage
		wantPointer string // "" with wantErr: over the schema budget
		wantErr     bool
	}{
		{name: "no pattern", params: json.RawMessage(toolParams[1])},
		{name: "ordinary patterns", params: many(100, `^[a-z0-9_-]{1,64}$`)},
		{name: "one long repetition", params: many(1, `^.{0,1000}$`)},
		{name: "many repetitions", params: many(30, `x{0,1000}`), wantErr: true},
		{name: "many tiny patterns", params: many(2000, `a`), wantErr: true},
		{name: "nested repetition", params: json.RawMessage(`{"type":"object","properties":{"a/b":{"type":"string","pattern":"(abcdefghijk){1000}"}}}`),
			wantErr: true, wantPointer: "/properties/a~1b/pattern"},
		{name: "patternProperties key", params: json.RawMessage(`{"type":"object","patternProperties":{"(yyyyyyyyyyyyyyyyyyyy){0,1000}":{"type":"string"}}}`),
			wantErr: true, wantPointer: "/patternProperties/(yyyyyyyyyyyyyyyyyyyy){0,1000}"},
		{name: "under $defs", params: json.RawMessage(`{"$defs":{"d":{"items":[{"pattern":"(0123456789abcdefghij){0,1000}"}]}}}`),
			wantErr: true, wantPointer: "/$defs/d/items/0/pattern"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := SchemaCost(tc.params, SchemaBudget{})
			var ce *SchemaCostError
			switch {
			case !tc.wantErr && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tc.wantErr && !errors.As(err, &ce):
				t.Fatalf("got %v, want a *SchemaCostError", err)
			case tc.wantErr && ce.Pointer != tc.wantPointer:
				t.Errorf("pointer %q, want %q", ce.Pointer, tc.wantPointer)
			case tc.wantErr && ce.Cost <= ce.Limit:
				t.Errorf("cost %d within limit %d", ce.Cost, ce.Limit)
			}
		})
	}
}

// TestSchemaCacheRefusesCostlyPatterns: a schema over the budget is
// never compiled, so a judged call cannot spend the time and memory.
func TestSchemaCacheRefusesCostlyPatterns(t *testing.T) {
	c := newSchemaCache(4 << 20)
	params := json.RawMessage(`{"type":"object","properties":{"a":{"type":"string","pattern":"(0123456789){0,1000}"}}}`)
	sch, err := c.compile(params)
	var ce *SchemaCostError
	if sch != nil || !errors.As(err, &ce) {
		t.Fatalf("got schema %v, error %v; want no schema and a *SchemaCostError", sch, err)
	}
}

// TestCompiledPatternBytes checks the cost the cache charges a schema's
// patterns against the heap that compiled patterns hold.
func TestCompiledPatternBytes(t *testing.T) {
	for _, p := range []string{`x{0,1000}`, `^[a-z0-9_-]{1,64}$`, `a`, `^(?:[a-z]+\.)*[a-z]{2,}$`, `[\p{Greek}\p{Han}]{0,100}`, `^.{0,1000}$`, `^[\p{L}\p{N}]{1,10}$`, `[\p{L}\p{N}]{1,100}`} {
		const n = 100
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		keep := make([]*regexp.Regexp, n)
		cost := int64(0)
		for i := range keep {
			keep[i] = regexp.MustCompile(p)
			cost += max(PatternCost(p), patternOverhead)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(keep)
		got := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(cost)
		t.Logf("%q: %.1f bytes held per instruction counted", p, got)
		if got > instBytes {
			t.Errorf("%q: compiled patterns hold %.1f bytes per instruction counted, more than the %d the cache charges", p, got, instBytes)
		}
	}
}
