package responses

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
)

// The scanner reads what encoding/json reads, or leaves the chunk to it:
// for any data, scanChunk and decodeChunk agree.
func FuzzScanChunk(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi \"x\" \u00e9"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":"r","tool_calls":[{"index":1,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"phasegate":{"usage_estimated":true,"phase":"x"}}`,
		`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"prompt_tokens_details":{"cached_tokens":1}}}`,
		`{"error":{"message":"m","type":"t","param":null,"code":"c"}}`,
		`{"choices":[{"delta":{"content":null}},{"delta":{"content":"second"}}], "x":[1,2.5e3,true,false,null,{}]}`,
		`{"choices":[{"delta":{"cont\u0065nt":"escaped key"}}]}`,
		// Keys encoding/json matches to a known one by case folding.
		`{"choiceſ":[{"delta":{"content":"long s"}}],"USAGE":{"prompt_tokens":1},"Choices":[]}`,
		// Deeper than encoding/json reads, in a field the scan skips.
		`{"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `,"choices":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, werr := decodeChunk(data)
		got, gerr := scanChunk(data, nil)
		if werr != nil {
			// A value of another type where the translation does not look
			// (a second choice, a field it skips) may pass the scanner;
			// malformed JSON never does.
			if gerr == nil && !json.Valid(data) {
				t.Fatalf("scan accepted malformed JSON (decode: %v)", werr)
			}
			return
		}
		if gerr != nil {
			t.Fatalf("scan err %v on what decode reads", gerr)
		}
		opt := cmp.Comparer(func(a, b []byte) bool { return bytes.Equal(a, b) })
		if d := cmp.Diff(want, got, cmp.AllowUnexported(chunkFields{}, callDelta{}), opt); d != "" {
			t.Fatalf("scan differs from decode (-decode +scan):\n%s", d)
		}
	})
}

// A chunk read with the head another chunk taught reads as encoding/json
// reads it, whatever the two chunks are.
func FuzzScanChunkHead(f *testing.F) {
	a := `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}`
	for _, b := range []string{
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"there"},"finish_reason":null}]}`,
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1}}`,
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"phasegate":{"usage_estimated":true}}`,
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":{}}`,
		`{"id":"d","choices":[]}`,
	} {
		f.Add([]byte(a), []byte(b))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var head []byte
		_, _ = scanChunk(a, &head)
		want, werr := decodeChunk(b)
		got, gerr := scanChunk(b, &head)
		if werr != nil {
			if gerr == nil && !json.Valid(b) {
				t.Fatalf("scan accepted malformed JSON (decode: %v)", werr)
			}
			return
		}
		if gerr != nil {
			t.Fatalf("scan err %v on what decode reads", gerr)
		}
		opt := cmp.Comparer(func(a, b []byte) bool { return bytes.Equal(a, b) })
		if d := cmp.Diff(want, got, cmp.AllowUnexported(chunkFields{}, callDelta{}), opt); d != "" {
			t.Fatalf("scan differs from decode (-decode +scan):\n%s", d)
		}
	})
}

// A chunk and the gateway's extension read as the chunk with the
// extension added as its last phasegate member reads: what the chat route
// writes and the Responses door translates are the same chunk.
func FuzzScanChunkExtension(f *testing.F) {
	for _, tc := range [][2]string{
		{`{"choices":[],"usage":{"prompt_tokens":1}}`, `{"phase":"complete","usage_estimated":true}`},
		{`{"choices":[],"usage":{"prompt_tokens":1},"phasegate":{"usage_estimated":true}}`, `{"phase":"complete"}`},
		{`{"choices":[],"phasegate":{"usage_estimated":true}}`, `{"usage_estimated":null}`},
		{`{"choices":[{"delta":{"content":"x"}}]}`, `{"usage_est\u0069mated":true}`},
		{`{"choices":[]}`, `{"usage_estimated":1}`},
	} {
		f.Add([]byte(tc[0]), []byte(tc[1]))
	}
	f.Fuzz(func(t *testing.T, data, ext []byte) {
		var probe map[string]json.RawMessage
		if json.Unmarshal(ext, &probe) != nil {
			return // the guard's extension is always an object
		}
		want, werr := decodeChunk(chat.WithExtension(data, "phasegate", ext))
		got, gerr := scanChunk(data, nil)
		if gerr == nil {
			got.estimated, gerr = extensionEstimated(ext, got.estimated)
		}
		if werr != nil || gerr != nil {
			return // FuzzScanChunk holds the two to the same errors
		}
		if want.estimated != got.estimated {
			t.Fatalf("estimated = %v, want %v as read from the chunk with its extension", got.estimated, want.estimated)
		}
	})
}
