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

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/protocol/chat"
)

// servePassThrough relays any other /v1/* request to a provider with
// httputil.ReverseProxy: a JSON body naming a model is routed by it, any
// other request goes to the first provider.
func (h *Handler) servePassThrough(w http.ResponseWriter, r *http.Request) {
	r, cancel := h.bounded(r)
	defer cancel()
	provider := &h.cfg.Providers[0]
	if r.Body != nil && strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
		if err != nil {
			writeError(w, protocol.Classify(err))
			return
		}
		var probe struct {
			Model string `json:"model"`
		}
		if json.Unmarshal(body, &probe) == nil && probe.Model != "" {
			provider = h.cfg.provider(probe.Model)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
	}
	target, _ := url.Parse(provider.BaseURL) // validated at start
	rest := apiPath(r.URL.Path)
	if provider.APIKey != "" && !h.passesThrough(rest) {
		writeJSONError(w, &chat.Error{Status: http.StatusNotFound, Type: chat.TypeInvalidRequest, Code: "unknown_url",
			Message: r.Method + " " + r.URL.Path + " is not passed through by this gateway (PASSTHROUGH_ENDPOINTS)"})
		return
	}
	rp := &httputil.ReverseProxy{
		Transport: h.client.Transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = target.Scheme
			pr.Out.URL.Host = target.Host
			pr.Out.URL.Path = strings.TrimSuffix(target.Path, "/") + rest
			pr.Out.URL.RawPath = ""
			pr.Out.Host = target.Host
			pr.Out.Header = forwardHeader(pr.In.Header)
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
	w.Header().Set("X-Phasegate-Provider", provider.Name)
	rp.ServeHTTP(w, r)
}

// serveModels merges the model lists of every provider. A provider that
// fails is left out and named in X-Phasegate-Models-Missing; when every
// provider fails, the first failure is relayed.
func (h *Handler) serveModels(w http.ResponseWriter, r *http.Request) {
	r, cancel := h.bounded(r)
	defer cancel()
	header := forwardHeader(r.Header)
	var data []json.RawMessage
	var missing []string
	var firstErr error
	for i := range h.cfg.Providers {
		p := &h.cfg.Providers[i]
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
		writeError(w, protocol.Classify(firstErr))
		return
	}
	if len(missing) > 0 {
		w.Header().Set("X-Phasegate-Models-Missing", strings.Join(missing, ","))
	}
	if data == nil {
		data = []json.RawMessage{}
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

func (h *Handler) listModels(ctx context.Context, p *Provider, header http.Header) ([]json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint(p.BaseURL, "/models"), nil)
	if err != nil {
		return nil, fmt.Errorf("build models request: %w", err)
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
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, &protocol.InvalidResponseError{Message: fmt.Sprintf("provider %s answered /models with invalid JSON", p.Name), Err: err}
	}
	return list.Data, nil
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

// passesThrough reports whether the endpoint rest (the path below /v1) may
// be passed through with the gateway's own key.
func (h *Handler) passesThrough(rest string) bool {
	allowed := h.cfg.PassThrough
	if allowed == nil {
		allowed = DefaultPassThrough
	}
	for _, p := range allowed {
		p = "/" + strings.Trim(p, "/")
		if p == "/*" || rest == p || strings.HasPrefix(rest, p+"/") {
			return true
		}
	}
	return false
}
