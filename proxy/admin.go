package proxy

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/phasegate/phasegate/chat"
)

// admin reports whether r presents the admin key as a bearer token. The
// comparison takes the same time whatever the token (both sides are
// hashed first, so not even the key's length shows), and no key
// configured admits nobody.
func (h *Handler) admin(r *http.Request) bool {
	if h.cfg.AdminAPIKey == "" {
		return false
	}
	token, ok := cutBearer(r.Header.Get("Authorization"))
	if !ok {
		return false
	}
	got, want := sha256.Sum256([]byte(token)), sha256.Sum256([]byte(h.cfg.AdminAPIKey.Reveal()))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// serveRecent answers GET /debug/requests/{id} with the trace events kept
// of a recent request. Without the admin key, or for a request not kept,
// it answers 404 like any unknown route: the route's existence is not
// told to who may not use it.
func (h *Handler) serveRecent(w http.ResponseWriter, r *http.Request, id string) {
	if h.recent == nil || !h.admin(r) {
		writeJSONError(w, &chat.Error{Status: http.StatusNotFound, Type: chat.TypeInvalidRequest, Code: "unknown_url",
			Message: "unknown route: " + r.Method + " " + r.URL.Path})
		return
	}
	req, ok := h.recent.Request(id)
	if !ok {
		writeJSONError(w, &chat.Error{Status: http.StatusNotFound, Type: chat.TypeInvalidRequest, Code: "request_not_kept",
			Message: "no trace events are kept for request " + id + ": unknown, or older than the recent requests kept"})
		return
	}
	b, err := json.Marshal(req)
	if err != nil {
		writeJSONError(w, chat.AsError(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	// The reasons of the events quote upstream errors and the model's
	// output: redacted like any other exit.
	_, _ = w.Write(append(h.redactor.Bytes(b), '\n')) // a failed write means the client left
}

// Admin returns the handler of the admin routes alone — /metrics,
// /debug/requests/{request_id}, /healthz and /readyz — for a listener of
// their own (ADMIN_LISTEN_ADDR, with Config.SeparateAdmin).
func (h *Handler) Admin() http.Handler {
	e := gin.New()
	e.Use(h.requestID, h.recover)
	h.health(e)
	h.adminRoutes(e)
	e.NoRoute(func(c *gin.Context) {
		writeJSONError(c.Writer, &chat.Error{Status: http.StatusNotFound, Type: chat.TypeInvalidRequest, Code: "unknown_url",
			Message: "unknown route: " + c.Request.Method + " " + c.Request.URL.Path})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w = &exitWriter{ResponseWriter: w, r: h.redactor}
		if r = admitted(w, r, h.cfg.MaxBodyBytes, nil); r != nil {
			e.ServeHTTP(w, r)
		}
	})
}

// adminRoutes adds /metrics (behind the admin key when the configuration
// asks), the recent requests and the sessions.
func (h *Handler) adminRoutes(e *gin.Engine) {
	metricsHandler := promhttp.HandlerFor(h.gatherer, promhttp.HandlerOpts{})
	e.GET("/metrics", func(c *gin.Context) {
		if h.metricsNeedAdminKey() && !h.admin(c.Request) {
			writeJSONError(c.Writer, &chat.Error{Status: http.StatusUnauthorized, Type: chat.TypeInvalidRequest, Code: "invalid_api_key",
				Message: "/metrics needs the admin key, sent as \"Authorization: Bearer <key>\" (METRICS_REQUIRE_ADMIN_KEY; with client keys, unless it is false or ADMIN_LISTEN_ADDR is set)"})
			return
		}
		metricsHandler.ServeHTTP(c.Writer, c.Request)
	})
	e.GET("/debug/requests/:id", func(c *gin.Context) { h.serveRecent(c.Writer, c.Request, c.Param("id")) })
	h.sessionRoutes(e) // proxy/session_admin.go
}

// metricsNeedAdminKey reports whether /metrics asks for the admin key:
// when configured so, and by default when the gateway has client keys and
// serves /metrics beside the client routes (whoever holds a client key,
// or none, should not read every client's traffic from it).
func (h *Handler) metricsNeedAdminKey() bool {
	return h.cfg.MetricsNeedAdminKey || (len(h.cfg.ClientKeys) > 0 && !h.cfg.SeparateAdmin && !h.cfg.MetricsOpen)
}

// health adds /healthz and /readyz, which answers 503 while draining.
func (h *Handler) health(e *gin.Engine) {
	e.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	e.GET("/readyz", func(c *gin.Context) {
		if h.draining.Load() {
			c.JSON(http.StatusServiceUnavailable, gin.H{"status": "draining"})
			return
		}
		c.JSON(http.StatusOK, gin.H{"status": "ready"})
	})
}
