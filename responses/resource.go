package responses

import (
	"bytes"
	"encoding/json"
)

// ItemID returns a fresh id for an item of type typ, prefixed as
// OpenAI's are: "msg_" for a message, "fc_" for a function call, "fco_"
// for its output, "rs_" for reasoning.
func ItemID(typ string) string {
	switch typ {
	case TypeMessage:
		return NewID("msg_")
	case TypeFunctionCall:
		return NewID("fc_")
	case TypeFunctionCallOutput:
		return NewID("fco_")
	case TypeReasoning:
		return NewID("rs_")
	}
	return NewID("item_")
}

// Resource is a stored input item as a listing of input items shows it:
// an item resource of the specification. A message's content is a list
// of parts (input_text, or output_text with its annotations for the
// assistant's), and messages, function calls and their outputs have a
// status ("completed" when the client sent none). The item's id is kept:
// it was minted when the item was stored, if the client sent none.
func Resource(it Item) Item {
	switch it.Type {
	case TypeMessage:
		it.Content = resourceParts(it.Content, it.Role == "assistant")
	case TypeReasoning:
		if len(it.Summary) == 0 || isNull(it.Summary) {
			it.Summary = json.RawMessage(`[]`)
		}
		return it
	case TypeFunctionCall, TypeFunctionCallOutput:
	default:
		return it
	}
	if it.Status == "" {
		it.Status = StatusCompleted
	}
	return it
}

// resourceParts is a message's content as parts: a string is one text
// part; text parts are typed for the message's side (output_text with
// annotations and logprobs for the assistant's, input_text otherwise),
// and an image without a detail has detail auto. Content that is no
// list of objects is kept as it is.
func resourceParts(raw json.RawMessage, assistant bool) json.RawMessage {
	text := "input_text"
	if assistant {
		text = "output_text"
	}
	raw = bytes.TrimSpace(raw)
	var parts []map[string]json.RawMessage
	if len(raw) > 0 && raw[0] == '"' {
		parts = []map[string]json.RawMessage{{"text": raw}}
	} else if json.Unmarshal(raw, &parts) != nil {
		return raw
	}
	for _, p := range parts {
		var typ string
		_ = json.Unmarshal(p["type"], &typ)
		switch typ {
		case "", "text", "input_text", "output_text":
			p["type"] = json.RawMessage(`"` + text + `"`)
			if !assistant {
				delete(p, "annotations")
				delete(p, "logprobs")
				break
			}
			for _, k := range []string{"annotations", "logprobs"} {
				if len(p[k]) == 0 || isNull(p[k]) {
					p[k] = json.RawMessage(`[]`)
				}
			}
		case "input_image":
			if len(p["detail"]) == 0 || isNull(p["detail"]) {
				p["detail"] = json.RawMessage(`"auto"`)
			}
		}
	}
	b, err := json.Marshal(parts)
	if err != nil {
		return raw
	}
	return b
}
