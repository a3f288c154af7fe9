package proxy

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/protocol"
)

// errEncodedSeparator refuses a path with an encoded slash or backslash:
// an upstream (or a proxy in front of it) may decode it into a separator
// the gateway never saw, so no normal form of it can be trusted.
var errEncodedSeparator = &chat.Error{Status: http.StatusBadRequest, Type: chat.TypeInvalidRequest, Code: "invalid_path",
	Message: "the request path holds an encoded slash (%2F) or a backslash, which this gateway does not accept"}

// errContentLength refuses a body whose declared length is over
// MAX_BODY_BYTES before a byte of it is read.
func errContentLength(limit int64) *chat.Error {
	return &chat.Error{Status: http.StatusRequestEntityTooLarge, Type: chat.TypeInvalidRequest, Code: "request_too_large",
		Message: "request body is larger than the gateway accepts (" + protocol.FormatBytes(limit) + ")"}
}

// admitted is what every request passes before it is routed: its body is
// bounded by limit whatever its Content-Type (a declared length over it is
// a 413 at once, in the shape of the door whose path it names in doors),
// and its path is normalised (see normalPath). It returns the request to
// route, or nil when it answered w itself.
func admitted(w http.ResponseWriter, r *http.Request, limit int64, doors map[string]*door) *http.Request {
	p, ok := normalPath(r.URL)
	if !ok {
		writeJSONError(w, errEncodedSeparator)
		return nil
	}
	if r.ContentLength > limit {
		if d := doors[p]; d != nil {
			d.refuse(w, protocol.Failure{Error: errContentLength(limit)})
		} else {
			writeJSONError(w, errContentLength(limit))
		}
		return nil
	}
	out := new(http.Request)
	*out = *r
	u := *r.URL
	u.Path, u.RawPath = p, ""
	out.URL = &u
	if r.Body != nil && r.Body != http.NoBody {
		out.Body = http.MaxBytesReader(w, r.Body, limit)
	}
	return out
}

// normalPath is the path of u with its dot segments removed (RFC 3986
// §5.2.4, after decoding: %2e is a dot, §6.2.2.2) and runs of slashes
// made one, so that routes, the pass-through allowlist and the rate limits
// judge the path the upstream will act on, and the upstream is sent that
// path. A path with an encoded slash or a backslash is refused (false).
func normalPath(u *url.URL) (string, bool) {
	if raw := u.EscapedPath(); strings.IndexByte(raw, '%') >= 0 {
		raw = strings.ToLower(raw)
		if strings.Contains(raw, "%2f") || strings.Contains(raw, "%5c") {
			return "", false
		}
	}
	if strings.IndexByte(u.Path, '\\') >= 0 {
		return "", false
	}
	if normal(u.Path) {
		return u.Path, true // most paths: nothing to remove, nothing to build
	}
	return removeDotSegments(u.Path), true
}

// normal reports whether removeDotSegments would return p as it is: an
// absolute path with no empty, "." or ".." segment but a last empty one.
func normal(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); {
		j := strings.IndexByte(p[i+1:], '/')
		seg := p[i+1:]
		if j >= 0 {
			seg = p[i+1 : i+1+j]
		}
		switch {
		case seg == "." || seg == "..":
			return false
		case seg == "" && j >= 0: // an empty segment before another
			return false
		case seg == "" && p == "/":
			return true
		}
		if j < 0 {
			return true
		}
		i += 1 + j
	}
	return true
}

// removeDotSegments resolves "." and ".." segments of an absolute path as
// RFC 3986 §5.2.4 does (a ".." above the root is dropped), collapsing
// empty segments on the way; a trailing slash, or a final dot segment,
// leaves the result ending in "/".
func removeDotSegments(p string) string {
	if p == "" {
		return "/"
	}
	segs := strings.Split(p, "/")
	out := make([]string, 0, len(segs))
	trailing := false
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case "", ".":
			trailing = last && i > 0
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			trailing = last
		default:
			out = append(out, s)
			trailing = false
		}
	}
	res := "/" + strings.Join(out, "/")
	if trailing && res != "/" {
		res += "/"
	}
	return res
}
