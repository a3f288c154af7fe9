package proxy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
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
// store.RedisSessions shared by replicas). A request makes one call of
// it: Open; its settlement is owed, or charged at once when it decides
// something.
type SessionStore interface {
	// Open decides a request of the session of key and charges its
	// reservation, starting the session when needed.
	Open(ctx context.Context, key string, o session.Opening) (session.Opened, error)
	// Charge adds c to the session of key, starting it when needed.
	Charge(ctx context.Context, key string, c session.Charge) (session.Charged, error)
	// Owe adds c to the session of key with the store's next call.
	Owe(ctx context.Context, key string, c session.Charge) error
	// Look returns the session of key, false when the store holds none.
	Look(ctx context.Context, key string) (session.State, bool, error)
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
	// opened reports that the store decided the request and charged its
	// reservation; after is the session as the request's charges left it,
	// as far as this replica knows (see settleSession).
	opened bool
	after  session.State
	// charged is what the session was charged for the request so far:
	// its reservation, then each settlement.
	charged  session.Counters
	charges  int
	reported float64 // the dollars of charged counted in the metrics
	// nonce names the request's charges (not X-Request-Id, which the
	// client may repeat).
	nonce string
}

// openSession decides the session a request names, if any, and charges
// its reservation, in one call of the store: a request of a session
// whose budget is spent is made its forced final answer (or refused,
// SESSION_ON_CAP=reject). Once the request is served, closeSession
// settles it.
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
	c.sess = s
	out, err := h.sessions.Open(ctx, s.key, c.opening(s))
	if err != nil {
		return h.sessionStoreFailed(c.w.Header(), err)
	}
	s.opened, s.after, s.charged, s.spent = true, out.State, out.Reserved, out.Spent
	c.sessionReport(out.Charged, out.Settled)
	if s.spent != "" {
		return c.sessionSpent(s, out.Before)
	}
	h.metrics.SessionDecision("open")
	return nil
}

// opening is what the request asks of session s: its prompt, priced by
// the table, and a tool call reserved when it offers tools.
func (c *chatRequest) opening(s *sessionRun) session.Opening {
	h, req := c.h, c.x.Request
	o := session.Opening{Budget: s.budget, Prompt: int64(c.estimate()), ID: s.nonce + "#0",
		Reject: h.cfg.Sessions.Reject || h.twoStage == nil || req.N > 1}
	if p, ok := h.prices.Lookup(req.Model, time.Now()); ok {
		o.MissPrice, o.HitPrice, o.Priced = p.InputCacheMiss, p.InputCacheHit, true
	}
	if len(req.Tools) > 0 {
		o.Calls = 1
	}
	return o
}

// sessionSpent serves a request of session s (as the request found it,
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
// counted, and the request is settled with its session, if any (what was
// not charged before its end, see chargeSession).
func (c *chatRequest) closeSession() {
	m, ok := c.x.Meter.(*requestMeter)
	if !ok {
		return
	}
	c.countSaved(m, time.Now())
	c.chargeSession()
}

// chargeSession settles the request with its session: what it spent
// beyond what the session was charged. It runs before a stream's [DONE]
// and before a whole answer is written (see tallySink), so that the
// client's next request finds the session charged, and once more when the
// request is over, for the usage that settled after that (the standard
// protocol's streams): a second settlement only then.
func (c *chatRequest) chargeSession() {
	s := c.sess
	m, ok := c.x.Meter.(*requestMeter)
	if s == nil || !ok {
		return
	}
	total := session.Counters{Requests: 1, PromptTokens: int64(m.usage.Prompt), CacheReadTokens: int64(m.usage.CacheHit),
		CompletionTokens: int64(m.usage.Completion)}
	if s.tally != nil {
		total.ToolCalls = int64(s.tally.calls)
	}
	if usd, priced := c.h.prices.Cost(c.x.Request.Model, m.usage, time.Now()); priced {
		total.USD = usd
	} else {
		total.UnpricedTokens = int64(m.usage.Prompt + m.usage.Completion)
	}
	c.settleSession(s, total)
}

// refundSession gives back the reservation of a request that was not
// served after all (a rate limit refused it).
func (c *chatRequest) refundSession() {
	if s := c.sess; s != nil && s.opened {
		c.settleSession(s, session.Counters{})
	}
}

