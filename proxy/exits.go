package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/redact"
)

// secrets are the values of the credentials c holds: the providers' keys,
// the client keys and the admin key.
func (c *Config) secrets() []string {
	var s []string
	for _, p := range c.Providers {
		s = append(s, p.APIKey.Reveal())
	}
	for _, k := range c.ClientKeys {
		s = append(s, k.Key.Reveal())
	}
	return append(s, c.AdminAPIKey.Reveal(), c.ReasoningKey.Reveal())
}

// exitWriter is where every response of the gateway leaves it: it
// redacts the values of all response headers when they are written, and
// the whole body of a response whose status is not 2xx (an error body of
// any route, the gateway's or an upstream's relayed). Each write of such a
// body is redacted on its own, so a body is written whole (writeError,
// pass-through error bodies) or in events that each hold their text
// whole. A 2xx body passes unscanned: the in-band errors and comments of a
// stream are redacted where they are written (streamFailure,
// upstream.onComment). It is owned by one request.
type exitWriter struct {
	http.ResponseWriter
	r       *redact.Redactor
	started bool
	scan    bool
}

func (w *exitWriter) WriteHeader(status int) {
	if w.started {
		w.ResponseWriter.WriteHeader(status) // net/http logs the superfluous call
		return
	}
	if status >= 200 {
		w.started = true
		w.scan = status > 299
	}
	redactHeader(w.ResponseWriter.Header(), w.r)
	w.ResponseWriter.WriteHeader(status)
}

