package proxy

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/phasegate/phasegate/responses"
)

// TestAppendRecordDecodesAsMarshal checks the record a response is stored
// as against encoding/json's rendering of the same record: both decode to
// the same value, the response object included, for text that
// json.Marshal escapes (HTML characters, a quote, a line separator) and
// with and without indexed items. The record must also decode back into
// a record whose response is the response's own rendering.
func TestAppendRecordDecodesAsMarshal(t *testing.T) {
	req, err := responses.ParseRequest([]byte(`{"model":"m","input":"Say <b>&amp;</b>","instructions":"be \"brief\"",` +
		`"tools":[{"type":"function","name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp := responses.NewResponse(req)
	completion := `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant",` +
		`"content":"a <tag> & \"quote\" \u2028 line","tool_calls":[{"id":"call_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"<a&b>.go\"}"}}]},` +
		`"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}`
	if err := responses.FromCompletion(resp, []byte(completion)); err != nil {
		t.Fatal(err)
	}
	input := []responses.Item{{Type: "message", ID: "msg_in", Role: "user", Content: json.RawMessage(`"Say <b>&amp;</b>"`)}}
	for _, indexed := range [][]responses.Item{nil, input, append(input, responses.Item{Type: "function_call_output", ID: "fc_x"})} {
		var items []string
		for _, it := range indexed {
			items = append(items, it.ID)
		}
		got, err := appendRecord([]byte("kept"), resp, input, indexed)
		if err != nil {
			t.Fatal(err)
		}
		if string(got[:4]) != "kept" {
			t.Fatalf("appendRecord did not append to dst: %q", got[:4])
		}
		got = got[4:]
		want, err := json.Marshal(record{Response: resp.JSON(), Input: input, Items: items})
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("record is not JSON: %v\n%s", err, got)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("items %q: record decodes otherwise than json.Marshal's\n got %s\nwant %s", items, got, want)
		}
		var rec record
		if err := json.Unmarshal(got, &rec); err != nil {
			t.Fatal(err)
		}
		if string(rec.Response) != string(resp.JSON()) || !reflect.DeepEqual(rec.Items, items) || len(rec.Input) != 1 {
			t.Fatalf("record decodes to response %s, items %q, %d input items", rec.Response, rec.Items, len(rec.Input))
		}
	}
}
