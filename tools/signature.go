package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// ErrMalformedArguments is wrapped by the errors of arguments that are not
// one JSON object.
var ErrMalformedArguments = errors.New("malformed arguments")

// Signature identifies a tool call up to the meaning of its arguments (seed
// 003 §3.2): two calls have equal signatures exactly when they have the
// same project, the same tool name and arguments that are the same JSON
// value. Compare signatures with ==; they can be map keys. The zero
// Signature is no signature: NewSignature never returns it.
//
// The underlying string holds the project id, the name and the canonical
// arguments, length-prefixed so no split of one into the others collides.
// It carries argument bodies, so String and LogValue print a digest
// instead.
type Signature string

// NewSignature returns the signature of a call of tool name with the given
// arguments in project projectID. Arguments are canonicalized: object keys
// sorted, whitespace dropped, escapes decoded, numbers compared by exact
// decimal value (1, 1.0, 1e0 and 10e-1 are equal, big integers keep every
// digit); a key repeated in one object keeps its last value, as JavaScript
// and Python read it. "" or whitespace-only arguments mean {}. Arguments
// that are not one JSON object, which is what a function call's arguments
// must be, return an error wrapping ErrMalformedArguments.
func NewSignature(projectID, name, arguments string) (Signature, error) {
	v, problem := parseArguments(arguments)
	if problem != "" {
		return "", fmt.Errorf("%w: %s", ErrMalformedArguments, problem)
	}
	return signatureOf(projectID, name, v), nil
}

// String returns a short digest of the signature, safe to log.
func (s Signature) String() string {
	if s == "" {
		return "none"
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// LogValue logs the digest, keeping argument bodies out of logs.
func (s Signature) LogValue() slog.Value { return slog.StringValue(s.String()) }

func signatureOf(projectID, name string, args map[string]any) Signature {
	return Signature(appendCanonical(appendCallHead(nil, projectID, name), args))
}

// appendCallHead appends what a signature and a form open with: the
// project and the tool's name, each after its length, so no two pairs
// run together.
func appendCallHead(b []byte, projectID, name string) []byte {
	b = slices.Grow(b, 64+len(projectID)+len(name))
	b = strconv.AppendInt(b, int64(len(projectID)), 10)
	b = append(b, ':')
	b = append(b, projectID...)
	b = strconv.AppendInt(b, int64(len(name)), 10)
	b = append(b, ':')
	return append(b, name...)
}

// parseArguments decodes function-call arguments. problem describes why
// they are malformed, without quoting them, or is "".
func parseArguments(arguments string) (args map[string]any, problem string) {
	if strings.TrimLeft(arguments, " \t\r\n") == "" {
		return map[string]any{}, ""
	}
	dec := json.NewDecoder(strings.NewReader(arguments))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		var syn *json.SyntaxError
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, "the JSON value is incomplete"
		case errors.As(err, &syn):
			return nil, fmt.Sprintf("invalid JSON at byte %d", syn.Offset)
		default:
			return nil, "invalid JSON"
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Sprintf("data after the JSON value at byte %d", dec.InputOffset())
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Sprintf("a JSON %s, not an object", jsonKind(v))
	}
	return obj, ""
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "array"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	default:
		return "null"
	}
}

// appendCanonical appends the canonical JSON text of a value decoded with
// UseNumber. The text is itself valid JSON and its own canonical form.
func appendCanonical(b []byte, v any) []byte { return appendTree(b, v, appendString) }

// appendTree appends a value decoded with UseNumber as canonical JSON:
// object keys sorted, numbers canonical, no insignificant white space;
// each string value is written by str.
func appendTree(b []byte, v any, str func([]byte, string) []byte) []byte {
	switch v := v.(type) {
	case map[string]any:
		b = append(b, '{')
		for i, k := range slices.Sorted(maps.Keys(v)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendTree(b, v[k], str)
		}
		return append(b, '}')
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendTree(b, e, str)
		}
		return append(b, ']')
	case string:
		return str(b, v)
	case json.Number:
		return appendNumber(b, string(v))
	case bool:
		return strconv.AppendBool(b, v)
	default: // nil: the decoder yields nothing else
		return append(b, "null"...)
	}
}

// appendString writes s as a JSON string with only the escapes JSON
// requires. The decoder hands over valid UTF-8 (it replaces invalid bytes
// with U+FFFD), so the bytes can go out raw.
func appendString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendNumber writes a JSON number as [-]digits"e"exponent, where digits
// has no leading or trailing zeros, or as 0: equal values get equal text
// whatever their spelling, and no digit is lost to float rounding. The
// exponent goes through math/big when its digits could overflow an int64.
func appendNumber(b []byte, n string) []byte {
	neg := n[0] == '-'
	if neg {
		n = n[1:]
	}
	mant, exp, _ := strings.Cut(strings.ToLower(n), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return append(b, '0')
	}
	trimmed := strings.TrimRight(digits, "0")
	// value = digits × 10^(exp − len(frac)) = trimmed × 10^(exp − len(frac) + zeros)
	shift := int64(len(digits)-len(trimmed)) - int64(len(frac))
	if neg {
		b = append(b, '-')
	}
	b = append(b, trimmed...)
	b = append(b, 'e')
	exp = strings.TrimPrefix(exp, "+")
	if len(strings.TrimLeft(strings.TrimPrefix(exp, "-"), "0")) <= 17 {
		e, _ := strconv.ParseInt(exp, 10, 64) // "" is 0; ≤17 digits cannot overflow
		return strconv.AppendInt(b, e+shift, 10)
	}
	e, _ := new(big.Int).SetString(exp, 10) // the decoder checked its grammar
	return e.Add(e, big.NewInt(shift)).Append(b, 10)
}