func (w *exitWriter) Write(b []byte) (int, error) {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	if !w.scan {
		return w.ResponseWriter.Write(b)
	}
	if _, err := w.ResponseWriter.Write(w.r.Bytes(b)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Flush commits the headers, redacted, then flushes.
func (w *exitWriter) Flush() {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *exitWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// redactHeader redacts every value of h. A list with a value to redact
// is replaced by a redacted copy, never written in place: a list may be
// shared beyond this response (gin sets Content-Type to a slice of its
// own, the same for every request).
func redactHeader(h http.Header, r *redact.Redactor) {
	for k, vs := range h {
		for i, v := range vs {
			if red := r.String(v); red != v {
				c := append([]string(nil), vs...)
				c[i] = red
				h[k], vs = c, c
			}
		}
	}
}

// redactedError returns e with its message redacted: the message of an
// upstream failure may quote the upstream.
func redactedError(e *chat.Error, r *redact.Redactor) *chat.Error {
	c := *e
	c.Message = r.String(e.Message)
	return &c
}

// passedBack lists the upstream response headers a client may need; no
// other reaches it (an upstream's cookies, its organisation and project
// ids, its Location, its load balancer's headers stay behind). Prefixes
// end in "-".
var passedBack = []string{
	"Content-Type",
	"Retry-After", "Retry-After-Ms", "X-Ratelimit-",
	"Openai-Processing-Ms", "Openai-Version",
	"X-Request-Id", // moved to X-Upstream-Request-Id
}

// responseHeader returns the headers of an upstream answer to pass on:
// those of passedBack only, and the upstream's own X-Request-Id (OpenAI
// and DeepSeek send one) moved to X-Upstream-Request-Id, so the id the
// client sees is always the gateway's, the one sent upstream and logged.
// Their values are redacted when the response is written (exitWriter).
func responseHeader(in http.Header) http.Header {
	h := allowed(in, passedBack)
	moveUpstreamRequestID(h)
	return h
}

// forwarded lists the client request headers passed upstream: the
// content negotiation, the client's identity and SDK telemetry (the
// OpenAI SDKs' X-Stainless-*), the OpenAI feature and retry headers, and
// the W3C trace context (replaced by the gateway's own when it traces).
// Credentials and billing selectors are added by upstreamAuth, and only
// for a client whose own key is passed through.
var forwarded = []string{
	"Accept", "Content-Type", "User-Agent", "X-Stainless-",
	"Openai-Beta", "Idempotency-Key", "Traceparent", "Tracestate",
	"X-Request-Id", // the gateway's id, as the client sees it
}

// neverForwarded are the headers FORWARD_HEADERS cannot name: credentials
// and billing selectors (which only upstreamAuth decides), the framing and
// routing headers the transport sets itself, and the content codings and
// ranges of the answer: with Accept-Encoding the transport no longer
// undoes the answer's compression, and a compressed or partial body
// would pass the redaction unread; and the Messages API's version and
// betas, which say what a request in Anthropic's wire means and mean
// nothing to the chat upstream its translation goes to.
var neverForwarded = []string{
	"Authorization", "Proxy-Authorization", "Cookie", "Api-Key", "X-Api-Key",
	"Openai-Organization", "Openai-Project", "Host", "Content-Length",
	"Transfer-Encoding", "Connection", "Te", "Trailer", "Upgrade", "Keep-Alive", "Proxy-Connection", "Expect",
	"Accept-Encoding", "Content-Encoding", "Range", "If-Range",
	"Anthropic-Version", "Anthropic-Beta",
}

// checkForwardable reports why name cannot be added to the forwarded
// headers, or nil.
func checkForwardable(name string) error {
	if name == "" || strings.ContainsAny(name, " \t:\r\n") {
		return fmt.Errorf("%q is not a header name", name)
	}
	c := http.CanonicalHeaderKey(name)
	prefix := strings.HasSuffix(name, "-")
	for _, never := range neverForwarded {
		if c == never || prefix && strings.HasPrefix(never, c) {
			return fmt.Errorf("%q would forward %s, which the gateway never passes on from a client", name, never)
		}
	}
	return nil
}

// clientCredentials are the headers of a client calling with its own key
// (no key of the gateway's for the provider): its key, and the
// organisation and project it bills.
var clientCredentials = []string{"Authorization", "Openai-Organization", "Openai-Project"}

// forwardHeader returns the client headers to pass upstream: those of
// forwarded, and those of clientCredentials until upstreamAuth decides.
// Hop-by-hop headers, cookies, other credentials (api-key, X-Api-Key),
// the body framing and Accept-Encoding (the transport negotiates and
// undoes compression itself, so bodies can be read and redacted) never
// pass.
func forwardHeader(in http.Header, extra []string) http.Header {
	h := allowed(in, forwarded)
	if len(extra) > 0 {
		for k, vs := range allowed(in, extra) {
			h[k] = vs
		}
	}
	for _, k := range clientCredentials {
		if vs := in.Values(k); len(vs) > 0 {
			h[k] = append([]string(nil), vs...)
		}
	}
	return h
}

// hasClientCredentials reports whether h carries a client's own
// credentials (see clientCredentials).
func hasClientCredentials(h http.Header) bool {
	for _, k := range clientCredentials {
		if len(h.Values(k)) > 0 {
			return true
		}
	}
	return false
}

// upstreamAuth sets the credentials of a request to provider p: its key,
// when the gateway holds one, in place of the client's, whose
// organisation and project then go too (the operator's account is not
// the client's to choose within); the client's own, as forwardHeader
// kept them, otherwise.
func upstreamAuth(h http.Header, p *Provider) {
	if p.APIKey == "" {
		return
	}
	for _, k := range clientCredentials {
		h.Del(k)
	}
	h.Set("Authorization", "Bearer "+p.APIKey.Reveal())
}

// allowed returns the headers of in named in list (canonical names; an
// entry ending in "-" is a prefix), those named in Connection excepted.
func allowed(in http.Header, list []string) http.Header {
	var hop map[string]bool // most requests name none
	for _, f := range in.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if hop == nil {
				hop = map[string]bool{}
			}
			hop[http.CanonicalHeaderKey(strings.TrimSpace(name))] = true
		}
	}
	out := http.Header{}
	for k, vs := range in {
		if !hop[k] && listed(list, k) {
			out[k] = append([]string(nil), vs...)
		}
	}
	return out
}

// listed reports whether header k is named in list. What follows a
// prefix must be words (see words): a name is not redacted, and an
// upstream that writes a key into one ("X-Ratelimit-Sk-…") must not get it
// past the prefix.
func listed(list []string, k string) bool {
	for _, name := range list {
		if k == name || strings.HasSuffix(name, "-") && strings.HasPrefix(k, name) && words(k[len(name):]) {
			return true
		}
	}
	return false
}

// words reports whether s is one to four words of letters and '_', each
// at most 24 long, joined by '-' ("Remaining-Tokens_usage_based"): the
// names of the headers a prefix admits, and never a key, which has
// digits or is longer.
func words(s string) bool {
	ws := strings.Split(s, "-")
	if len(ws) > 4 {
		return false
	}
	for _, w := range ws {
		if w == "" || len(w) > 24 || strings.TrimFunc(w, func(c rune) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' }) != "" {
			return false
		}
	}
	return true
}

// redirectError is an upstream's answer with a redirect status: an
// upstream error, never relayed (its Location may quote the request,
// credentials included) and never followed.
func redirectError(status int) error {
	return &chat.Error{Status: http.StatusBadGateway, Type: chat.TypeUpstream, Code: "upstream_redirect",
		Message: "the upstream answered with a redirect (" + strconv.Itoa(status) + "), which the gateway does not follow"}
}

func isRedirect(status int) bool { return status >= 300 && status <= 399 }

// passBack prepares a pass-through answer for the client: a redirect is
// an error; any other keeps only the headers of passedBack and none of
// its trailers (see noTrailers). An error body is read whole (up to max
// bytes) and redacted, so that no secret straddles two of the proxy's
// writes; so is a short JSON success (see redactShortBody). Any other
// success body is redacted as it is relayed (redact.Reader, which holds
// back a secret cut by a read until it is whole), so a stream's events
// still leave when the upstream sends them; its length is not known
// before the headers are written, so the answer goes chunked.
func passBack(resp *http.Response, r *redact.Redactor, max int64) error {
	if isRedirect(resp.StatusCode) {
		resp.Body.Close()
		return redirectError(resp.StatusCode)
	}
	resp.Header = responseHeader(resp.Header)
	resp.Trailer = nil
	resp.Body = noTrailers{ReadCloser: resp.Body, resp: resp}
	if resp.StatusCode < 300 {
		if bodiless(resp) {
			if resp.ContentLength >= 0 {
				resp.Header.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
			}
			return nil
		}
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			return redactShortBody(resp, r)
		}
		redactStream(resp, r, resp.Body)
		return nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, max))
	if err != nil {
		return fmt.Errorf("read the upstream's error body: %w", err)
	}
	b = r.Bytes(b)
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
	return nil
}

