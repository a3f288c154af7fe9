package responses

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/phasegate/phasegate/internal/chunkscan"
)

// FromCompletion fills r, and ends it, from the body of one
// chat.completion: reasoning, then text, then function calls, as a
// stream would have made them.
func FromCompletion(r *Response, body []byte) error {
	c, err := chunkscan.DecodeCompletion(body)
	if err != nil {
		return fmt.Errorf("decode chat completion: %w", err)
	}
	finish := ""
	if len(c.Finish) > 0 && !isNull(c.Finish) {
		if err := json.Unmarshal(c.Finish, &finish); err != nil {
			return fmt.Errorf("decode chat completion: %w", err)
		}
	}
	if t := inner(c.Reasoning); t != nil {
		it := &outItem{typ: TypeReasoning, id: NewID("rs_"), text: bytes.Clone(t)}
		r.seal(it)
		r.add(it)
	}
	if t := inner(c.Content); t != nil || (len(c.Calls) == 0 && string(c.Content) == `""`) {
		r.add(&outItem{typ: TypeMessage, id: NewID("msg_"), text: bytes.Clone(t)})
	}
	for _, tc := range c.Calls {
		it := r.call(quoted(tc.ID), quoted(tc.Name))
		it.args = bytes.Clone(inner(tc.Arguments))
		r.add(it)
	}
	r.setUsage(c.Usage, c.Estimated)
	r.end(finish)
	return nil
}
