package responses_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/responses"
)

// Any request body translates to a 400 in OpenAI's shape or to a chat
// request the pipeline accepts; nothing panics. The seeds hold Codex's
// requests as it sends them (see codex_test.go).
func FuzzChatBody(f *testing.F) {
	for _, path := range []string{codexFirstTurn, codexThirdTurn} {
		f.Add(fixture(f, path), true)
		f.Add(fixture(f, path), false)
	}
	for _, s := range []string{
		`{"model":"m","input":"hi"}`,
		`{"model":"m","input":[{"role":"developer","content":"x"},{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"data:,"}]}]}`,
		`{"model":"m","input":[{"type":"reasoning","id":"r","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"t"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"o"}]}]}`,
		`{"model":"m","input":[{"type":"item_reference","id":"msg_1"}],"tool_choice":{"type":"function","name":"f"},"tools":[{"type":"function","name":"f","parameters":{}}]}`,
		`{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"}}},"reasoning":{"effort":"none"}}`,
		`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","namespace":"ns","arguments":"{}"},{"type":"reasoning","summary":[],"encrypted_content":"phasegate.v1.AAAA"}],"tools":[{"type":"namespace","name":"ns","tools":[{"type":"function","name":"f"},{"type":"custom","name":"p"}]},{"type":"web_search"}],"include":["reasoning.encrypted_content"],"prompt_cache_key":"k","text":{"verbosity":"low"}}`,
	} {
		f.Add([]byte(s), true)
	}
	sealer, err := responses.NewSealer(make([]byte, responses.KeySize))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, deepseek bool) {
		// DeepSeek, or OpenAI refusing hosted tools.
		target := responses.Target{DeepSeek: deepseek, OpenAI: !deepseek, RefuseHosted: !deepseek, Sealer: sealer}
		r, err := responses.ParseRequest(body)
		if err == nil {
			var in []responses.Item
			if in, err = responses.Resolve(r.Items(), nil); err == nil {
				var b []byte
				if b, err = responses.ChatBody(r, in, target); err == nil {
					for _, d := range r.Dropped(target) {
						if !slices.Contains(responses.DropFields, d.Field) {
							t.Fatalf("dropped field %q is not one of DropFields", d.Field)
						}
					}
					if _, perr := chat.ParseRequest(b); perr != nil {
						t.Fatalf("translation %s is refused by the chat parser: %v", b, perr)
					}
					return
				}
			}
		}
		var e *chat.Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
			t.Fatalf("err = %v, want a 400 *chat.Error", err)
		}
		if !json.Valid(e.Body()) {
			t.Fatalf("error body is not JSON: %s", e.Body())
		}
	})
}