// bodiless reports whether resp, a success, has no body to relay: the
// answer to a HEAD, a 204 or a 304. Its Content-Length is the length of
// the body a GET would have had.
func bodiless(resp *http.Response) bool {
	return resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified ||
		resp.Request != nil && resp.Request.Method == http.MethodHead
}

// redactStream makes resp's body body, redacted as it is read, and closes
// resp's own body when it is closed; without a Content-Length, the answer
// goes chunked.
func redactStream(resp *http.Response, r *redact.Redactor, body io.Reader) {
	resp.Body = struct {
		io.Reader
		io.Closer
	}{redact.NewReader(r, body), resp.Body}
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
}

// canonicalKeys returns names in the canonical form http.Header keys take.
func canonicalKeys(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, http.CanonicalHeaderKey(n))
	}
	return out
}

// shortBody is the most of a 2xx JSON pass-through body read whole and
// redacted, and sent with its length: an error object some upstreams send
// with a 200 is far shorter, an embedding is longer and is redacted as it
// is relayed.
const shortBody = 64 << 10

// redactShortBody redacts the body of resp, a 2xx JSON answer, when it
// is at most shortBody long; a longer one is redacted as it is relayed
// (redactStream), its first bytes put back in front of the rest.
func redactShortBody(resp *http.Response, r *redact.Redactor) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, shortBody+1))
	if err != nil {
		resp.Body.Close()
		return fmt.Errorf("read the upstream's answer: %w", err)
	}
	if len(b) > shortBody {
		redactStream(resp, r, io.MultiReader(bytes.NewReader(b), resp.Body))
		return nil
	}
	resp.Body.Close()
	b = r.Bytes(b)
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
	return nil
}

// noTrailers is the body of a pass-through answer whose trailers stay
// behind: the transport fills resp.Trailer in when it reads the end of
// the body, announced or not, and httputil.ReverseProxy relays what it
// finds there as it came, unredacted. No trailer is in passedBack, so
// each is dropped as the end is read.
type noTrailers struct {
	io.ReadCloser
	resp *http.Response
}

func (b noTrailers) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.resp.Trailer = nil
	}
	return n, err
}
