package tools

import "github.com/phasegate/phasegate/chat"

// delta builds a tool-call fragment.
func delta(index int, id, name, args string) chat.ToolCallDelta {
	d := chat.ToolCallDelta{Index: index, ID: id}
	if id != "" || name != "" {
		d.Type = "function"
	}
	d.Function.Name = name
	d.Function.Arguments = args
	return d
}

// fragments splits args into pieces of the given sizes (the last piece
// takes the rest) and returns them as fragments of one call at index 0; the
// first fragment carries the id and name, and every fragment repeats the id
// when repeatID is set.
func fragments(id, name, args string, sizes []int, repeatID bool) []chat.ToolCallDelta {
	var out []chat.ToolCallDelta
	rest := args
	for i := 0; ; i++ {
		n := len(rest)
		if i < len(sizes) && sizes[i] < n {
			n = sizes[i]
		}
		d := delta(0, "", "", rest[:n])
		if i == 0 {
			d = delta(0, id, name, rest[:n])
		} else if repeatID {
			d.ID = id
		}
		out = append(out, d)
		rest = rest[n:]
		if rest == "" && i >= len(sizes)-1 {
			return out
		}
	}
}

func toolCall(id, name, args string) chat.ToolCall {
	return chat.ToolCall{ID: id, Type: "function", Function: chat.FunctionCall{Name: name, Arguments: args}}
}
