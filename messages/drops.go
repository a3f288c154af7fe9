package messages

import (
	"maps"
	"slices"
	"strings"

	"github.com/phasegate/phasegate/chat"
)

// DropFields are the values the Field of a chat.Drop of this door
// takes: a kind of hosted tool (tools.web_search, ...), a field, or a
// kind of block; any other dropped part is other.
var DropFields = []string{
	"tools.web_search", "tools.web_fetch", "tools.code_execution", "tools.text_editor", "tools.bash", "tools.computer",
	"tools.memory", "tools.tool_search", "tools.mcp", "tools.other",
	"cache_control", "citations", "context_management", "output_config", "container", "mcp_servers", "service_tier",
	"inference_geo", "metadata", "thinking", "redacted_thinking", "top_k", "tool_choice", "tool_field", "content", "thread", "other",
}

// fieldKinds are the dropped names that are their own Field.
var fieldKinds = map[string]bool{"cache_control": true, "citations": true, "context_management": true, "output_config": true,
	"container": true, "mcp_servers": true, "service_tier": true, "inference_geo": true, "thinking": true,
	"redacted_thinking": true, "top_k": true, "tool_choice": true, "thread": true}

// fieldOf is the Field of a dropped field or block named name.
func fieldOf(name string) string {
	switch {
	case fieldKinds[name]:
		return name
	case strings.HasPrefix(name, "metadata."):
		return "metadata"
	}
	return "other"
}

// hostedKinds are the kinds of Anthropic's hosted tools, each the
// prefix of its versioned types (web_search_20250305).
var hostedKinds = []string{"web_search", "web_fetch", "code_execution", "text_editor", "bash", "computer", "memory", "tool_search", "mcp"}

// hostedField is the Field of a hosted tool of type typ.
func hostedField(typ string) string {
	for _, k := range hostedKinds {
		if strings.HasPrefix(typ, k) {
			return "tools." + k
		}
	}
	return "tools.other"
}

// maxDropped bounds the names of Translation.Dropped, so that a request
// with any number of unknown fields makes a header of bounded size.
const maxDropped = 32

// names is a set of dropped names, each with its Field.
type names struct{ set map[string]string }

func (n *names) add(name, field string) {
	if n.set == nil {
		n.set = make(map[string]string)
	}
	name = safeName(name)
	if _, ok := n.set[name]; ok {
		return
	}
	if len(n.set) >= maxDropped-1 {
		name, field = "more", "other"
	}
	n.set[name] = field
}

func (n *names) list() []chat.Drop {
	if len(n.set) == 0 {
		return nil
	}
	out := make([]chat.Drop, 0, len(n.set))
	for _, name := range slices.Sorted(maps.Keys(n.set)) {
		out = append(out, chat.Drop{Param: name, Field: n.set[name]})
	}
	return out
}

// safeName is name with every byte that is not a letter, a digit or one
// of "._-:" written "_", cut to 64 bytes.
func safeName(name string) string {
	if len(name) > 64 {
		name = name[:64]
	}
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':') {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
}
