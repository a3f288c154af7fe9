package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp/syntax"
	"sort"
	"strconv"
	"strings"
)

// SchemaBudget bounds what compiling a client's parameters schema may
// cost. Go's regexp expands a bounded repetition into a copy of its
// operand per count (x{0,1000} is a thousand nested optional x's), and
// nested repetitions multiply, so a pattern of a few bytes can compile to
// millions of instructions; a schema of a few hundred KiB of them takes
// seconds of CPU and hundreds of MiB. The cost of a pattern is counted in
// the instructions it compiles to, without compiling it.
type SchemaBudget struct {
	// MaxPattern bounds the instructions of one pattern (a "pattern"
	// keyword or a "patternProperties" key). Default 10,000: ^.{0,1000}$
	// fits, (abcdefghij){0,1000} does not.
	MaxPattern int64
	// MaxSchema bounds the instructions of all the patterns of one
	// schema together, each counted at least patternOverhead. Default
	// 50,000: a hundred properties with patterns of a few hundred
	// instructions fit, twenty-five x{0,1000} do not. Its compiled size
	// (about 3.2 MB) still fits the schema cache.
	MaxSchema int64
}

// DefaultSchemaBudget returns the budget phasegate starts with.
func DefaultSchemaBudget() SchemaBudget { return SchemaBudget{MaxPattern: 10_000, MaxSchema: 50_000} }

// patternOverhead is what one compiled pattern costs beyond its
// instructions, in instructions: the regexp's own structures, about 1 KiB
// (TestCompiledPatternBytes).
const patternOverhead = 32

// instBytes is the heap a compiled pattern holds per instruction,
// rounded up: an anchored pattern is compiled twice, the second time for
// one-pass matching, with the ranges of its classes copied
// (TestCompiledPatternBytes).
const instBytes = 64

// SchemaCostError is a parameters schema whose patterns cost more to
// compile than the budget allows. Pointer is the JSON pointer of the
// pattern over MaxPattern, or "" when the patterns are over MaxSchema only
// together.
type SchemaCostError struct {
	Pointer string
	Cost    int64
	Limit   int64
}

func (e *SchemaCostError) Error() string {
	if e.Pointer != "" {
		return fmt.Sprintf("the pattern at %s compiles to about %d regular-expression instructions; this gateway compiles at most %d per pattern (bounded repetitions such as {0,1000} are expanded, and nested ones multiply)", e.Pointer, e.Cost, e.Limit)
	}
	return fmt.Sprintf("the patterns of the schema compile to about %d regular-expression instructions together; this gateway compiles at most %d per schema", e.Cost, e.Limit)
}

// SchemaCost returns what compiling the patterns of params costs, in
// instructions (0 for a schema without patterns), or a *SchemaCostError
// when it is over b. Zero fields of b take their defaults. A schema that
// is not JSON, or a pattern that does not parse, costs nothing here: the
// compiler refuses it.
func SchemaCost(params json.RawMessage, b SchemaBudget) (int64, error) {
	if b.MaxPattern <= 0 {
		b.MaxPattern = DefaultSchemaBudget().MaxPattern
	}
	if b.MaxSchema <= 0 {
		b.MaxSchema = DefaultSchemaBudget().MaxSchema
	}
	// Most tool schemas have no pattern: they pay for this look only.
	if !bytes.Contains(params, []byte(`"pattern`)) {
		return 0, nil
	}
	var doc any
	if json.Unmarshal(params, &doc) != nil {
		return 0, nil
	}
	w := costWalk{budget: b}
	if err := w.walk(doc, ""); err != nil {
		return w.total, err
	}
	return w.total, nil
}

type costWalk struct {
	budget SchemaBudget
	total  int64
}

