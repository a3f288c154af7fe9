package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/phasegate/phasegate/chat"
)

// ClientKey is a key a client presents to use the gateway, apart from the
// gateway's own upstream keys. Every request made with the key belongs to
// its Project, whatever X-Project-Id says; a key with no Project is a
// project of its own, "key-N" for the Nth key (so X-Project-Id can
// neither move a request into another key's project nor out of its own
// limits).
type ClientKey struct {
	Key     Secret
	Project string
}

// clientKeys checks the keys clients present. The zero value lets every
// request through, as a gateway without client keys does.
type clientKeys struct {
	// digests are the SHA-256 digests of the keys, so that every
	// comparison takes the same time whatever the presented key's length.
	digests  [][sha256.Size]byte
	projects []string
}

func newClientKeys(keys []ClientKey) clientKeys {
	var ck clientKeys
	for _, k := range keys {
		ck.digests = append(ck.digests, sha256.Sum256([]byte(k.Key.Reveal())))
		ck.projects = append(ck.projects, k.Project)
	}
	return ck
}

// match returns the index of the key token is, or -1. Every key is
// compared, in constant time, so the time taken tells nothing of which
// key, or how much of one, matched.
func (ck clientKeys) match(token string) int {
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range ck.digests {
		if subtle.ConstantTimeCompare(d[:], ck.digests[i][:]) == 1 {
			found = i
		}
	}
	return found
}

// ownProject is the project of the ith client key when it is bound to
// none.
func ownProject(i int) string { return "key-" + strconv.Itoa(i+1) }

// ownProjectForm reports whether a project name has the form ownProject
// gives, which a key may not be bound to.
func ownProjectForm(p string) bool {
	n, ok := strings.CutPrefix(p, "key-")
	_, err := strconv.Atoi(n)
	return ok && err == nil
}

// authorize lets a request through when the gateway has no client keys,
// or when its key is one of them: a bearer token, or, as Anthropic's
// clients send it, an X-Api-Key header. The key is the gateway's, not the
// upstream's: it is removed before the request goes on, and the key's
// project (see ClientKey) replaces any X-Project-Id the client sent. Any
// other request gets a 401 in its door's shape and never reaches an
// upstream. Without client keys, an X-Api-Key is the client's own
// upstream key and goes on as its bearer token. With address limits on,
// it notes the client's address.
func (h *Handler) authorize(c *gin.Context) {
	if l := h.cfg.RateLimits; l.AddressRequests+l.AddressTokens > 0 {
		c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), clientAddrKey{}, clientAddress(c.ClientIP())))
	}
	hdr := c.Request.Header
	if len(h.keys.digests) == 0 {
		if k := hdr.Get("X-Api-Key"); k != "" && hdr.Get("Authorization") == "" {
			hdr.Set("Authorization", "Bearer "+k)
		}
		hdr.Del("X-Api-Key")
		c.Next()
		return
	}
	token, ok := cutBearer(hdr.Get("Authorization"))
	if !ok && hdr.Get("Authorization") == "" {
		token = strings.TrimSpace(hdr.Get("X-Api-Key"))
		ok = token != ""
	}
	i := -1
	if ok {
		i = h.keys.match(token)
	}
	if i < 0 {
		msg := "this gateway needs an API key: send one of its client keys as \"Authorization: Bearer <key>\" or \"X-Api-Key: <key>\""
		if hdr.Get("Authorization") != "" || hdr.Get("X-Api-Key") != "" {
			msg = "the API key is not one of this gateway's client keys"
		}
		h.refuseRoute(c, &chat.Error{Status: http.StatusUnauthorized, Type: chat.TypeInvalidRequest, Code: "invalid_api_key", Message: msg})
		c.Abort()
		return
	}
	hdr.Del("Authorization")
	hdr.Del("X-Api-Key")
	c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), clientIDKey{}, hex.EncodeToString(h.keys.digests[i][:12])))
	p := h.keys.projects[i]
	if p == "" {
		p = ownProject(i)
	}
	hdr.Set("X-Project-Id", p)
	c.Next()
}

// cutBearer returns the token of a "Bearer <token>" header value; the
// scheme is case-insensitive (RFC 9110 §11.1).
func cutBearer(v string) (string, bool) {
	const scheme = "bearer "
	if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return "", false
	}
	token := strings.TrimSpace(v[len(scheme):])
	return token, token != ""
}
