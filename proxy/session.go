package proxy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/jsonscan"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/pricing"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/session"
)

// Sessions configure the budgets of agent sessions (DESIGN.md §9): a
// request that names its session (package session) is charged to it,
// and once the session's budget is spent the request is its forced
// final answer.
type Sessions struct {
	// Rules are the budgets: global, per model, per project. A zero
	// Global.IdleTTL is DefaultSessionIdleTTL.
	Rules session.Rules
	// From are the body fields a session may be named by, in order of
	// preference (SESSION_FROM), after the headers.
	From []session.Source
	// Reject answers a request of a session whose budget is spent with a
	// 429 (SESSION_ON_CAP=reject) rather than its forced final answer.
	Reject bool
	// FailOpen serves a request as a session's first when the store of
	// sessions fails (SESSION_FAIL_OPEN); false answers 503.
	FailOpen bool
}

// DefaultSessionIdleTTL is how long a session is kept after its last
// request, unless configured otherwise.
const DefaultSessionIdleTTL = time.Hour

// SessionStore keeps the sessions (store.MemorySessions, or
// store.RedisSessions shared by replicas).
type SessionStore interface {
	// Look returns the session of key, false when the store holds none.
	Look(ctx context.Context, key string) (session.State, bool, error)
	// Charge adds c to the session of key, starting it when needed.
	Charge(ctx context.Context, key string, c session.Charge) (session.Charged, error)
	// Reset forgets the session of key and returns it as it was.
	Reset(ctx context.Context, key string) (session.State, bool, error)
}

// SessionBudgetHeader names the budget a session spent, on the response
// that is its forced final answer (or its 429).
const SessionBudgetHeader = "X-Phasegate-Session-Budget"

// sessionRun is the session of one request. It is owned by the request.
type sessionRun struct {
	id, key string
	budget  session.Budget
	// spent is the budget this request's forced final answer is for, ""
	// when it is served as asked.
	spent session.Cap
	// tally counts the tool calls the response forwarded.
	tally *tallySink
	// charged is what the session was charged for the request so far, in
	// charges calls.
	charged session.Counters
	charges int
	// nonce names the request's charges (not X-Request-Id, which the
	// client may repeat).
	nonce string
}

// openSession looks up the session a request names, if any: a request of
// a session whose budget is spent is made its forced final answer (or
// refused, SESSION_ON_CAP=reject). Once the request is served,
// closeSession charges it.
func (c *chatRequest) openSession(ctx context.Context) error {
	h, req := c.h, c.x.Request
	id, _, err := session.Identify(c.r.Header, c.sessionFields(), h.cfg.Sessions.From)
	if err != nil || id == "" {
		return err
	}
	budget, err := h.cfg.Sessions.Rules.Resolve(c.x.ProjectID, req.Model).Lowered(c.r.Header)
	if err != nil {
		return err
	}
	s := &sessionRun{id: id, key: sessionKey(sessionScope(c.r, c.x.ProjectID, len(h.keys.digests) > 0), id), budget: budget, nonce: rand.Text()}
	st, _, err := h.sessions.Look(ctx, s.key)
	if err == nil {
		s.spent = st.Spent(budget, c.nextCharge(st))
	}
	switch {
	case err != nil:
		err = h.sessionStoreFailed(c.w.Header(), err)
	case s.spent != "":
		err = c.sessionSpent(s, st)
	default:
		h.metrics.SessionDecision("open")
	}
	c.sess = s
	return err
}

// nextCharge estimates what the request's prompt adds to session st: its
// count, at the share of the session's prompts the cache did not hold,
// priced by the table.
func (c *chatRequest) nextCharge(st session.State) session.Next {
	prompt := c.estimate()
	miss := st.MissRatio()
	u := pricing.Usage{Prompt: prompt, CacheHit: prompt - int(float64(prompt)*miss)}
	usd, _ := c.h.prices.Cost(c.x.Request.Model, u, time.Now())
	return session.Next{Tokens: int64(float64(prompt) * miss), USD: usd}
}

