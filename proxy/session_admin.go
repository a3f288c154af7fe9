package proxy

import (
	"encoding/hex"
	"encoding/json"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/session"
)

// SessionKeyHeader names, on the admin routes of sessions, the client
// key whose session is meant, when the gateway has client keys: a session
// is its key's (the key itself, as the client presents it).
const SessionKeyHeader = "X-Phasegate-Session-Key"

// sessionRoutes adds the admin routes of sessions: GET
// /admin/sessions/{id} shows a session, DELETE resets it, POST
// /admin/sessions/{id}/stop makes it spent (its next request, on any
// replica, is its forced final answer). Each needs the admin key, and
// names the session's scope: the client key in SessionKeyHeader when the
// gateway has client keys, else the project in the query (?project=,
// none for requests without X-Project-Id).
func (h *Handler) sessionRoutes(e *gin.Engine) {
	serve := func(do func(w http.ResponseWriter, r *http.Request, key, id string)) gin.HandlerFunc {
		return func(c *gin.Context) {
			key, id, err := h.adminSession(c.Request, c.Param("id"))
			if err != nil {
				writeJSONError(c.Writer, err)
				return
			}
			do(c.Writer, c.Request, key, id)
		}
	}
	e.GET("/admin/sessions/:id", serve(h.showSession))
	e.DELETE("/admin/sessions/:id", serve(h.resetSession))
	e.POST("/admin/sessions/:id/stop", serve(h.stopSession))
}

// adminSession checks an admin request of a session and returns the
// session's key in the store. Without the admin key the route is unknown
// (404), as every admin route is to who may not use it.
func (h *Handler) adminSession(r *http.Request, id string) (key, checkedID string, err *chat.Error) {
	if !h.admin(r) {
		return "", "", &chat.Error{Status: http.StatusNotFound, Type: chat.TypeInvalidRequest, Code: "unknown_url",
			Message: "unknown route: " + r.Method + " " + r.URL.Path}
	}
	if !session.ValidID(id) {
		return "", "", chat.InvalidRequest("id", "id must be a session id of 1 to %d letters, digits and -._:@+=", session.MaxIDLen)
	}
	if len(h.keys.digests) == 0 {
		return sessionKey(sessionScope(r, r.URL.Query().Get("project"), false), id), id, nil
	}
	presented := r.Header.Get(SessionKeyHeader)
	if presented == "" {
		return "", "", chat.InvalidRequest(SessionKeyHeader, "this gateway has client keys, and a session is its key's: name the key in header %s", SessionKeyHeader)
	}
	i := h.keys.match(presented)
	if i < 0 {
		return "", "", chat.InvalidRequest(SessionKeyHeader, "header %s is not one of this gateway's client keys", SessionKeyHeader)
	}
	return sessionKey("k"+hex.EncodeToString(h.keys.digests[i][:12]), id), id, nil
}

// sessionView is a session as the admin routes show it.
type sessionView struct {
	Object string `json:"object"`
	ID     string `json:"id"`
	session.Counters
	// Tokens is what SESSION_MAX_TOKENS counts.
	Tokens        int64   `json:"tokens"`
	SpendRate     float64 `json:"spend_rate_usd_per_hour"`
	Capped        *string `json:"capped"`
	StartedAt     int64   `json:"started_at"`
	LastRequestAt int64   `json:"last_request_at"`
	ExpiresAt     int64   `json:"expires_at"`
	Budget        struct {
		ToolCalls int64   `json:"max_tool_calls"`
		Tokens    int64   `json:"max_tokens"`
		USD       float64 `json:"max_usd"`
		IdleTTL   float64 `json:"idle_ttl_seconds"`
	} `json:"budget"`
}

func viewOf(id string, st session.State) sessionView {
	v := sessionView{Object: "phasegate.session", ID: id, Counters: st.Counters, Tokens: st.Tokens(), SpendRate: st.RateUSDPerHour(),
		StartedAt: st.Started.Unix(), LastRequestAt: st.Last.Unix(), ExpiresAt: st.Last.Add(st.Budget.IdleTTL).Unix()}
	if st.Capped != "" {
		c := string(st.Capped)
		v.Capped = &c
	}
	v.Budget.ToolCalls, v.Budget.Tokens, v.Budget.USD, v.Budget.IdleTTL = st.Budget.ToolCalls, st.Budget.Tokens, st.Budget.USD, st.Budget.IdleTTL.Seconds()
	return v
}

// showSession answers GET /admin/sessions/{id}: the session's counters,
// the budget of its last request, and the budget it spent, if any.
func (h *Handler) showSession(w http.ResponseWriter, r *http.Request, key, id string) {
	h.flushSessions(r.Context())
	st, ok, err := h.sessions.Look(r.Context(), key)
	if err != nil {
		h.log.Warn("session store failed", "error", err)
		writeJSONError(w, errSessionUnavailable)
		return
	}
	if !ok {
		writeJSONError(w, sessionNotFound(id))
		return
	}
	writeAdminJSON(w, http.StatusOK, viewOf(id, st))
}

// resetSession answers DELETE /admin/sessions/{id}: the session is
// forgotten, its next request starts it anew.
func (h *Handler) resetSession(w http.ResponseWriter, r *http.Request, key, id string) {
	h.flushSessions(r.Context())
	st, ok, err := h.sessions.Reset(r.Context(), key)
	if err != nil {
		h.log.Warn("session store failed", "error", err)
		writeJSONError(w, errSessionUnavailable)
		return
	}
	if !ok {
		writeJSONError(w, sessionNotFound(id))
		return
	}
	h.metrics.SessionEnded(string(session.OutcomeReset), st.USD)
	writeAdminJSON(w, http.StatusOK, map[string]any{"object": "phasegate.session.deleted", "id": id, "deleted": true})
}

// stopSession answers POST /admin/sessions/{id}/stop: the session is
// marked spent (SESSION_STOPPED) in the shared store, so its next request,
// on any replica, is its forced final answer; a session not held yet is
// started stopped.
func (h *Handler) stopSession(w http.ResponseWriter, r *http.Request, key, id string) {
	ctx := r.Context()
	st, ok, err := h.sessions.Look(ctx, key)
	budget := st.Budget
	if !ok {
		budget = h.cfg.Sessions.Rules.Global
	}
	var out session.Charged
	if err == nil {
		out, err = h.sessions.Charge(ctx, key, session.Charge{Cap: session.CapStopped, Budget: budget})
	}
	if err != nil {
		h.log.Warn("session store failed", "error", err)
		writeJSONError(w, errSessionUnavailable)
		return
	}
	if out.Capped {
		h.metrics.SessionCapped(string(session.CapStopped))
	}
	h.log.Info("session stopped by an operator", "capped", string(out.State.Capped))
	writeAdminJSON(w, http.StatusOK, viewOf(id, out.State))
}

func sessionNotFound(id string) *chat.Error {
	return &chat.Error{Status: http.StatusNotFound, Type: chat.TypeInvalidRequest, Param: "id", Code: "session_not_found",
		Message: "no session '" + id + "' is held in this scope: never named, expired, or reset"}
}

// writeAdminJSON writes v (the exitWriter redacts it, as every exit).
func writeAdminJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeJSONError(w, chat.AsError(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
