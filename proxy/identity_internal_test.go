package proxy

import (
	"testing"
	"time"
)

// The first chunk decides the identity; later chunks get its three values
// and keep every other byte; a first chunk written by the guard gets a
// real created time.
func TestIdentityRewrite(t *testing.T) {
	at := func() time.Time { return time.Unix(1767225600, 0) }
	cases := []struct {
		name string
		in   []string
		want []string
	}{
		{
			name: "one answer stays as it came",
			in:   []string{`{"id":"a","object":"chat.completion.chunk","created":7,"model":"m-1","choices":[]}`, `{"id" : "a", "created": 7,"model":"m-1"}`},
			want: []string{`{"id":"a","object":"chat.completion.chunk","created":7,"model":"m-1","choices":[]}`, `{"id" : "a", "created": 7,"model":"m-1"}`},
		},
		{
			name: "a second answer takes the first's",
			in:   []string{`{"id":"a","created":7,"model":"m-1"}`, `{"id": "b", "created" :9,"model":"m-2","choices":[{"delta":{"content":"\"id\":\"x\""}}],"x":{"id":"keep"}}`},
			want: []string{`{"id":"a","created":7,"model":"m-1"}`, `{"id": "a", "created" :7,"model":"m-1","choices":[{"delta":{"content":"\"id\":\"x\""}}],"x":{"id":"keep"}}`},
		},
		{
			name: "the guard first",
			in:   []string{`{"id":"chatcmpl-g","created":0,"model":"asked"}`, `{"id":"up","created":9,"model":"served"}`},
			want: []string{`{"id":"chatcmpl-g","created":1767225600,"model":"asked"}`, `{"id":"chatcmpl-g","created":1767225600,"model":"asked"}`},
		},
		{
			name: "a head that goes on",
			in:   []string{`{"id":"a","model":"m","created":7}`, `{"id":"a","model":"m","created":7}`, `{"id":"a","model":"m","created":70}`},
			want: []string{`{"id":"a","model":"m","created":7}`, `{"id":"a","model":"m","created":7}`, `{"id":"a","model":"m","created":7}`},
		},
		{
			name: "escaped names and missing fields",
			in:   []string{`{"\u0069d":"a","created":7,"model":"m"}`, `{"id":"b","choices":[]}`, `not json`, `{"id":"c"`},
			want: []string{`{"\u0069d":"a","created":7,"model":"m"}`, `{"id":"a","choices":[]}`, `not json`, `{"id":"c"`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := newIdentity("asked")
			id.now = at
			for k, in := range tc.in {
				if got := string(id.appendChunk(nil, []byte(in), nil)); got != tc.want[k] {
					t.Errorf("chunk %d:\n got %s\nwant %s", k, got, tc.want[k])
				}
			}
		})
	}
}

// BenchmarkIdentityRewrite is what the identity costs a chunk: one that
// carries it already (every chunk of an unguarded answer) and one of a
// later answer that is rewritten, both told by the head they share with
// the chunk before; and the first chunk of an answer, which is scanned.
func BenchmarkIdentityRewrite(b *testing.B) {
	first := []byte(`{"id":"chatcmpl-AAAAAAAAAAAAAAAAAAAAAAAAAA","object":"chat.completion.chunk","created":1767225600,"model":"deepseek-chat","system_fingerprint":"fp_x","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`)
	same := []byte(`{"id":"chatcmpl-AAAAAAAAAAAAAAAAAAAAAAAAAA","object":"chat.completion.chunk","created":1767225600,"model":"deepseek-chat","system_fingerprint":"fp_x","choices":[{"index":0,"delta":{"content":" the next few words of the answer"},"logprobs":null,"finish_reason":null}]}`)
	other := []byte(`{"id":"chatcmpl-BBBBBBBBBBBBBBBBBBBBBBBBBB","object":"chat.completion.chunk","created":1767225611,"model":"deepseek-chat","system_fingerprint":"fp_x","choices":[{"index":0,"delta":{"content":" the next few words of the answer"},"logprobs":null,"finish_reason":null}]}`)
	ext := []byte(`{"phase":"action_phase","request_id":"r","phase_index":0,"cycle_index":0}`)
	for _, bc := range []struct {
		name string
		data []byte
		scan bool
	}{{"kept", same, false}, {"rewritten", other, false}, {"scanned", other, true}} {
		b.Run(bc.name, func(b *testing.B) {
			id := newIdentity("deepseek-chat")
			dst := id.appendChunk(nil, first, ext)
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.data)))
			for b.Loop() {
				if bc.scan {
					id.head.Forget() // the first chunk of an answer: its head is new
				}
				dst = id.appendChunk(dst[:0], bc.data, ext)
			}
		})
	}
}
