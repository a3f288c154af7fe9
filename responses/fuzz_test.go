package responses_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/responses"
)

// Any request body translates to a 400 in OpenAI's shape or to a chat
// request the pipeline accepts; nothing panics.
func FuzzChatBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"hi"}`,
		`{"model":"m","input":[{"role":"developer","content":"x"},{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"data:,"}]}]}`,
		`{"model":"m","input":[{"type":"reasoning","id":"r","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"t"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"o"}]}]}`,
		`{"model":"m","input":[{"type":"item_reference","id":"msg_1"}],"tool_choice":{"type":"function","name":"f"},"tools":[{"type":"function","name":"f","parameters":{}}]}`,
		`{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"}}},"reasoning":{"effort":"none"}}`,
	} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, deepseek bool) {
		r, err := responses.ParseRequest(body)
		if err == nil {
			var in []responses.Item
			if in, err = responses.Resolve(r.Items(), nil); err == nil {
				var b []byte
				if b, err = responses.ChatBody(r, in, responses.Target{DeepSeek: deepseek}); err == nil {
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
