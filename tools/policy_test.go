package tools

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/chat"
)

func declare(name, params string) chat.Tool {
	t := chat.Tool{Type: "function", Function: chat.FunctionDef{Name: name}}
	if params != "" {
		t.Function.Parameters = json.RawMessage(params)
	}
	return t
}

const readParams = `{
	"type": "object",
	"properties": {
		"path": {"type": "string"},
		"limit": {"type": "integer", "minimum": 1},
		"mode": {"enum": ["text", "binary"]}
	},
	"required": ["path"],
	"additionalProperties": false
}`

func testTools() []chat.Tool {
	return []chat.Tool{
		declare("read_file", readParams),
		declare("list_dir", `{"type":"object","properties":{"dir":{"type":"string"}}}`),
		declare("now", ""),
		declare("write_file", `{"type":"object","required":["path","content"]}`),
		declare("broken", `{"type":"objekt"}`),
		declare("remote_ref", `{"$ref":"https://example.com/schema.json"}`),
		declare("file_ref", `{"$ref":"file:///etc/passwd"}`),
	}
}

func TestPolicyJudge(t *testing.T) {
	ledger := NewLedger("proj", history(t, `[
		{"role":"user","content":"go"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.txt\",\"limit\":10}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"text of a"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c2","type":"function","function":{"name":"now","arguments":""}}]},
		{"role":"tool","tool_call_id":"c2","content":"12:00"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c3","type":"function","function":{"name":"write_file","arguments":"{\"path\":\"p\"}"}}]},
		{"role":"tool","tool_call_id":"c3","content":"error: content missing"}
	]`))
	planAllow := []string{"read_file", "list_dir", "not_declared"}
	tests := []struct {
		name          string
		allow         []string
		call          chat.ToolCall
		want          Verdict
		wantSignature bool
		wantSchemaErr bool
		// wantReason lists substrings of the reason.
		wantReason []string
	}{
		{
			name:          "new call",
			call:          toolCall("x", "read_file", `{"path":"b.txt"}`),
			want:          VerdictForward,
			wantSignature: true,
		},
		{
			name:          "duplicate respelled",
			call:          toolCall("x", "read_file", ` {"limit":1e1, "path":"a.txt"}`),
			want:          VerdictDuplicate,
			wantSignature: true,
			wantReason:    []string{`"read_file"`},
		},
		{
			name:          "duplicate of empty arguments",
			call:          toolCall("x", "now", `{}`),
			want:          VerdictDuplicate,
			wantSignature: true,
		},
		{
			name:       "malformed",
			call:       toolCall("x", "read_file", `{"path":"secret-value`),
			want:       VerdictMalformed,
			wantReason: []string{`"read_file"`, "incomplete"},
		},
		{
			name:       "malformed before undeclared",
			call:       toolCall("x", "nope", `{"a"`),
			want:       VerdictMalformed,
			wantReason: []string{`"nope"`},
		},
		{
			name:       "not an object",
			call:       toolCall("x", "read_file", `["a.txt"]`),
			want:       VerdictMalformed,
			wantReason: []string{"array"},
		},
		{
			name:       "undeclared",
			call:       toolCall("x", "delete_file", `{"path":"a"}`),
			want:       VerdictUndeclared,
			wantReason: []string{`Tool "delete_file" is not declared in this request; declared tools: read_file, list_dir, now, write_file, broken, remote_ref, file_ref.`},
		},
		{
			name:       "undeclared before not allowed",
			allow:      planAllow,
			call:       toolCall("x", "not_declared", `{}`),
			want:       VerdictUndeclared,
			wantReason: []string{`"not_declared"`},
		},
		{
			name:       "not allowed in plan mode",
			allow:      planAllow,
			call:       toolCall("x", "write_file", `{"path":"a","content":"c"}`),
			want:       VerdictNotAllowed,
			wantReason: []string{`Tool "write_file" is not allowed in plan mode; allowed tools: read_file, list_dir.`},
		},
		{
			name:       "not allowed before schema invalid",
			allow:      planAllow,
			call:       toolCall("x", "write_file", `{}`),
			want:       VerdictNotAllowed,
			wantReason: []string{`"write_file"`},
		},
		{
			name:       "empty allowlist allows nothing",
			allow:      []string{},
			call:       toolCall("x", "list_dir", `{}`),
			want:       VerdictNotAllowed,
			wantReason: []string{"no tools are allowed"},
		},
		{
			name:          "allowed in plan mode",
			allow:         planAllow,
			call:          toolCall("x", "list_dir", `{"dir":"."}`),
			want:          VerdictForward,
			wantSignature: true,
		},
		{
			name:       "missing required property",
			call:       toolCall("x", "read_file", `{"limit":3}`),
			want:       VerdictSchemaInvalid,
			wantReason: []string{`missing required property "path"`},
		},
		{
			name:       "empty arguments miss required properties",
			call:       toolCall("x", "write_file", ``),
			want:       VerdictSchemaInvalid,
			wantReason: []string{`missing required properties "path", "content"`},
		},
		{
			name:       "wrong type",
			call:       toolCall("x", "read_file", `{"path":"a","limit":"TEN"}`),
			want:       VerdictSchemaInvalid,
			wantReason: []string{"/properties/limit", "want integer"},
		},
		{
			name:       "schema invalid keeps argument values out",
			call:       toolCall("x", "read_file", `{"path":"a","mode":"SECRET","EXTRA_KEY":1}`),
			want:       VerdictSchemaInvalid,
			wantReason: []string{`"enum"`, "not allowed"},
		},
		{
			name:       "schema invalid before duplicate",
			call:       toolCall("x", "write_file", `{"path":"p"}`),
			want:       VerdictSchemaInvalid,
			wantReason: []string{`"content"`},
		},
		{
			name:          "no schema accepts any object",
			call:          toolCall("x", "now", `{"anything":[1,2]}`),
			want:          VerdictForward,
			wantSignature: true,
		},
		{
			name:          "schema that does not compile is no schema",
			call:          toolCall("x", "broken", `{"a":1}`),
			want:          VerdictForward,
			wantSignature: true,
			wantSchemaErr: true,
		},
		{
			name:          "remote reference is not fetched",
			call:          toolCall("x", "remote_ref", `{}`),
			want:          VerdictForward,
			wantSignature: true,
			wantSchemaErr: true,
		},
		{
			name:          "file reference is not read",
			call:          toolCall("x", "file_ref", `{}`),
			want:          VerdictForward,
			wantSignature: true,
			wantSchemaErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NewPolicy(testTools(), tt.allow, ledger).Judge(tt.call)
			if got.Verdict != tt.want {
				t.Errorf("Verdict: got %q, want %q (reason %q)", got.Verdict, tt.want, got.Reason)
			}
			if gotSig := got.Signature != ""; gotSig != tt.wantSignature {
				t.Errorf("has Signature: got %v, want %v", gotSig, tt.wantSignature)
			}
			if tt.wantSignature {
				want := mustSignature(t, "proj", tt.call.Function.Name, tt.call.Function.Arguments)
				if got.Signature != want {
					t.Errorf("Signature: got %s, want %s", got.Signature, want)
				}
			}
			var schemaErr *SchemaError
			if gotErr := errors.As(got.SchemaErr, &schemaErr); gotErr != tt.wantSchemaErr {
				t.Errorf("SchemaErr: got %v, want a *SchemaError: %v", got.SchemaErr, tt.wantSchemaErr)
			}
			if got.Reason == "" {
				t.Errorf("Reason: got empty, want a sentence")
			}
			for _, s := range tt.wantReason {
				if !strings.Contains(got.Reason, s) {
					t.Errorf("Reason: got %q, want it to contain %q", got.Reason, s)
				}
			}
			for _, secret := range []string{"secret-value", "SECRET", "EXTRA_KEY", "TEN", "a.txt"} {
				if strings.Contains(got.Reason, secret) {
					t.Errorf("Reason: got %q, want no argument content (%q)", got.Reason, secret)
				}
			}
		})
	}
}