// sessionSpent serves a request of session s (as the store holds it,
// st), whose budget is spent: its forced final answer on the guard, or a
// 429.
func (c *chatRequest) sessionSpent(s *sessionRun, st session.State) error {
	h, spent := c.h, s.spent
	c.w.Header().Set(SessionBudgetHeader, string(spent))
	if h.cfg.Sessions.Reject || h.twoStage == nil || c.x.Request.N > 1 {
		h.metrics.SessionDecision("rejected")
		wait := time.Until(st.Last.Add(st.Budget.IdleTTL))
		c.w.Header().Set("Retry-After", retryAfterSeconds(wait))
		return &chat.Error{Status: http.StatusTooManyRequests, Type: "insufficient_quota", Code: "session_budget_spent",
			Message: "the budget of this session is spent (" + string(spent) + "); it expires after " + st.Budget.IdleTTL.String() +
				" without requests, or an operator resets it"}
	}
	h.metrics.SessionDecision("forced_final")
	budget := s.budget
	if st.Capped != "" {
		budget = st.Budget // the budget the session spent then
	}
	text, shown := session.Notice(spent, budget)
	c.x.Limits.Spent = &protocol.Spent{Budget: string(spent), Notice: text, Shown: shown}
	c.decide(decision{strategy: h.twoStage, reason: reasonSession, judged: true})
	return nil
}

// reasonSession: the request's session spent its budget; the guard
// serves its forced final answer.
const reasonSession reason = "session"

// sessionStoreFailed decides a request whose session the store could not
// look up: served as a new session's (SESSION_FAIL_OPEN), else a 503.
func (h *Handler) sessionStoreFailed(hdr http.Header, err error) error {
	h.metrics.StoreFailed(metrics.StoreSession)
	if h.cfg.Sessions.FailOpen {
		h.metrics.SessionDecision("failed_open")
		h.log.Warn("session store failed; request served as its session's first (SESSION_FAIL_OPEN)", "error", err)
		return nil
	}
	h.metrics.SessionDecision("failed_closed")
	h.log.Warn("session store failed; request refused (SESSION_FAIL_OPEN=false)", "error", err)
	hdr.Set("Retry-After", "1")
	return errSessionUnavailable
}

var errSessionUnavailable = &chat.Error{Status: http.StatusServiceUnavailable, Type: chat.TypeServer, Code: "session_unavailable",
	Message: "the budget of this session cannot be checked right now; send the request again shortly"}

// closeSession ends a served request: what the guard's refusals saved is
// counted, and the request is charged to its session, if any (what was
// not charged before its end, see chargeSession).
func (c *chatRequest) closeSession() {
	m, ok := c.x.Meter.(*requestMeter)
	if !ok {
		return
	}
	c.countSaved(m, time.Now())
	c.chargeSession()
}

// chargeSession charges the request's session what the request spent
// and has not been charged yet. It runs before a stream's [DONE] (see
// tallySink), so that the client's next request finds the session
// charged, and once more when the request is over, for the usage that
// settled after [DONE] (the standard protocol's): a second charge only
// then.
func (c *chatRequest) chargeSession() {
	s := c.sess
	m, ok := c.x.Meter.(*requestMeter)
	if s == nil || !ok {
		return
	}
	h := c.h
	total := session.Counters{Requests: 1, PromptTokens: int64(m.usage.Prompt), CacheReadTokens: int64(m.usage.CacheHit),
		CompletionTokens: int64(m.usage.Completion)}
	if s.tally != nil {
		total.ToolCalls = int64(s.tally.calls)
	}
	if usd, priced := h.prices.Cost(c.x.Request.Model, m.usage, time.Now()); priced {
		total.USD = usd
	} else {
		total.UnpricedTokens = int64(m.usage.Prompt + m.usage.Completion)
	}
	due := minus(total, s.charged)
	if s.charged.Requests > 0 && due == (session.Counters{}) {
		return
	}
	s.charges++
	id := s.nonce + "#" + strconv.Itoa(s.charges)
	out, err := h.sessions.Charge(context.WithoutCancel(c.r.Context()), s.key, session.Charge{Counters: due, Cap: s.spent, Budget: s.budget, ID: id})
	if err != nil {
		h.metrics.StoreFailed(metrics.StoreSession)
		c.log.Warn("session store failed; this request is not charged to its session", "error", err)
		return
	}
	s.charged = total
	h.metrics.SessionCharged(m.label, due.USD, out.State.RateUSDPerHour(), out.Active, out.CappedSessions)
	if out.Capped {
		h.metrics.SessionCapped(string(out.State.Capped))
		// The id, for GET /admin/sessions/{id}: the client named it.
		c.log.Info("session spent its budget; its next requests get a final answer without tools", "session", s.id,
			"budget", string(out.State.Capped), "tool_calls", out.State.ToolCalls, "tokens", out.State.Tokens(), "usd", out.State.USD)
	}
	for _, e := range out.Ended {
		h.metrics.SessionEnded(string(e.Outcome), e.USD)
	}
}

