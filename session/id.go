// Package session is what the gateway knows of an agent's run across
// requests: which session a request belongs to (the name its client gives
// it), the budgets the session may spend (tool calls, tokens, US dollars),
// its counters, and whether the next request must be the session's forced
// final answer. It is pure: the counters live in a store (package store),
// the proxy wires it to requests.
package session

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/phasegate/phasegate/chat"
)

// Source is where a request names its session, as SESSION_FROM spells it.
type Source string

// The sources of a session id: two headers, always read, and the fields
// of a request body an operator may opt in to (SESSION_FROM).
const (
	// SourceHeader is the gateway's own header, X-Session-Id.
	SourceHeader Source = "x-session-id"
	// SourceClaudeCode is the header Claude Code sends with every request.
	SourceClaudeCode Source = "x-claude-code-session-id"
	// SourceClientMetadata is client_metadata.session_id of a body, as
	// Codex sends it on the Responses API.
	SourceClientMetadata Source = "client_metadata.session_id"
	// SourcePromptCacheKey is prompt_cache_key, which Codex sets to its
	// conversation id.
	SourcePromptCacheKey Source = "prompt_cache_key"
	// SourceMetadataUserID is metadata.user_id, which Claude Code sends on
	// the Messages API, its session id within it.
	SourceMetadataUserID Source = "metadata.user_id"
	// SourceUser is the OpenAI user field.
	SourceUser Source = "user"
	// SourceSafetyIdentifier is the OpenAI safety_identifier field.
	SourceSafetyIdentifier Source = "safety_identifier"
)

// Headers of the header sources.
const (
	Header           = "X-Session-Id"
	ClaudeCodeHeader = "X-Claude-Code-Session-Id"
)

// BodySources are the sources SESSION_FROM may name.
var BodySources = []Source{SourceClientMetadata, SourcePromptCacheKey, SourceMetadataUserID, SourceUser, SourceSafetyIdentifier}

// MaxIDLen bounds a session id, in bytes. Claude Code's metadata.user_id
// is about 160.
const MaxIDLen = 256

// Fields reads a top-level field of a request body: its raw JSON, and
// whether the body has it.
type Fields func(name string) (json.RawMessage, bool)

// Identify returns the session a request names: X-Session-Id, else
// X-Claude-Code-Session-Id, else the first of the body fields from names
// (fields may be nil when from is empty). It returns "" when the request
// names none. An id the gateway cannot keep (empty, longer than MaxIDLen,
// or with a byte other than a letter, a digit or one of "-._:@+=") is a
// 400 whose param names where it came from. A body field that is not a
// string names no session.
func Identify(hdr http.Header, fields Fields, from []Source) (string, Source, error) {
	for _, h := range []struct {
		name string
		src  Source
	}{{Header, SourceHeader}, {ClaudeCodeHeader, SourceClaudeCode}} {
		if vs, ok := hdr[h.name]; ok && len(vs) > 0 {
			return checked(vs[0], h.src, h.name)
		}
	}
	for _, src := range from {
		if fields == nil {
			break
		}
		if id, ok := field(fields, src); ok {
			return checked(id, src, string(src))
		}
	}
	return "", "", nil
}

// field reads the string at src's path (one or two keys deep).
func field(fields Fields, src Source) (string, bool) {
	top, sub, nested := strings.Cut(string(src), ".")
	raw, ok := fields(top)
	if !ok {
		return "", false
	}
	if nested {
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return "", false
		}
		if raw, ok = obj[sub]; !ok {
			return "", false
		}
	}
	var s string
	if raw = bytes.TrimSpace(raw); len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false // null, a number, an object: no name
	}
	return s, true
}

// checked returns id when the gateway can keep it, else a 400 naming
// param.
func checked(id string, src Source, param string) (string, Source, error) {
	if !ValidID(id) {
		return "", "", chat.InvalidRequest(param, "%s must be a session id of 1 to %d letters, digits and -._:@+= (got %d bytes)", param, MaxIDLen, len(id))
	}
	return id, src, nil
}

// ValidID reports whether id can name a session: 1 to MaxIDLen bytes,
// each a letter, a digit or one of "-._:@+=".
func ValidID(id string) bool {
	if id == "" || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._:@+=", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// ParseSource reads one item of SESSION_FROM.
func ParseSource(s string) (Source, bool) {
	for _, src := range BodySources {
		if string(src) == s {
			return src, true
		}
	}
	return "", false
}
