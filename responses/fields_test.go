package responses_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/responses"
)

// The fields OpenAI's chat API shares are passed on to OpenAI and dropped
// and named for any other upstream; those no chat API has are dropped
// and named for every upstream; include values other than the encrypted
// reasoning are named, and the encrypted reasoning too where the gateway
// cannot seal it.
func TestDroppedFields(t *testing.T) {
	const body = `{"model":"m","input":"hi","store":false,"parallel_tool_calls":true,"prompt_cache_key":"k1","safety_identifier":"u1",
	"service_tier":"flex","client_metadata":{"a":"b"},"truncation":"auto","text":{"verbosity":"low"},
	"include":["reasoning.encrypted_content","message.output_text.logprobs","x y"]}`
	r, err := responses.ParseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	sealer := newSealer(t, responses.NewKey())
	for _, tc := range []struct {
		name   string
		target responses.Target
		want   []chat.Drop
		passed map[string]any
	}{
		{"deepseek", responses.Target{DeepSeek: true, Sealer: sealer}, []chat.Drop{
			{Param: "prompt_cache_key", Field: "prompt_cache_key"}, {Param: "safety_identifier", Field: "safety_identifier"}, {Param: "service_tier", Field: "service_tier"},
			{Param: "text.verbosity", Field: "text.verbosity"}, {Param: "client_metadata", Field: "client_metadata"}, {Param: "truncation", Field: "truncation"},
			{Param: "include[1]=message.output_text.logprobs", Field: "include"}, {Param: "include[2]=other", Field: "include"},
		}, map[string]any{}},
		{"openai", responses.Target{OpenAI: true, Sealer: sealer}, []chat.Drop{
			{Param: "client_metadata", Field: "client_metadata"}, {Param: "truncation", Field: "truncation"},
			{Param: "include[1]=message.output_text.logprobs", Field: "include"}, {Param: "include[2]=other", Field: "include"},
		}, map[string]any{"prompt_cache_key": "k1", "safety_identifier": "u1", "service_tier": "flex", "verbosity": "low"}},
		{"no sealer", responses.Target{OpenAI: true}, []chat.Drop{
			{Param: "client_metadata", Field: "client_metadata"}, {Param: "truncation", Field: "truncation"}, {Param: "include[0]=reasoning.encrypted_content", Field: "include"},
			{Param: "include[1]=message.output_text.logprobs", Field: "include"}, {Param: "include[2]=other", Field: "include"},
		}, map[string]any{"prompt_cache_key": "k1", "safety_identifier": "u1", "service_tier": "flex", "verbosity": "low"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, r.Dropped(tc.target)); d != "" {
				t.Errorf("dropped (-want +got):\n%s", d)
			}
			got, err := translate(t, body, tc.target)
			if err != nil {
				t.Fatal(err)
			}
			passed := map[string]any{}
			for _, k := range []string{"prompt_cache_key", "safety_identifier", "service_tier", "verbosity", "client_metadata", "truncation", "include", "store", "text"} {
				if v, ok := got[k]; ok {
					passed[k] = v
				}
			}
			if d := cmp.Diff(tc.passed, passed); d != "" {
				t.Errorf("fields sent upstream (-want +got):\n%s", d)
			}
			for _, d := range tc.want {
				if !slices.Contains(responses.DropFields, d.Field) {
					t.Errorf("field %q is not one of DropFields", d.Field)
				}
			}
		})
	}
}
