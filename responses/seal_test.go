package responses_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/responses"
)

func newSealer(t testing.TB, key []byte) *responses.Sealer {
	t.Helper()
	s, err := responses.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sealedItem answers a request that includes the encrypted reasoning
// with reasoning (as DeepSeek writes it, escapes and all) and returns its
// reasoning item, as the client gets it back.
func sealedItem(t *testing.T, s *responses.Sealer, reasoning string) responses.Item {
	t.Helper()
	r, err := responses.ParseRequest([]byte(`{"model":"m","input":"hi","store":false,"include":["reasoning.encrypted_content"]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp := responses.NewResponse(r)
	resp.SealWith(s)
	raw, _ := json.Marshal(reasoning)
	body := `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok","reasoning_content":` + string(raw) + `},"finish_reason":"stop"}]}`
	if err := responses.FromCompletion(resp, []byte(body)); err != nil {
		t.Fatal(err)
	}
	out := resp.Output()
	if len(out) != 2 || out[0].Type != responses.TypeReasoning || out[0].EncryptedContent == nil {
		t.Fatalf("output = %+v, want a reasoning item with encrypted_content", out)
	}
	if strings.Contains(*out[0].EncryptedContent, reasoning) {
		t.Fatalf("encrypted_content %q shows the reasoning", *out[0].EncryptedContent)
	}
	return out[0]
}

// sendBack translates a next turn that sends item back before an
// assistant message, as a stateless client does, with content in place
// of the reasoning text it was given.
func sendBack(t *testing.T, s *responses.Sealer, item responses.Item, content string) (map[string]any, error) {
	t.Helper()
	item.Content = json.RawMessage(content)
	ib, _ := json.Marshal(item)
	body := `{"model":"m","store":false,"include":["reasoning.encrypted_content"],"input":[{"role":"user","content":"hi"},` + string(ib) +
		`,{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]},{"role":"user","content":"and?"}]}`
	return translate(t, body, responses.Target{DeepSeek: true, Sealer: s})
}

// The reasoning sealed into an item comes back, byte for byte, as the
// reasoning_content of the assistant message the item precedes, on any
// gateway that holds the key, whatever content the item carries beside
// it.
func TestSealRoundTrip(t *testing.T) {
	key := responses.NewKey()
	const reasoning = "think \"twice\"\n\u00e9t\u00e9 <tag> \\ done"
	item := sealedItem(t, newSealer(t, key), reasoning)
	for _, content := range []string{`null`, `[{"type":"reasoning_text","text":"something else"}]`} {
		got, err := sendBack(t, newSealer(t, bytes.Clone(key)), item, content)
		if err != nil {
			t.Fatal(err)
		}
		msgs := got["messages"].([]any)
		a := msgs[1].(map[string]any)
		if a["role"] != "assistant" || a["reasoning_content"] != reasoning || a["content"] != "ok" {
			t.Errorf("content %s: assistant message = %v, want reasoning_content %q", content, a, reasoning)
		}
	}
	again := sealedItem(t, newSealer(t, key), reasoning)
	if *again.EncryptedContent == *item.EncryptedContent {
		t.Error("two seals of the same text are equal: the nonce is not random")
	}
}

// An item sealed under another key, altered, cut, or of another format is
// a 400 invalid_encrypted_content naming it, as OpenAI answers one it
// cannot verify.
func TestSealRefusesForeign(t *testing.T) {
	s := newSealer(t, responses.NewKey())
	item := sealedItem(t, s, "secret thoughts")
	good := *item.EncryptedContent
	flip := []byte(good)
	flip[len(flip)-5] ^= 'A' ^ 'B'
	for name, v := range map[string]string{
		"another key": *sealedItem(t, newSealer(t, responses.NewKey()), "secret thoughts").EncryptedContent,
		"altered":     string(flip),
		"cut":         good[:len(good)-4],
		"no prefix":   strings.TrimPrefix(good, "phasegate.v1."),
		"openai's":    "gAAAAABo" + base64.StdEncoding.EncodeToString([]byte("opaque")),
	} {
		t.Run(name, func(t *testing.T) {
			it := item
			it.EncryptedContent = &v
			_, err := sendBack(t, s, it, `null`)
			var e *chat.Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != "invalid_encrypted_content" || e.Param != "input[1].encrypted_content" {
				t.Fatalf("err = %v, want a 400 invalid_encrypted_content on input[1].encrypted_content", err)
			}
			if !strings.Contains(e.Message, item.ID) {
				t.Errorf("message %q does not name the item %s", e.Message, item.ID)
			}
		})
	}
}

// A request that does not include the encrypted reasoning gets none.
func TestSealOnlyWhenIncluded(t *testing.T) {
	r, _ := responses.ParseRequest([]byte(`{"model":"m","input":"hi"}`))
	resp := responses.NewResponse(r)
	resp.SealWith(newSealer(t, responses.NewKey()))
	if err := responses.FromCompletion(resp, []byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"ok","reasoning_content":"r"},"finish_reason":"stop"}]}`)); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(resp.JSON(), []byte("encrypted_content")) {
		t.Errorf("response = %s", resp.JSON())
	}
}

func TestParseKey(t *testing.T) {
	key := responses.NewKey()
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		got, err := responses.ParseKey(" " + enc.EncodeToString(key) + "\n")
		if err != nil || !bytes.Equal(got, key) {
			t.Errorf("%v: %x, %v", enc, got, err)
		}
	}
	for _, bad := range []string{"", "not base64!", base64.StdEncoding.EncodeToString(key[:16])} {
		if _, err := responses.ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) = nil error", bad)
		}
	}
	if _, err := responses.NewSealer(key[:16]); err == nil {
		t.Error("NewSealer took a 16-byte key")
	}
}