// minus is what a has beyond b.
func minus(a, b session.Counters) session.Counters {
	return session.Counters{Requests: a.Requests - b.Requests, ToolCalls: a.ToolCalls - b.ToolCalls, PromptTokens: a.PromptTokens - b.PromptTokens,
		CacheReadTokens: a.CacheReadTokens - b.CacheReadTokens, CompletionTokens: a.CompletionTokens - b.CompletionTokens,
		USD: a.USD - b.USD, UnpricedTokens: a.UnpricedTokens - b.UnpricedTokens}
}

// countSaved adds, for each tool call the guard refused, the estimate of
// what the refusal saved: the request's prompt, which the loop would have
// sent once more, priced at the share of it the cache held this time.
func (c *chatRequest) countSaved(m *requestMeter, at time.Time) {
	if len(m.refused) == 0 {
		return
	}
	prompt := c.estimate()
	hit := 0
	if m.usage.Prompt > 0 {
		hit = int(float64(prompt) * float64(m.usage.CacheHit) / float64(m.usage.Prompt))
	}
	usd, _ := c.h.prices.Cost(c.x.Request.Model, pricing.Usage{Prompt: prompt, CacheHit: hit}, at)
	for _, kind := range m.refused {
		c.h.metrics.Saved(m.label, kind, prompt, usd)
	}
}

// sessionScope is whose sessions a request's are: its client key's, or
// with no client keys configured, its project's. It is a digest of fixed
// length, so that no id can pass for another scope's.
func sessionScope(r *http.Request, project string, keys bool) string {
	if keys {
		return "k" + clientID(r)
	}
	d := sha256.Sum256([]byte(project))
	return "p" + hex.EncodeToString(d[:12])
}

// sessionKey is the store's key of session id in scope.
func sessionKey(scope, id string) string { return scope + ":" + id }

// clientBodied is a door's request whose client body is not the chat
// request the door made of it, which has only the fields it translated.
type clientBodied interface{ clientBody() []byte }

// sessionFields reads the top-level fields of the request as its client
// sent it: the front door's body, else the chat request's own. The body is
// decoded once, when a field is first asked for.
func (c *chatRequest) sessionFields() session.Fields {
	in, ok := c.in.(clientBodied)
	if !ok {
		return c.x.Request.Field
	}
	body := in.clientBody()
	var top map[string]json.RawMessage
	decoded := false
	return func(name string) (json.RawMessage, bool) {
		if !decoded {
			decoded = true
			_ = json.Unmarshal(body, &top) // the door parsed it already
		}
		v, ok := top[name]
		return v, ok
	}
}

// tallySink counts the tool calls a response forwards to the client: the
// distinct (choice, index) pairs of its chunks' tool-call deltas, or the
// tool calls of a whole answer. Before a stream's [DONE] it calls
// beforeDone.
type tallySink struct {
	sink
	calls      int
	seen       map[[2]int]bool
	beforeDone func()
}

// tallied returns out, counting the tool calls it forwards for the
// request's session and calling beforeDone before a stream's [DONE]; out
// itself when the request names none.
func (s *sessionRun) tallied(out sink, beforeDone func()) sink {
	if s == nil {
		return out
	}
	s.tally = &tallySink{sink: out, beforeDone: beforeDone}
	return s.tally
}

func (t *tallySink) identify(i *identity) { identify(t.sink, i) }

func (t *tallySink) done() error {
	t.beforeDone()
	return t.sink.done()
}

func (t *tallySink) chunk(data, ext []byte) error {
	if jsonscan.FindKey(data, "tool_calls", 0) >= 0 {
		var c struct {
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					ToolCalls []struct {
						Index int `json:"index"`
					} `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal(data, &c) == nil {
			for _, ch := range c.Choices {
				for _, tc := range ch.Delta.ToolCalls {
					t.see(ch.Index, tc.Index)
				}
			}
		}
	}
	return t.sink.chunk(data, ext)
}

func (t *tallySink) see(choice, index int) {
	if t.seen == nil {
		t.seen = map[[2]int]bool{}
	}
	if k := [2]int{choice, index}; !t.seen[k] {
		t.seen[k] = true
		t.calls++
	}
}

func (t *tallySink) whole(status int, h http.Header, body []byte) error {
	if status == http.StatusOK && jsonscan.FindKey(body, "tool_calls", 0) >= 0 {
		var c struct {
			Choices []struct {
				Message struct {
					ToolCalls []json.RawMessage `json:"tool_calls"`
				} `json:"message"`
			} `json:"choices"`
		}
		if json.Unmarshal(body, &c) == nil {
			for _, ch := range c.Choices {
				t.calls += len(ch.Message.ToolCalls)
			}
		}
	}
	return t.sink.whole(status, h, body)
}
