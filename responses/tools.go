package responses

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/phasegate/phasegate/chat"
)

// A tool of the Responses API is a function, offered to the chat upstream
// as it is; a namespace of functions, each offered under a name of its
// own (chatName) and given back to the client as the namespace's
// function; or a tool that OpenAI's platform runs (web search, file
// search, a computer, an MCP server, ...), which a chat upstream cannot
// run: dropped before the upstream sees the request, or refused with a
// 400 under HOSTED_TOOLS=refuse (Target.RefuseHosted).
//
// Codex (openai/codex, codex-rs/tools/src/responses_api.rs) declares a
// namespace as {"type":"namespace","name","description","tools":[function
// tools]}, and reads a call of one of its functions back from a
// function_call item whose name is the function's and whose namespace
// field names the namespace (codex-rs/core/src/tools/router.rs,
// build_tool_call: ToolName::new(namespace, name)); it sends the call back
// in later input the same way.

// functionTool is a tool of type function, as the Responses API spells it.
type functionTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description json.RawMessage `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      json.RawMessage `json:"strict"`

	// namespace is the namespace the function was declared in, "" for
	// none.
	namespace string
}

// chat is the function's name on the chat API.
func (t *functionTool) chat() string {
	if t.namespace == "" {
		return t.Name
	}
	return chatName(t.namespace, t.Name)
}

// echo is the function as a response repeats it: parameters and strict
// null when the client sent none, as OpenAI reports them.
func (t functionTool) echo() functionTool {
	t.Parameters, t.Strict = orRaw(t.Parameters, "null"), orRaw(t.Strict, "null")
	return t
}

// namespaceTool is a tool of type namespace: functions under one name.
type namespaceTool struct {
	Type        string            `json:"type"`
	Name        string            `json:"name"`
	Description json.RawMessage   `json:"description,omitempty"`
	Tools       []json.RawMessage `json:"tools"`
}

// namespaceEcho is a namespace as a response repeats it.
type namespaceEcho struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description json.RawMessage `json:"description,omitempty"`
	Tools       []functionTool  `json:"tools"`
}

// maxFunctionName is the longest function name of OpenAI's chat API
// (^[a-zA-Z0-9_-]{1,64}$); DeepSeek's follows it.
const maxFunctionName = 64

// chatName is the chat name of function name of namespace ns: ns__name,
// or, when that is longer than maxFunctionName, its first characters and
// 8 hex digits of a hash of both. It depends on the two names alone, so a
// call of the function has the same name in every request that declares
// it (the guard's ledger compares names across requests).
func chatName(ns, name string) string {
	n := ns + "__" + name
	if len(n) <= maxFunctionName {
		return n
	}
	sum := sha256.Sum256([]byte(ns + "\x00" + name))
	return n[:maxFunctionName-9] + "_" + hex.EncodeToString(sum[:4])
}

// qualified is a function of a namespace, as the client names it.
type qualified struct{ namespace, name string }

// toolSet is what a request's tools became.
type toolSet struct {
	// fns are the functions offered upstream, in order, those of
	// namespaces flattened.
	fns []functionTool
	// echo are the tools as a response repeats them: functions and
	// namespaces, without the tools dropped.
	echo []any
	// hosted are the tools a chat upstream cannot run, and refused is the
	// 400 of the first of them under HOSTED_TOOLS=refuse.
	hosted  []chat.Drop
	refused *chat.Error
}

// namespaced maps the chat name of every function of a namespace to the
// function as the client names it.
func (s *toolSet) namespaced() map[string]qualified {
	var m map[string]qualified
	for _, t := range s.fns {
		if t.namespace == "" {
			continue
		}
		if m == nil {
			m = make(map[string]qualified)
		}
		m[t.chat()] = qualified{t.namespace, t.Name}
	}
	return m
}

// parseTools reads the request's tools. A tool that is not a function or
// a namespace is a hosted tool: kept aside, named as dropped.
func parseTools(raw []json.RawMessage) (toolSet, error) {
	var s toolSet
	for i, b := range raw {
		param := fmt.Sprintf("tools[%d]", i)
		typ, err := toolType(b, param)
		if err != nil {
			return s, err
		}
		switch typ {
		case "function":
			t, err := parseFunction(b, param, "")
			if err != nil {
				return s, err
			}
			s.fns = append(s.fns, t)
			s.echo = append(s.echo, t.echo())
		case "namespace":
			if err := s.namespace(b, param); err != nil {
				return s, err
			}
		default:
			s.host(param, typ)
		}
	}
	return s, s.unique()
}

func toolType(b json.RawMessage, param string) (string, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return "", chat.InvalidRequest(param, "%s must be a tool object: %s", param, err)
	}
	if head.Type == "" {
		return "", chat.InvalidRequest(param+".type", "missing required parameter: %s.type", param)
	}
	return head.Type, nil
}

func parseFunction(b json.RawMessage, param, namespace string) (functionTool, error) {
	var t functionTool
	if err := json.Unmarshal(b, &t); err != nil {
		return t, chat.InvalidRequest(param, "%s must be a tool object: %s", param, err)
	}
	if t.Name == "" {
		return t, chat.InvalidRequest(param+".name", "missing required parameter: %s.name", param)
	}
	t.namespace = namespace
	return t, nil
}

// namespace reads a namespace tool: its functions are offered, each
// under its chat name; a tool of another type in it is hosted.
func (s *toolSet) namespace(b json.RawMessage, param string) error {
	var ns namespaceTool
	if err := json.Unmarshal(b, &ns); err != nil {
		return chat.InvalidRequest(param, "%s must be a namespace tool object: %s", param, err)
	}
	if ns.Name == "" {
		return chat.InvalidRequest(param+".name", "missing required parameter: %s.name", param)
	}
	echo := namespaceEcho{Type: ns.Type, Name: ns.Name, Description: ns.Description, Tools: []functionTool{}}
	for j, tb := range ns.Tools {
		p := fmt.Sprintf("%s.tools[%d]", param, j)
		typ, err := toolType(tb, p)
		if err != nil {
			return err
		}
		if typ != "function" {
			s.host(p, typ)
			continue
		}
		t, err := parseFunction(tb, p, ns.Name)
		if err != nil {
			return err
		}
		s.fns = append(s.fns, t)
		echo.Tools = append(echo.Tools, t.echo())
	}
	s.echo = append(s.echo, echo)
	return nil
}

// host keeps aside the hosted tool at param, of type typ.
func (s *toolSet) host(param, typ string) {
	kind := hostedKind(typ)
	s.hosted = append(s.hosted, chat.Drop{Param: param + ".type=" + token(typ, kind), Field: "tools." + kind})
	if s.refused == nil {
		s.refused = unsupported(param+".type", "tools of type %q are not supported by this gateway: only function tools and namespaces of them are "+
			"(built-in tools such as web search, file search, computer use and code interpreter run on OpenAI's platform; HOSTED_TOOLS=drop drops them instead)", typ)
	}
}

// unique refuses two functions offered under one chat name when either
// is a namespace's: the upstream could not tell them apart, nor the
// gateway the call it gets back.
func (s *toolSet) unique() error {
	seen := make(map[string]functionTool, len(s.fns))
	for _, t := range s.fns {
		n := t.chat()
		if prev, ok := seen[n]; ok && (t.namespace != "" || prev.namespace != "") {
			return chat.InvalidRequest("tools", "function %q of namespace %q and function %q of namespace %q are both offered upstream as %q: rename one",
				t.Name, t.namespace, prev.Name, prev.namespace, n)
		}
		seen[n] = t
	}
	return nil
}

// hostedKinds are the hosted tool types the gateway names in metrics,
// longest first where one starts another; a dated version
// (web_search_2025_08_26) counts as its type.
var hostedKinds = []string{"web_search_preview", "web_search", "file_search", "code_interpreter", "computer_use_preview", "computer_use",
	"image_generation", "local_shell", "mcp", "custom", "tool_search", "shell", "apply_patch"}

// hostedKind is the kind of hosted tool type typ: one of hostedKinds, or
// "other".
func hostedKind(typ string) string {
	for _, k := range hostedKinds {
		if typ == k || strings.HasPrefix(typ, k+"_2") {
			return k
		}
	}
	return "other"
}

// token is v when it is a short name of letters, digits, _, . and -,
// else alt: what a client wrote is named in a header only when it is
// plainly a name.
func token(v, alt string) string {
	if v == "" || len(v) > maxFunctionName {
		return alt
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return alt
		}
	}
	return v
}
