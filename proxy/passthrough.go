package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/protocol"
)

// servePassThrough relays any other /v1/* request to a provider with
// httputil.ReverseProxy: a JSON body naming a model is routed by it, any
// other request goes to the first provider.
func (h *Handler) servePassThrough(w http.ResponseWriter, r *http.Request) {
	r, cancel := h.bounded(r)
	defer cancel()
	// The body is read whole, whatever its Content-Type, so that one over
	// MAX_BODY_BYTES is a 413 before any of it reaches the upstream.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		writeError(w, protocol.Classify(err))
		return
	}
	provider := &h.cfg.Providers[0]
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var probe struct {
			Model string `json:"model"`
		}
		if json.Unmarshal(body, &probe) == nil && probe.Model != "" {
			provider = h.cfg.provider(probe.Model)
		}
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	target, _ := url.Parse(provider.BaseURL) // validated at start
	rest := apiPath(r.URL.Path)
	if provider.APIKey != "" {
		if e := h.passesThrough(r.Method, rest); e != nil {
			writeJSONError(w, e)
			return
		}
	}
	if err := h.admitPassThrough(r.Context(), w, r, len(body)); err != nil {
		writeError(w, protocol.Classify(err))
		return
	}
	rp := h.passThroughProxy(provider, target, rest)
	w.Header().Set("X-Phasegate-Provider", provider.Name)
	rp.ServeHTTP(&finalOnly{ResponseWriter: w, header: http.Header{}}, r)
}

// passThroughProxy is the reverse proxy that relays one pass-through
// request to provider, at target's path followed by rest: headers from
// the allowlist, the provider's credentials, and the answer passed back
// through passBack.
func (h *Handler) passThroughProxy(provider *Provider, target *url.URL, rest string) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Transport: h.client.Transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = target.Scheme
			pr.Out.URL.Host = target.Host
			pr.Out.URL.Path = strings.TrimSuffix(target.Path, "/") + rest
			pr.Out.URL.RawPath = ""
			pr.Out.Host = target.Host
			pr.Out.Header = forwardHeader(pr.In.Header, h.forward)
			// The body read above goes with its length; a client's
			// trailers would carry past forwardHeader what it keeps back.
			pr.Out.Trailer, pr.Out.TransferEncoding = nil, nil
			// The body goes on as it came, so its coding goes with it.
			if ce := pr.In.Header.Values("Content-Encoding"); len(ce) > 0 {
				pr.Out.Header["Content-Encoding"] = append([]string(nil), ce...)
			}
			upstreamAuth(pr.Out.Header, provider)
		},
		ModifyResponse: func(resp *http.Response) error {
			return passBack(resp, h.redactor, h.cfg.MaxResponseBytes)
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			h.log.Warn("pass-through failed", "request_id", r.Header.Get("X-Request-Id"), "provider", provider.Name, "error", err)
			writeError(w, protocol.Classify(upstreamCallError(r.Context(), err)))
		},
	}
}

// finalOnly is the writer httputil.ReverseProxy answers a pass-through
// on: it relays the final response only. The proxy copies the headers of
// an upstream's 1xx (103 Early Hints) into the writer's header map,
// writes the 1xx, then clears the map; on the client's writer that
// clear took the gateway's own headers (X-Request-Id) with it. Here the
// proxy writes to a map of its own, a 1xx is dropped with its headers,
// and the final headers, filtered by passBack, join the gateway's. It is
// owned by one request.
type finalOnly struct {
	http.ResponseWriter
	header http.Header
	wrote  bool
}

func (w *finalOnly) Header() http.Header {
	if w.wrote {
		return w.ResponseWriter.Header()
	}
	return w.header
}

