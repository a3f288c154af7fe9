package responses

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/phasegate/phasegate/chat"
)

// IncludeEncryptedReasoning is the include value that asks for the
// reasoning of an answer sealed into its reasoning items, so that a
// client that keeps no state on the server (store: false) can send it
// back.
const IncludeEncryptedReasoning = "reasoning.encrypted_content"

// KeySize is the size of a Sealer's key: AES-256.
const KeySize = 32

// sealPrefix opens every encrypted_content the gateway writes. It names
// the format, so that a later one can be told apart, and is authenticated
// with the text.
const sealPrefix = "phasegate.v1."

// sealAAD binds a sealed text to its use: the reasoning of a reasoning
// item, in this format.
var sealAAD = []byte(sealPrefix + "reasoning")

// Sealer seals the reasoning an upstream wrote (DeepSeek's
// reasoning_content) into the encrypted_content of a reasoning item, and
// opens it when the client sends the item back: AES-256-GCM with a
// random nonce, so only a holder of the key can read it and any change
// to it is refused. It is safe for concurrent use.
type Sealer struct{ aead cipher.AEAD }

// NewSealer returns the sealer of key, which must be KeySize bytes.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("reasoning key: %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("reasoning key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("reasoning key: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

// ParseKey decodes a key written in base64 (standard or URL-safe, padded
// or not), as `openssl rand -base64 32` prints one.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != KeySize {
				return nil, fmt.Errorf("must be %d bytes in base64 (openssl rand -base64 %d), got %d bytes", KeySize, KeySize, len(b))
			}
			return b, nil
		}
	}
	return nil, errors.New("must be base64 (openssl rand -base64 32)")
}

// NewKey returns a random key.
func NewKey() []byte {
	k := make([]byte, KeySize)
	_, _ = rand.Read(k) // crypto/rand never fails on the supported platforms
	return k
}

// seal returns the encrypted_content of text, the contents of a JSON
// string as the upstream escaped them.
func (s *Sealer) seal(text []byte) string {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(text)+s.aead.Overhead())
	_, _ = rand.Read(nonce)
	return sealPrefix + base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, text, sealAAD))
}

// errUnsealed is why an encrypted_content could not be opened.
var errUnsealed = errors.New("not sealed by this gateway's key, or altered")

// open returns the reasoning text an encrypted_content holds.
func (s *Sealer) open(v string) (string, error) {
	body, ok := strings.CutPrefix(v, sealPrefix)
	if !ok {
		return "", errUnsealed
	}
	b, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || len(b) < s.aead.NonceSize() {
		return "", errUnsealed
	}
	n := s.aead.NonceSize()
	text, err := s.aead.Open(nil, b[:n], b[n:], sealAAD)
	if err != nil {
		return "", errUnsealed
	}
	var out string
	if err := json.Unmarshal(append(append([]byte{'"'}, text...), '"'), &out); err != nil {
		return "", errUnsealed
	}
	return out, nil
}

// invalidEncrypted is the 400 of an encrypted_content the gateway cannot
// open, with the code OpenAI answers for one it cannot verify.
func invalidEncrypted(param, id string) *chat.Error {
	item := "the reasoning item"
	if id != "" {
		item += " " + id
	}
	e := chat.InvalidRequest(param, "the encrypted content of %s could not be verified: it was not sealed with this gateway's REASONING_KEY (every replica must share one), or it was altered", item)
	e.Code = "invalid_encrypted_content"
	return e
}
