package responses_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/responses"
)

// chatToolNames are the names of the functions a chat body offers.
func chatToolNames(t *testing.T, m map[string]any) []string {
	t.Helper()
	var out []string
	tools, _ := m["tools"].([]any)
	for _, tool := range tools {
		fn := tool.(map[string]any)["function"].(map[string]any)
		out = append(out, fn["name"].(string))
	}
	return out
}

// Hosted tools are dropped and named by default, and refused with a 400
// naming the first of them under HOSTED_TOOLS=refuse; a namespace's
// functions are offered under their chat names either way.
func TestHostedTools(t *testing.T) {
	const body = `{"model":"m","input":"hi","tools":[{"type":"function","name":"f"},{"type":"web_search_2025_08_26"},` +
		`{"type":"namespace","name":"ns","description":"d","tools":[{"type":"function","name":"g"},{"type":"custom","name":"patch"}]},` +
		`{"type":"file_search","vector_store_ids":["vs"]},{"type":"made up\nheader"},{"type":"code_interpreter","container":{"type":"auto"}}]}`
	r, err := responses.ParseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := []chat.Drop{
		{Param: "tools[1].type=web_search_2025_08_26", Field: "tools.web_search"},
		{Param: "tools[2].tools[1].type=custom", Field: "tools.custom"},
		{Param: "tools[3].type=file_search", Field: "tools.file_search"},
		{Param: "tools[4].type=other", Field: "tools.other"},
		{Param: "tools[5].type=code_interpreter", Field: "tools.code_interpreter"},
	}
	if d := cmp.Diff(want, r.Dropped(responses.Target{})); d != "" {
		t.Errorf("dropped (-want +got):\n%s", d)
	}
	for _, d := range want {
		if !slices.Contains(responses.DropFields, d.Field) {
			t.Errorf("field %q is not one of DropFields", d.Field)
		}
	}
	got, err := translate(t, body, responses.Target{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"f", "ns__g"}, chatToolNames(t, got)); d != "" {
		t.Errorf("tools offered upstream (-want +got):\n%s", d)
	}

	_, err = translate(t, body, responses.Target{RefuseHosted: true})
	var e *chat.Error
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Param != "tools[1].type" || e.Code != "unsupported_parameter" {
		t.Fatalf("refused: err = %v, want a 400 unsupported_parameter on tools[1].type", err)
	}
	if len(r.Dropped(responses.Target{RefuseHosted: true})) != 0 {
		t.Errorf("a refused request names drops: %v", r.Dropped(responses.Target{RefuseHosted: true}))
	}
}

// A function of a namespace has one chat name, whatever request declares
// it, within the 64 characters of a chat function name.
func TestNamespaceChatNames(t *testing.T) {
	long := strings.Repeat("n", 40)
	body := func(fns ...string) string {
		var tools []string
		for _, f := range fns {
			tools = append(tools, `{"type":"function","name":"`+f+`","parameters":{"type":"object"}}`)
		}
		return `{"model":"m","input":"hi","tools":[{"type":"namespace","name":"` + long + `","tools":[` + strings.Join(tools, ",") + `]}]}`
	}
	a, err := translate(t, body(strings.Repeat("a", 30), strings.Repeat("b", 30)), responses.Target{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := translate(t, body(strings.Repeat("b", 30)), responses.Target{})
	if err != nil {
		t.Fatal(err)
	}
	names := chatToolNames(t, a)
	if len(names) != 2 || names[0] == names[1] || names[1] != chatToolNames(t, b)[0] {
		t.Fatalf("chat names %v and %v: want two distinct, the second the same in both requests", names, chatToolNames(t, b))
	}
	for _, n := range names {
		if len(n) > 64 || !strings.HasPrefix(n, long+"__") {
			t.Errorf("chat name %q: %d characters, want at most 64 opening with the namespace", n, len(n))
		}
	}
}

// Two functions offered under one chat name, one of them a namespace's,
// are a 400: neither the upstream nor the gateway could tell them apart.
func TestNamespaceNameClash(t *testing.T) {
	_, err := translate(t, `{"model":"m","input":"hi","tools":[{"type":"function","name":"ns__f"},{"type":"namespace","name":"ns","tools":[{"type":"function","name":"f"}]}]}`, responses.Target{})
	var e *chat.Error
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Param != "tools" {
		t.Fatalf("err = %v, want a 400 on tools", err)
	}
}

// A response repeats the tools offered as the client declared them:
// functions, and namespaces with their functions; not the hosted tools
// dropped.
func TestResponseEchoesNamespaces(t *testing.T) {
	r, err := responses.ParseRequest([]byte(`{"model":"m","input":"hi","tools":[{"type":"web_search"},{"type":"namespace","name":"ns","description":"d","tools":[{"type":"function","name":"f"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(responses.NewResponse(r).JSON(), &got); err != nil {
		t.Fatal(err)
	}
	want := `{"type":"namespace","name":"ns","description":"d","tools":[{"type":"function","name":"f","parameters":null,"strict":null}]}`
	if len(got.Tools) != 1 || string(got.Tools[0]) != want {
		t.Errorf("tools = %s, want [%s]", got.Tools, want)
	}
}
