package responses

import (
	"encoding/json"
	"fmt"

	"github.com/phasegate/phasegate/chat"
)

// DropFields are the values the Field of a chat.Drop of this door takes.
var DropFields = func() []string {
	f := make([]string, 0, len(hostedKinds)+len(sharedFields)+4)
	for _, k := range hostedKinds {
		f = append(f, "tools."+k)
	}
	f = append(f, "tools.other")
	for _, s := range sharedFields {
		f = append(f, s.param)
	}
	return append(f, fieldClientMetadata, fieldTruncation, fieldInclude)
}()

// Fields of a Responses request that no chat API has.
const (
	fieldClientMetadata = "client_metadata"
	fieldTruncation     = "truncation"
	fieldInclude        = "include"
)

// sharedField is a field of a Responses request that OpenAI's chat API
// has too, under the name chat.
type sharedField struct {
	param, chat string
	value       func(*Request) json.RawMessage
}

// sharedFields are passed on to OpenAI (Target.OpenAI) and dropped for
// any other upstream: DeepSeek's chat API has none of them.
var sharedFields = []sharedField{
	{"prompt_cache_key", "prompt_cache_key", func(r *Request) json.RawMessage { return r.PromptCacheKey }},
	{"safety_identifier", "safety_identifier", func(r *Request) json.RawMessage { return r.SafetyIdentifier }},
	{"service_tier", "service_tier", func(r *Request) json.RawMessage { return r.ServiceTier }},
	{"text.verbosity", "verbosity", func(r *Request) json.RawMessage {
		if r.Text == nil {
			return nil
		}
		return r.Text.Verbosity
	}},
}

func set(raw json.RawMessage) bool { return len(raw) > 0 && !isNull(raw) }

// chatShared sets the shared fields of r on m when the upstream has them.
func chatShared(m map[string]any, r *Request, t Target) {
	if !t.OpenAI {
		return
	}
	for _, f := range sharedFields {
		if v := f.value(r); set(v) {
			m[f.chat] = v
		}
	}
}

// Dropped returns what of r the gateway accepts and does not send on to
// the upstream t, in the request's order: the hosted tools (unless t
// refuses them: then ChatBody is a 400), the fields of OpenAI's chat API
// when t is another's, client_metadata and truncation (the gateway fits
// a history to the model's window by its own settings), and the include
// values it does not serve. It depends on r and t alone.
func (r *Request) Dropped(t Target) []chat.Drop {
	var out []chat.Drop
	if !t.RefuseHosted {
		out = append(out, r.toolset.hosted...)
	}
	for _, f := range sharedFields {
		if !t.OpenAI && set(f.value(r)) {
			out = append(out, chat.Drop{Param: f.param, Field: f.param})
		}
	}
	if set(r.ClientMetadata) {
		out = append(out, chat.Drop{Param: fieldClientMetadata, Field: fieldClientMetadata})
	}
	if set(r.Truncation) {
		out = append(out, chat.Drop{Param: fieldTruncation, Field: fieldTruncation})
	}
	for i, v := range r.Include {
		if v == IncludeEncryptedReasoning && t.Sealer != nil {
			continue
		}
		out = append(out, chat.Drop{Param: fmt.Sprintf("include[%d]=%s", i, token(v, "other")), Field: fieldInclude})
	}
	return out
}