func TestPolicyCompilesOnce(t *testing.T) {
	p := NewPolicy([]chat.Tool{declare("read_file", readParams), declare("broken", `{"type":"objekt"}`)}, nil, nil)
	tests := []struct {
		name string
		call chat.ToolCall
		want Verdict
	}{
		{name: "first use compiles", call: toolCall("x", "read_file", `{}`), want: VerdictSchemaInvalid},
		{name: "second use reuses", call: toolCall("x", "read_file", `{"path":"a"}`), want: VerdictForward},
		{name: "broken first use", call: toolCall("x", "broken", `{}`), want: VerdictForward},
		{name: "broken second use", call: toolCall("x", "broken", `{}`), want: VerdictForward},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Judge(tt.call).Verdict; got != tt.want {
				t.Errorf("Verdict: got %q, want %q", got, tt.want)
			}
		})
	}
	for name, d := range p.declared {
		if !d.compiled {
			t.Errorf("tool %q: got not compiled, want compiled", name)
		}
	}
	if sch := p.declared["read_file"].schema; sch == nil || p.schema("read_file", p.declared["read_file"]) != sch {
		t.Errorf("read_file schema: got a different schema on reuse, want the same")
	}
}

func TestFilterTools(t *testing.T) {
	tools := testTools()
	tests := []struct {
		name  string
		allow []string
		want  []string
	}{
		{name: "no plan mode", allow: nil, want: []string{"read_file", "list_dir", "now", "write_file", "broken", "remote_ref", "file_ref"}},
		{name: "allowlist keeps request order", allow: []string{"list_dir", "read_file", "missing"}, want: []string{"read_file", "list_dir"}},
		{name: "empty allowlist", allow: []string{}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, tool := range FilterTools(tools, tt.allow) {
				got = append(got, tool.Function.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("FilterTools: got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestVerdicts reads the package's source for its Verdict constants: each
// is in Verdicts() (which the metrics' verdict labels are checked
// against, in protocol's TestVerdictsHaveMetricLabels), and each but
// forward has a notice and a shown line of its own. A new verdict
// declared and left out of any of them fails here.
func TestVerdicts(t *testing.T) {
	declared := verdictConstants(t)
	if got := Verdicts(); !slices.Equal(got, declared) {
		t.Errorf("Verdicts(): got %v, want every Verdict constant in the order declared: %v", got, declared)
	}
	b := Budget{MaxExecutions: 10, MaxRefused: 3}
	for _, v := range declared {
		if v == VerdictForward {
			continue
		}
		j := Judgement{Verdict: v, Tool: "t", Reason: "Why."}
		if n := Notice(j, b); n == "" || strings.Contains(n, "The call was not executed.") {
			t.Errorf("verdict %q has no notice of its own: %q", v, n)
		}
		if s := Shown(j, b); s == "" || strings.Contains(s, ": "+string(v)+" (") {
			t.Errorf("verdict %q has no shown line of its own: %q", v, s)
		}
	}
}

// verdictConstants returns the values of the constants named Verdict…
// in the package's source, in the order declared.
func verdictConstants(t *testing.T) []Verdict {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []Verdict
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "Verdict") {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: %s is not a string literal", fset.Position(id.Pos()), id.Name)
					}
					v, _ := strconv.Unquote(lit.Value)
					out = append(out, Verdict(v))
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no Verdict constant found in the package's source")
	}
	return out
}

func BenchmarkPolicyJudge(b *testing.B) {
	ledger := NewLedger("proj", history(b, `[
		{"role":"user","content":"go"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.txt\"}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"text of a"}
	]`))
	call := toolCall("x", "read_file", `{"path": "/home/user/project/src/server/handlers/users.go", "limit": 60, "mode": "text"}`)
	b.Run("compiled", func(b *testing.B) {
		p := NewPolicy(testTools(), nil, ledger)
		p.Judge(call)
		b.ReportAllocs()
		for b.Loop() {
			if j := p.Judge(call); j.Verdict != VerdictForward {
				b.Fatalf("Verdict: got %q, want forward (%s)", j.Verdict, j.Reason)
			}
		}
	})
	b.Run("per request", func(b *testing.B) {
		tools := testTools()
		b.ReportAllocs()
		for b.Loop() {
			if j := NewPolicy(tools, nil, ledger).Judge(call); j.Verdict != VerdictForward {
				b.Fatalf("Verdict: got %q, want forward (%s)", j.Verdict, j.Reason)
			}
		}
	})
}