// walk adds the patterns under v, at pointer ptr. Every object is looked
// at, not only schemas: a "pattern" string where no keyword is read is
// counted too, which errs on the side of the bound.
func (w *costWalk) walk(v any, ptr string) error {
	switch v := v.(type) {
	case []any:
		for i, e := range v {
			if err := w.walk(e, ptr+"/"+strconv.Itoa(i)); err != nil {
				return err
			}
		}
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys) // the same schema names the same pointer
		for _, k := range keys {
			p := ptr + "/" + escapePointer(k)
			if err := w.member(k, v[k], p); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *costWalk) member(key string, v any, ptr string) error {
	if s, ok := v.(string); ok && key == "pattern" {
		return w.add(s, ptr)
	}
	if props, ok := v.(map[string]any); ok && key == "patternProperties" {
		keys := make([]string, 0, len(props))
		for k := range props {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := w.add(k, ptr+"/"+escapePointer(k)); err != nil {
				return err
			}
		}
	}
	return w.walk(v, ptr)
}

func (w *costWalk) add(pattern, ptr string) error {
	n := PatternCost(pattern)
	if n > w.budget.MaxPattern {
		return &SchemaCostError{Pointer: ptr, Cost: n, Limit: w.budget.MaxPattern}
	}
	w.total += max(n, patternOverhead)
	if w.total > w.budget.MaxSchema {
		return &SchemaCostError{Cost: w.total, Limit: w.budget.MaxSchema}
	}
	return nil
}

// PatternCost is an upper bound on the instructions Go's regexp compiles
// pattern to (the classes of an anchored one weighed by their ranges), found from its
// syntax tree without compiling it; 0 when it does not parse (the
// compiler then refuses it, at no cost).
func PatternCost(pattern string) int64 {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0
	}
	// The match and the failure, and the ranges of the classes, held
	// once by the parsed pattern: 4 runes weigh about an instruction.
	return treeCost(re, anchored(re)) + 2 + classRunes(re)/4
}

// costCap keeps the products of nested repetitions from overflowing; it
// is far above any budget.
const costCap = 1 << 40

// treeCost counts as regexp/syntax compiles: a literal an instruction a
// rune, a repetition a copy of its operand per count plus a split each,
// an alternation a split per branch, a capture two more. (Go's parser
// refuses nested repetitions whose counts multiply past 1000, but a long
// operand repeated 1000 times is still a million instructions.)
func treeCost(re *syntax.Regexp, onePass bool) int64 {
	subs := int64(0)
	for _, s := range re.Sub {
		subs = min(subs+treeCost(s, onePass), costCap)
	}
	switch re.Op {
	case syntax.OpLiteral:
		return max(int64(len(re.Rune)), 1)
	case syntax.OpCharClass:
		if !onePass {
			return 1
		}
		// The one-pass program keeps a copy of the ranges per
		// instruction: 2 runes weigh about an instruction
		// (^[\p{L}\p{N}]{1,100}$ holds 2 MB).
		return int64(len(re.Rune))/2 + 1
	case syntax.OpConcat:
		return subs
	case syntax.OpAlternate:
		return subs + int64(len(re.Sub)) - 1
	case syntax.OpCapture:
		return subs + 2
	case syntax.OpRepeat:
		n := int64(re.Max)
		if n < 0 {
			n = int64(re.Min) + 1
		}
		return min(n*(subs+1), costCap)
	}
	return subs + 1
}

// classRunes counts the runes of the ranges of the classes of re.
func classRunes(re *syntax.Regexp) int64 {
	n := int64(0)
	if re.Op == syntax.OpCharClass {
		n = int64(len(re.Rune))
	}
	for _, s := range re.Sub {
		n = min(n+classRunes(s), costCap)
	}
	return n
}

// anchored reports whether re starts with ^ or \A: Go's regexp then
// also compiles a one-pass program for it, when it can.
func anchored(re *syntax.Regexp) bool {
	for {
		switch re.Op {
		case syntax.OpBeginText:
			return true
		case syntax.OpConcat, syntax.OpCapture:
			if len(re.Sub) == 0 {
				return false
			}
			re = re.Sub[0]
		default:
			return false
		}
	}
}

// escapePointer escapes a JSON pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