// settleSession charges session s what the request spent in all (total) beyond
// what s was charged. A settlement that decides nothing (the session
// capped already, or no budget reached before or after it) is owed: the
// store
// carries it with its next call, so that a request costs one call of a
// shared store. One that decides is charged at once, so that the
// session's next request, on any replica, finds it decided.
func (c *chatRequest) settleSession(s *sessionRun, total session.Counters) {
	h := c.h
	due := minus(total, s.charged)
	if due == (session.Counters{}) && (s.opened || s.charges > 0) {
		return
	}
	s.charges++
	ch := session.Charge{Counters: due, Cap: s.spent, Budget: s.budget, ID: s.nonce + "#" + strconv.Itoa(s.charges)}
	settled := s.after.Apply(ch, time.Now())
	ctx := context.WithoutCancel(c.r.Context())
	decides := s.after.Capped == "" && (settled.Reached(s.budget) != "" || s.after.Reached(s.budget) != "")
	if s.opened && !decides {
		if err := h.sessions.Owe(ctx, s.key, ch); err != nil {
			c.sessionUncharged(err)
			return
		}
		s.charged, s.after = total, settled
		c.sessionCharged(s, session.Charged{State: settled, Active: c.sessActive[0], CappedSessions: c.sessActive[1]})
		return
	}
	out, err := h.sessions.Charge(ctx, s.key, ch)
	if err != nil {
		c.sessionUncharged(err)
		return
	}
	s.charged, s.after = total, out.State
	c.sessionCharged(s, out)
	c.sessionReport(out, nil)
}

// sessionUncharged logs a settlement the store failed.
func (c *chatRequest) sessionUncharged(err error) {
	c.h.metrics.StoreFailed(metrics.StoreSession)
	c.log.Warn("session store failed; this request is not charged to its session", "error", err)
}

// sessionCharged counts what session s was charged so far, and the
// store's counts as out reports them.
func (c *chatRequest) sessionCharged(s *sessionRun, out session.Charged) {
	m, _ := c.x.Meter.(*requestMeter)
	label := c.h.metrics.ModelLabel(c.x.Request.Model)
	if m != nil {
		label = m.label
	}
	c.h.metrics.SessionCharged(label, s.charged.USD-s.reported, out.State.RateUSDPerHour(), out.Active, out.CappedSessions)
	s.reported = s.charged.USD
}

// sessionReport counts and logs what a call of the store reports: the
// cap it recorded (out.Capped), the caps the settlements it carried
// recorded, and the sessions it let go.
func (c *chatRequest) sessionReport(out session.Charged, settled []session.Settled) {
	h := c.h
	c.sessActive = [2]int{out.Active, out.CappedSessions}
	if out.Capped {
		c.sessionCappedLog(c.sess.id, out.State)
	}
	for _, st := range settled {
		h.metrics.SessionCapped(string(st.Cap))
		_, id, _ := strings.Cut(st.Key, ":")
		c.log.Info("session spent its budget; its next requests get a final answer without tools", "session", id, "budget", string(st.Cap))
	}
	for _, e := range out.Ended {
		h.metrics.SessionEnded(string(e.Outcome), e.USD)
	}
}

// sessionCappedLog counts and logs a session's cap, recorded by this
// request's call.
func (c *chatRequest) sessionCappedLog(id string, st session.State) {
	c.h.metrics.SessionCapped(string(st.Capped))
	// The id, for GET /admin/sessions/{id}: the client named it.
	c.log.Info("session spent its budget; its next requests get a final answer without tools", "session", id,
		"budget", string(st.Capped), "tool_calls", st.ToolCalls, "tokens", st.Tokens(), "usd", st.USD)
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
// tool calls of a whole answer. Before a stream's [DONE], and before a
// whole answer, it calls beforeDone.
type tallySink struct {
	sink
	calls      int
	seen       map[[2]int]bool
	beforeDone func()
}

// tallied returns out, counting the tool calls it forwards for the
// request's session and calling beforeDone before a stream's [DONE] and
// before a whole answer; out itself when the request names none.
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
	t.beforeDone() // before the client has the answer, as before a stream's [DONE]
	return t.sink.whole(status, h, body)
}