func (w *finalOnly) WriteHeader(status int) {
	if w.wrote || status < 200 {
		return
	}
	w.wrote = true
	h := w.ResponseWriter.Header()
	for k, vs := range w.header {
		h[k] = vs
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *finalOnly) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// Flush commits the final headers, then flushes.
func (w *finalOnly) Flush() {
	w.WriteHeader(http.StatusOK)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *finalOnly) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serveModels answers GET /v1/models with the models of every provider,
// in one list: OpenAI's, or Anthropic's to an Anthropic client (see
// anthropicClient). A provider that fails to answer is named in
// X-Phasegate-Models-Missing; when every provider fails, the first error is
// the answer.
func (h *Handler) serveModels(w http.ResponseWriter, r *http.Request) {
	r, cancel := h.bounded(r)
	defer cancel()
	data, err := h.allModels(w, r)
	if err != nil {
		refuseModels(w, r, protocol.Classify(err))
		return
	}
	if anthropicClient(r) {
		writeAnthropicModels(w, data)
		return
	}
	b, err := json.Marshal(struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}{"list", data})
	if err != nil {
		writeError(w, protocol.Classify(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// allModels lists the models of every provider; the providers that
// failed to answer are named in w's X-Phasegate-Models-Missing, and when
// all did, the first one's error is returned.
func (h *Handler) allModels(w http.ResponseWriter, r *http.Request) ([]json.RawMessage, error) {
	header := forwardHeader(r.Header, h.forward)
	var data []json.RawMessage
	var missing []string
	var firstErr error
	ownKey, ownKeySent := hasClientCredentials(header), false
	for i := range h.cfg.Providers {
		p := &h.cfg.Providers[i]
		if ownKey && p.APIKey == "" && !p.Simulated {
			// A client's own key belongs to one account: it goes to the
			// first provider the gateway holds no key for, never to every
			// such provider.
			if ownKeySent {
				missing = append(missing, p.Name)
				continue
			}
			ownKeySent = true
		}
		models, err := h.listModels(r.Context(), p, header)
		if err != nil {
			h.log.Warn("list models failed", "request_id", r.Header.Get("X-Request-Id"), "provider", p.Name, "error", err)
			missing = append(missing, p.Name)
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		data = append(data, models...)
	}
	if len(missing) == len(h.cfg.Providers) {
		return nil, firstErr
	}
	if len(missing) > 0 {
		w.Header().Set("X-Phasegate-Models-Missing", strings.Join(missing, ","))
	}
	if data == nil {
		data = []json.RawMessage{}
	}
	return data, nil
}

func (h *Handler) listModels(ctx context.Context, p *Provider, header http.Header) ([]json.RawMessage, error) {
	body, err := h.getUpstream(ctx, p, header, "/models")
	if err != nil {
		return nil, err
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, &protocol.InvalidResponseError{Message: fmt.Sprintf("provider %s answered /models with invalid JSON", p.Name), Err: err}
	}
	return list.Data, nil
}

// getUpstream GETs path of provider p with header and the provider's
// credentials, and returns the body of its 200; any other answer is a
// *protocol.UpstreamError.
func (h *Handler) getUpstream(ctx context.Context, p *Provider, header http.Header, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint(p.BaseURL, path), nil)
	if err != nil {
		return nil, fmt.Errorf("build %s request: %w", path, err)
	}
	copyHeader(req.Header, header)
	upstreamAuth(req.Header, p)
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, upstreamCallError(ctx, err)
	}
	defer resp.Body.Close()
	if isRedirect(resp.StatusCode) {
		return nil, redirectError(resp.StatusCode)
	}
	body, err := readBody(ctx, resp.Body, h.cfg.MaxResponseBytes)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &protocol.UpstreamError{Status: resp.StatusCode, Header: responseHeader(resp.Header), Body: body}
	}
	return body, nil
}

// bounded applies REQUEST_TIMEOUT to a request that is not a chat
// completion: it bounds every client request, not only those.
func (h *Handler) bounded(r *http.Request) (*http.Request, context.CancelFunc) {
	d := h.cfg.Timeouts.Request
	if d <= 0 {
		return r, func() {}
	}
	ctx, cancel := context.WithTimeoutCause(r.Context(), d, ErrRequestTimeout)
	return r.WithContext(ctx), cancel
}

// passesThrough answers nil when method rest (the path below /v1) may be
// passed through with the gateway's own key, else the error to answer: a
// 405 when the path is allowed for other methods, a 404 when it is not
// allowed at all.
func (h *Handler) passesThrough(method, rest string) *chat.Error {
	pathKnown := false
	for _, rule := range h.allow {
		if rule.path != "/*" && rest != rule.path && !strings.HasPrefix(rest, rule.path+"/") {
			continue
		}
		pathKnown = true
		if rule.allows(method) {
			return nil
		}
	}
	if pathKnown {
		return &chat.Error{Status: http.StatusMethodNotAllowed, Type: chat.TypeInvalidRequest, Code: "method_not_allowed",
			Message: method + " /v1" + rest + " is not passed through by this gateway (PASSTHROUGH_ENDPOINTS names other methods for it)"}
	}
	return &chat.Error{Status: http.StatusNotFound, Type: chat.TypeInvalidRequest, Code: "unknown_url",
		Message: method + " /v1" + rest + " is not passed through by this gateway (PASSTHROUGH_ENDPOINTS)"}
}

// passRule is one entry of PASSTHROUGH_ENDPOINTS: "METHOD /path", or a
// bare "/path" for the methods that read or infer (GET, HEAD, POST). The
// path is a prefix below /v1 ("/models" holds "/models/{id}"); "*" is any
// path, and "*" as the method any method.
type passRule struct {
	// method is upper case; "" is the default methods, "*" any.
	method string
	// path is normalised, with a leading and no trailing slash; "/*"
	// matches any path.
	path string
}

// parsePassRule reads one PASSTHROUGH_ENDPOINTS entry.
func parsePassRule(s string) (passRule, error) {
	fields := strings.Fields(s)
	var rule passRule
	switch len(fields) {
	case 1:
		rule.path = fields[0]
	case 2:
		rule.method, rule.path = strings.ToUpper(fields[0]), fields[1]
		if !passMethods[rule.method] {
			return rule, fmt.Errorf("%q: unknown method %q (one of GET, HEAD, POST, PUT, PATCH, DELETE, or *)", s, fields[0])
		}
	default:
		return rule, fmt.Errorf("%q: want a path (such as /embeddings) or a method and a path (such as \"DELETE /models\")", s)
	}
	rule.path = strings.TrimSuffix(removeDotSegments("/"+strings.Trim(rule.path, "/")), "/")
	if rule.path == "" {
		return rule, fmt.Errorf("%q: no path; use * for any path", s)
	}
	return rule, nil
}

var passMethods = map[string]bool{"*": true, http.MethodGet: true, http.MethodHead: true, http.MethodPost: true,
	http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true}

// allows reports whether the rule lets method through; GET allows HEAD.
func (p passRule) allows(method string) bool {
	switch p.method {
	case "*", method:
		return true
	case "":
		return method == http.MethodGet || method == http.MethodHead || method == http.MethodPost
	case http.MethodGet:
		return method == http.MethodHead
	}
	return false
}

// passRules reads the configured entries (nil: DefaultPassThrough); each
// was checked by Validate.
func passRules(entries []string) []passRule {
	if entries == nil {
		entries = DefaultPassThrough()
	}
	rules := make([]passRule, 0, len(entries))
	for _, e := range entries {
		if rule, err := parsePassRule(e); err == nil {
			rules = append(rules, rule)
		}
	}
	return rules
}
