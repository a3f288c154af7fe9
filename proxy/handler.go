// Package proxy is the HTTP side of the gateway: the routes, the upstream
// transport, SSE in and out, and the mapping of every failure to the
// status and OpenAI-style body the client sees. Only this package sees gin.
package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/redact"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/pricing"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/responses"
	"github.com/phasegate/phasegate/store"
	"github.com/phasegate/phasegate/tokens"
)

// Protocol names, as routes, headers and metric labels spell them.
const (
	ProtocolStandard = "standard"
	ProtocolTwoStage = "two-stage"
)

// protocolDefault is the protocol of /v1/chat/completions: the configured
// default, except that a request the guard has nothing to judge in is
// passed through (see needsGuard).
const protocolDefault = ""

// EnvelopeHeader marks a request that carries an orchestrator envelope:
// the guard serves it on /v1 even when it declares no tools.
const EnvelopeHeader = "X-Phasegate-Envelope"

// RulesNoticeHeader set to true has the guard state its rules to the
// model up front for this request; false leaves GUARD_RULES_NOTICE as
// configured (a client can turn the notice on, never off).
const RulesNoticeHeader = "X-Phasegate-Rules-Notice"

// needsGuard reports whether a request to /v1 has anything for the guard
// to judge: tools it may call, or an orchestrator envelope (asked for by
// the header or by a rule for its model; a header the guard cannot read
// goes to the guard, which answers it). Any other request is served by
// the standard protocol, byte for byte as the upstream answered. The
// repairs for DeepSeek's thinking mode are made in prepare, whichever
// protocol serves.
func (h *Handler) needsGuard(hdr http.Header, req *chat.Request) bool {
	if len(req.Tools) > 0 {
		return true
	}
	mode, err := h.envelopeMode(hdr, req.Model)
	return err != nil || mode != protocol.EnvelopeOff
}

// Options are the parts of a Handler that are not plain settings.
type Options struct {
	// Logger receives one line per request and every failure; nil discards.
	Logger *slog.Logger
	// TwoStage is the guard; nil makes /two-stage/v1/chat/completions answer
	// 501 and /v1/chat/completions use the standard protocol.
	TwoStage protocol.Strategy
	// DefaultProtocol is what /v1/chat/completions uses: ProtocolTwoStage
	// (when TwoStage is set) or ProtocolStandard.
	DefaultProtocol string
	// Transport overrides the upstream transport; nil builds one from the
	// timeouts.
	Transport http.RoundTripper
	// Tracer receives the trace events of the proxy (fallbacks); nil
	// discards them.
	Tracer protocol.Tracer
	// PlanMode tells that the guard has a plan-mode allowlist, so
	// X-Phasegate-Mode: plan is accepted.
	PlanMode bool
	// Metrics records requests and upstream calls; Gatherer is what
	// GET /metrics exposes. When Metrics is nil the handler keeps its own
	// on a private registry.
	Metrics  *metrics.Metrics
	Gatherer prometheus.Gatherer
	// Tokens fits every request to its model's context window; nil sends
	// histories as they come.
	Tokens *tokens.Counter
	// TracerProvider, when set, traces every chat completion request: a
	// span per request (a child of the client's traceparent, if any), a
	// child span per upstream call, the guard's decisions as events of the
	// request's span (through Tracer), and the call's traceparent sent
	// upstream in place of the client's. Nil traces nothing and passes a
	// client's traceparent on as it came.
	TracerProvider trace.TracerProvider
	// Recent, when set with Config.AdminAPIKey, is served at GET
	// /debug/requests/{request_id}: the trace events of a recent request.
	// It must be among the tracers the strategies use to see anything.
	Recent *metrics.Recent
	// Thinking, when set, repairs requests to the deepseek provider for
	// its thinking mode and remembers there the reasoning of the tool
	// calls it serves (LocalReasoning in memory, or store.Reasoning shared
	// by replicas); nil turns the repairs off.
	Thinking ReasoningStore
	// Limiter keeps the rate limits of Config.RateLimits; nil keeps them
	// in this process (store.MemoryLimiter).
	Limiter Limiter
	// Streams keeps the events of resumable streams; nil keeps them in
	// this process (store.MemoryStreams). When it is shared with other
	// replicas (store.RedisStreams), the handler watches their cancels
	// until Close.
	Streams EventLog
	// Responses keeps the responses of the Responses API that ask to be
	// stored; nil keeps them in this process (store.MemoryResponses).
	Responses ResponseStore
	// Sessions keeps the sessions of Config.Sessions; nil keeps them in
	// this process (store.MemorySessions).
	Sessions SessionStore
	// Redactor removes secrets from everything that leaves the gateway:
	// responses (exitWriter), in-band errors, comments, logs and /debug.
	// Nil redacts the credentials of the Config (providers' keys, client
	// keys, the admin key); cmd/phasegate adds the Redis password.
	Redactor *redact.Redactor
	// doors, when set, are the front doors in place of the gateway's
	// (a test's door on the seam).
	doors []*door
}

// Handler serves the gateway's routes. It is safe for concurrent use.
type Handler struct {
	cfg      Config
	client   *http.Client
	log      *slog.Logger
	standard protocol.Strategy
	twoStage protocol.Strategy
	deflt    string
	tracer   protocol.Tracer
	planMode bool
	metrics  *metrics.Metrics
	gatherer prometheus.Gatherer
	tokens   *tokens.Counter
	thinking ReasoningStore
	keys     clientKeys
	allow    []passRule // the pass-through allowlist (PASSTHROUGH_ENDPOINTS)
	limiter  Limiter
	streams  EventLog
	stored   ResponseStore     // the stored responses of the Responses API
	sealer   *responses.Sealer // seals reasoning for the Responses API (Config.ReasoningKey)
	running  running
	// stopWatch ends the watch of other replicas' cancels; watched is
	// closed when it has ended. Both nil when there is none.
	stopWatch context.CancelFunc
	watched   chan struct{}
	// followers holds a slot per resume this replica follows live, when
	// the event log bounds them (nil: unbounded).
	followers chan struct{}
	recent    *metrics.Recent
	// otel is nil when tracing is off.
	otel       trace.Tracer
	propagator propagation.TextMapPropagator
	draining   atomic.Bool
	engine     *gin.Engine
	redactor   *redact.Redactor
	// forward are the headers of FORWARD_HEADERS, canonical.
	forward []string
	// inflight holds the memory of the request bodies in flight
	// (Config.MaxInflightBytes, Config.MaxInflightShare).
	inflight *inflight
	// sessions and prices serve Config.Sessions (proxy/session.go).
	sessions SessionStore
	prices   *pricing.Table
	// doors are the front doors (see door); doorOf maps each door's
	// route, as gin names it, to the door: the middleware answers in its
	// shape (see refuseRoute).
	doors  []*door
	doorOf map[string]*door
}

// New builds a Handler from a validated config.
func New(cfg Config, opts Options) (*Handler, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	red, log := newLogger(cfg, opts)
	tr := opts.Transport
	if tr == nil {
		tr = NewTransport(cfg.Timeouts)
	}
	sealer, err := newSealer(cfg.ReasoningKey, log)
	if err != nil {
		return nil, err
	}
	h := &Handler{
		sealer:   sealer,
		cfg:      cfg,
		client:   &http.Client{Transport: decodingTransport{next: tr}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		log:      log,
		standard: protocol.Standard{Tracer: opts.Tracer, Metrics: opts.Metrics},
		twoStage: opts.TwoStage,
		deflt:    opts.DefaultProtocol,
		tracer:   opts.Tracer,
		planMode: opts.PlanMode,
		metrics:  opts.Metrics,
		gatherer: opts.Gatherer,
		tokens:   opts.Tokens,
		thinking: opts.Thinking,
		keys:     newClientKeys(cfg.ClientKeys),
		allow:    passRules(cfg.PassThrough),
		limiter:  opts.Limiter,
		streams:  opts.Streams,
		stored:   opts.Responses,
		recent:   opts.Recent,
		redactor: red,
		forward:  canonicalKeys(cfg.ForwardHeaders),
		inflight: newInflight(cfg.MaxInflightBytes, cfg.inflightShare()),
		sessions: opts.Sessions,
		prices:   pricing.New(cfg.Prices...),
		doors:    opts.doors,
		doorOf:   map[string]*door{},
	}
	h.ownDefaults(opts)
	h.watchCancels()
	if opts.TracerProvider != nil {
		h.otel = opts.TracerProvider.Tracer("github.com/phasegate/phasegate/proxy")
		h.propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	if h.deflt == "" || h.twoStage == nil {
		h.deflt = ProtocolStandard
	}
	h.engine = h.routes()
	return h, nil
}

// newLogger returns the redactor of every log line and error body
// (opts.Redactor, else one of cfg's secrets) and the handler's logger
// (opts.Logger, else none) that redacts and throttles its lines.
func newLogger(cfg Config, opts Options) (*redact.Redactor, *slog.Logger) {
	red := opts.Redactor
	if red == nil {
		red = redact.New(cfg.secrets()...)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return red, slog.New(throttledLog(redact.Handler(log.Handler(), red), storeLogEvery, time.Now))
}

// ownDefaults gives h what opts left unset: metrics on a private
// registry, rate limits, stored responses and resumable streams kept in
// this process.
func (h *Handler) ownDefaults(opts Options) {
	if h.doors == nil {
		h.doors = frontDoors
	}
	if h.metrics == nil {
		reg := prometheus.NewRegistry()
		names := make([]string, 0, len(h.cfg.Providers))
		for _, p := range h.cfg.Providers {
			names = append(names, p.Name)
		}
		h.metrics, h.gatherer = metrics.New(reg, names), reg
		h.standard = protocol.Standard{Tracer: opts.Tracer, Metrics: h.metrics}
	}
	if h.limiter == nil {
		h.limiter = store.NewMemoryLimiter()
	}
	if h.stored == nil {
		h.stored = store.NewMemoryResponses(h.cfg.ResponsesTTL, DefaultResponsesMemoryBytes)
	}
	if h.streams == nil {
		h.streams = store.NewBoundedMemoryStreams(h.cfg.Resume.TTL, h.cfg.Resume.MemoryBytes)
	}
	if h.sessions == nil {
		h.sessions = store.NewMemorySessions(store.DefaultSessionMemoryBytes, store.DefaultMaxSessions)
	}
	if f, ok := h.streams.(followerCap); ok && f.MaxFollowers() > 0 {
		h.followers = make(chan struct{}, f.MaxFollowers())
	}
}

// ServeHTTP implements http.Handler. Every response leaves through an
// exitWriter; the path is normalised and the body bounded before gin
// routes the request (see admitted).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w = &exitWriter{ResponseWriter: w, r: h.redactor}
	if r = admitted(w, r, h.cfg.MaxBodyBytes, h.doorOf); r != nil {
		h.engine.ServeHTTP(w, r)
	}
}

// ReleaseMode has the router write nothing of its own to the process's
// standard output (gin's release mode; its debug mode lists every route).
// It is a choice for the whole process, made once by main before any
// Handler is built.
func ReleaseMode() { gin.SetMode(gin.ReleaseMode) }

// Drain marks the gateway as shutting down: /readyz answers 503 so load
// balancers stop sending, while in-flight requests finish.
func (h *Handler) Drain() { h.draining.Store(true) }

func (h *Handler) routes() *gin.Engine {
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.ContextWithFallback = true
	// gin would answer a path with a trailing slash with a redirect (307
	// for POST), which many clients do not follow. The chat and models
	// routes are served with and without it; any other path is matched as
	// it came.
	e.RedirectTrailingSlash = false
	// X-Forwarded-For names the client only when a trusted proxy sent it
	// (TRUSTED_PROXIES, validated at start); gin's default trusts anyone.
	e.RemoteIPHeaders = []string{"X-Forwarded-For"}
	_ = e.SetTrustedProxies(h.cfg.TrustedProxies)
	e.Use(h.requestID, h.recover, h.limitHeaders, h.boundBody)
	h.chatRoutes(e)
	h.resumeRoutes(e)
	h.health(e)
	if !h.cfg.SeparateAdmin {
		h.adminRoutes(e)
	}
	// Any other /v1/* request is passed through; gin's router cannot hold
	// a catch-all beside the routes above, so it lands here.
	e.NoRoute(func(c *gin.Context) {
		if apiPath(c.Request.URL.Path) != "" {
			if h.authorize(c); c.IsAborted() {
				return
			}
			h.servePassThrough(c.Writer, c.Request)
			return
		}
		writeJSONError(c.Writer, &chat.Error{Status: http.StatusNotFound, Type: chat.TypeInvalidRequest, Code: "unknown_url",
			Message: "unknown route: " + c.Request.Method + " " + c.Request.URL.Path})
	})
	e.NoMethod(func(c *gin.Context) {
		writeJSONError(c.Writer, &chat.Error{Status: http.StatusMethodNotAllowed, Type: chat.TypeInvalidRequest, Code: "method_not_allowed",
			Message: "method " + c.Request.Method + " is not allowed on " + c.Request.URL.Path})
	})
	return e
}

// chatRoutes adds the doors' routes and the models route of each
// protocol: /v1 (the request decides, see decide), /standard/v1 and
// /two-stage/v1 (which answers 501 without a guard). An SDK pointed at a
// protocol route asks that route for its models and other endpoints too.
func (h *Handler) chatRoutes(e *gin.Engine) {
	for _, r := range []struct {
		prefix, route string
		chain         []gin.HandlerFunc
	}{
		{"/v1", protocolDefault, nil},
		{"/standard/v1", ProtocolStandard, nil},
		{"/two-stage/v1", ProtocolTwoStage, []gin.HandlerFunc{h.twoStageOn}},
	} {
		g := e.Group(r.prefix, h.authorize)
		models := func(c *gin.Context) { h.serveModels(c.Writer, c.Request) }
		for _, slash := range []string{"", "/"} {
			g.GET("/models"+slash, models)
		}
		g.Any("/models/:id", func(c *gin.Context) { h.serveModel(c.Writer, c.Request, c.Param("id")) })
		h.doorRoutes(g, r.route, r.chain)
	}
}

// apiPath returns the path below /v1 of a request for /v1/*,
// /standard/v1/* or /two-stage/v1/* (with its leading slash), or "".
func apiPath(p string) string {
	for _, prefix := range []string{"/v1/", "/standard/v1/", "/two-stage/v1/"} {
		if rest, ok := strings.CutPrefix(p, prefix); ok {
			return "/" + rest
		}
	}
	return ""
}

// requestID takes the client's X-Request-Id or makes one, and echoes it.
func (h *Handler) requestID(c *gin.Context) {
	id := c.GetHeader("X-Request-Id")
	if id == "" || len(id) > 200 {
		var b [12]byte
		_, _ = rand.Read(b[:])
		id = "pg-" + hex.EncodeToString(b[:])
	}
	c.Request.Header.Set("X-Request-Id", id)
	c.Writer.Header().Set("X-Request-Id", id)
	c.Next()
}

// recover turns a panic into a 500 before anything was written, and lets
// http.ErrAbortHandler abort the connection as net/http intends.
func (h *Handler) recover(c *gin.Context) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler { //nolint:errorlint // sentinel compared as net/http does
			panic(v)
		}
		// As text: the log's redaction reads strings and errors, and a
		// value of another type would be marshalled as it is.
		h.log.Error("panic serving request", "request_id", c.GetHeader("X-Request-Id"), "panic", fmt.Sprint(v))
		if !c.Writer.Written() {
			h.refuseRoute(c, chat.AsError(errors.New("panic")))
		}
	}()
	c.Next()
}

// serveDoor serves one request that came by door d, on the route of the
// named protocol (protocolDefault for /v1): every door's requests are
// served here. It reads as its stages: prepare (read through the door,
// parse, decide the protocol, repair for thinking mode), fit (to the
// context window), serve (the strategy, its events written to the door's
// sink, a fallback for the guard's own failures).
func (h *Handler) serveDoor(w http.ResponseWriter, r *http.Request, d *door, route string) {
	// Its calls to the shared store before it is served share one
	// deadline (ended in serve, once the sink is open).
	r = r.WithContext(store.ShareDeadline(r.Context()))
	c := &chatRequest{h: h, w: w, r: r, door: d, start: time.Now(), id: r.Header.Get("X-Request-Id"), route: route}
	c.log = requestLogger(h.log, "request_id", c.id, "door", d.name)
	defer c.close()
	// Until the request is parsed, it counts under the protocol its
	// route would serve it with.
	c.strategy = h.standard
	if route == ProtocolTwoStage || route == protocolDefault && h.deflt == ProtocolTwoStage {
		c.strategy = h.twoStage
	}
	ctx := r.Context()
	if h.otel != nil {
		ctx = c.startTrace(ctx)
	}
	if d := h.cfg.Timeouts.Request; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, ErrRequestTimeout)
		defer cancel()
	}
	// Counted once prepared, under the protocol that serves it: the
	// request itself decides whether /v1 guards it.
	perr := c.prepare()
	started := h.metrics.RequestStarted(c.door.name, c.strategy.Name())
	done := func(o metrics.Outcome, err error) {
		c.trace.end(o, err)
		started(o)
	}
	if perr != nil {
		done(c.fail(perr), perr)
		return
	}
	c.trace.prepared(c.provider.Name, c.x.Request.Model, c.strategy.Name())
	if err := c.fit(); err != nil {
		done(c.fail(err), err)
		return
	}
	if err := c.openSession(ctx); err != nil { // proxy/session.go
		done(c.fail(err), err)
		return
	}
	if err := c.admit(ctx, c.estimate()); err != nil {
		c.refundSession()
		done(c.fail(err), err)
		return
	}
	o := c.serve(ctx)
	c.settle(context.WithoutCancel(ctx))
	c.closeSession()
	h.metrics.Overhead(c.door.name, c.strategy.Name(), c.provider.Name, time.Since(c.start)-c.upstreamWait)
	done(o, nil)
}

// twoStageOn is the middleware of the guard's routes: without a guard on
// this gateway they answer 501.
func (h *Handler) twoStageOn(g *gin.Context) {
	if h.twoStage == nil {
		h.refuseRoute(g, &chat.Error{Status: http.StatusNotImplemented, Type: chat.TypeInvalidRequest, Code: "two_stage_disabled",
			Message: "the two-stage protocol is not enabled on this gateway; use /v1/chat/completions or /standard/v1/chat/completions"})
		g.Abort()
		return
	}
	g.Next()
}

// chatRequest is one request on its way through the gateway: the chat
// completion request its door read. It is owned by one request.
type chatRequest struct {
	h    *Handler
	w    http.ResponseWriter
	r    *http.Request
	door *door
	// in is the request as its door read it; nil until then.
	in       doorRequest
	start    time.Time
	id       string
	log      *slog.Logger
	strategy protocol.Strategy
	// route is the protocol the request's route names, protocolDefault
	// for /v1; decision is what serves it (see decide).
	route    string
	decision decision
	provider *Provider
	x        *protocol.Exchange
	// reasoning remembers the reasoning of the response's tool calls for
	// DeepSeek's thinking mode; nil when the request is not in it.
	reasoning *reasoningRecorder
	// upstreamWait is the time spent waiting on upstream calls (see
	// timedUpstream); the rest of the request's time is the gateway's.
	upstreamWait time.Duration
	// firstToken reports that the first token reached the client and its
	// time was recorded.
	firstToken bool
	// trace is nil when tracing is off.
	trace *requestTrace
	// rates are the rate limits of the request; charged the tokens spent
	// of them before the call.
	rates   rateBudgets
	charged int
	// bodyBytes is the size of the request body.
	bodyBytes int
	// resumable reports that the stream opted in to be resumable;
	// resume is the wrapper of its sink once its log is open.
	resumable bool
	resume    *resumable
	// sess is the request's session; nil when it names none. sessActive
	// are the sessions the store held and had capped, as its last call
	// reported.
	sess       *sessionRun
	sessActive [2]int
	// ids is the identity of the response's chunks, across the guard
	// and the standard protocol that takes over from it.
	ids chunkIdentity
}

// close releases what the door's request holds.
func (c *chatRequest) close() {
	if c.in != nil {
		c.in.close()
	}
}

// prepare reads the request through its door and parses the chat
// completion request it became, routes it to its provider,
// decides its protocol, reads the guard's per-request limits and repairs
// it for thinking mode.
func (c *chatRequest) prepare() error {
	h := c.h
	in, err := c.door.read(h, c.w, c.r)
	if err != nil {
		return err
	}
	c.in = in
	body := in.chatBody()
	c.bodyBytes = len(body)
	if err := checkBody(body, h.cfg.Limits); err != nil {
		return err
	}
	req, err := chat.ParseRequest(body)
	if err != nil {
		return err
	}
	if err := checkShape(req, h.cfg.Limits); err != nil {
		return err
	}
	if c.resumable, err = h.resumable(c.r, req.Stream); err != nil {
		return err
	}
	c.provider = h.cfg.provider(req.Model)
	c.x = &protocol.Exchange{Request: req, RequestID: c.id, ProjectID: c.r.Header.Get("X-Project-Id"), History: req.Messages, Retry: h.cfg.Retry}
	c.decide(h.decide(c.route, c.r.Header, req, c.x.ProjectID))
	c.w.Header().Set("X-Phasegate-Provider", c.provider.Name)
	if err := c.judged(); err != nil {
		return err
	}
	if h.repairThinking(c.r.Context(), c.w, c.log, c.provider, req) {
		c.reasoning = &reasoningRecorder{ctx: context.WithoutCancel(c.r.Context()), mem: h.thinking, fail: func(err error) {
			h.metrics.StoreFailed(metrics.StoreReasoning)
			c.log.Warn("shared store failed; reasoning of this response not remembered", "error", err)
		}}
	}
	c.x.History = req.Messages
	return nil
}

// decide makes d the request's protocol decision: its strategy, its log
// fields and the headers that tell it (see decision.setHeaders).
func (c *chatRequest) decide(d decision) {
	c.decision, c.strategy = d, d.strategy
	req := c.x.Request
	c.log = c.log.With("model", req.Model, "provider", c.provider.Name, "protocol", d.strategy.Name(), "stream", req.Stream)
	d.setHeaders(c.w.Header())
}

// judged reads what the guard needs of a request it judges: its
// per-request limits, its envelope rule and the cost of its schemas; in
// observe mode the guard observes it here. A request the guard does not
// judge may not ask for an envelope, and its other guard headers are
// held to what they would be held to if it were judged: a wrong one is a
// 400 on every route, at a client's first request, not at the first that
// declares a tool.
func (c *chatRequest) judged() error {
	h, req := c.h, c.x.Request
	if !c.decision.judged {
		if mode, err := protocol.ParseEnvelopeMode(c.r.Header.Get(EnvelopeHeader)); err != nil || mode != protocol.EnvelopeOff {
			return chat.InvalidRequest(EnvelopeHeader, "header X-Phasegate-Envelope is served by the guard (/v1/chat/completions or /two-stage/v1/chat/completions); this route passes answers through as they are")
		}
		_, err := h.limits(c.r.Header, req.Model)
		return err
	}
	var err error
	if c.x.Limits, err = h.limits(c.r.Header, req.Model); err != nil {
		return err
	}
	if req.N > 1 && c.x.Limits.Envelope != protocol.EnvelopeOff && c.r.Header.Get(EnvelopeHeader) != "" {
		return chat.InvalidRequest("n", "header X-Phasegate-Envelope needs n = 1: the guard judges the envelope of a single choice")
	}
	if req.N <= 1 {
		if err := checkSchemaCost(req.Tools); err != nil {
			return err // only the guard compiles schemas
		}
	}
	if c.decision.observe {
		c.observe()
	}
	return nil
}

// fit makes the request fit its model's context window: oldest history
// dropped in whole units, oversized tool results shortened. What it did is
// told in the response headers.
func (c *chatRequest) fit() error {
	h := c.h
	if h.tokens == nil {
		return nil
	}
	capTokens, err := headerCount(c.r.Header, "X-Phasegate-Max-Prompt-Tokens")
	if err != nil {
		return err
	}
	tk := &tokenFit{c: h.tokens, capTokens: capTokens}
	req := c.x.Request
	f, err := tk.fit(req)
	if err != nil {
		return err
	}
	c.x.Tokens, c.x.Prompt = tk, protocol.Prompt{Counted: f.PromptTokens, Estimate: f.Estimate}
	if !f.Uncounted {
		c.w.Header().Set("X-Phasegate-Prompt-Tokens", strconv.Itoa(f.Estimate))
		if p, ok := c.in.(prompted); ok {
			p.prompt(f.Estimate)
		}
	}
	if f.DroppedMessages > 0 || f.Shortened > 0 {
		c.w.Header().Set("X-Phasegate-Dropped-Messages", strconv.Itoa(f.DroppedMessages))
		c.w.Header().Set("X-Phasegate-Dropped-Tokens", strconv.Itoa(f.DroppedTokens))
		c.w.Header().Set("X-Phasegate-Shortened-Tool-Results", strconv.Itoa(f.Shortened))
		h.metrics.Truncated(f.DroppedMessages, f.DroppedTokens, f.Shortened)
		c.log.Info("history truncated to fit the context window", "dropped_messages", f.DroppedMessages,
			"dropped_tokens", f.DroppedTokens, "shortened_tool_results", f.Shortened, "prompt_tokens", f.Estimate)
	}
	return nil
}

// serve runs the strategy and writes its events. A guard that failed
// before the client saw more than the opening chunk is replaced by the
// standard protocol, after that opening (a failing guard degrades to a
// plain proxy, and the failure is logged); nothing else is served twice.
func (c *chatRequest) serve(ctx context.Context) metrics.Outcome {
	h := c.h
	out, ctx, release := c.sink(ctx)
	defer release()
	store.EndSharedDeadline(ctx)
	out = c.sess.tallied(out, c.chargeSession)
	c.x.Meter = &requestMeter{m: h.metrics, door: c.door.name, provider: c.provider.Name, model: c.x.Request.Model, label: h.metrics.ModelLabel(c.x.Request.Model),
		tokens: h.tokens, learn: !c.provider.Simulated, trace: c.trace}
	if d := h.cfg.Timeouts.FirstByte; d > 0 {
		c.x.FirstByteBy = c.start.Add(d)
	}
	c.x.Upstream = c.upstream(c.provider, out)
	c.x.Fallback = c.fallback(out)
	defer func() { _ = out.flush() }() // whatever ended the response
	status, err := c.pump(ctx, c.strategy, out)
	if f := protocol.Classify(err); err != nil && f.Guard && (!out.committed() || !c.ids.said) {
		// Nothing went out, or nothing but an opening chunk: the standard
		// protocol takes over, after it and with its own opening left out.
		c.x.Opened = c.ids.opened && out.committed()
		c.log.Error("guard failed; serving through the standard protocol", "error", err)
		if h.tracer != nil {
			h.tracer.Trace(ctx, metrics.Trace{Kind: metrics.TraceFallback, RequestID: c.id, ProjectID: c.x.ProjectID, Reason: err.Error()})
		}
		h.metrics.Fallback()
		c.decision = c.decision.fallback(h.standard)
		c.decision.setHeaders(c.w.Header())
		status, err = c.pump(ctx, h.standard, out)
	}
	if err == nil {
		logServed(ctx, c.log, status, time.Since(c.start))
		return metrics.OutcomeOK
	}
	if errors.Is(context.Cause(ctx), ErrCancelled) && c.resume != nil {
		c.resume.cancelled()
		c.log.Info("stream cancelled; upstream closed", "duration_ms", millis(time.Since(c.start)))
		return metrics.OutcomeClientClosed
	}
	if cause := context.Cause(ctx); errors.Is(cause, protocol.ErrShuttingDown) {
		err = cause // the gateway ended the request, not the client or the upstream
	}
	if !out.committed() {
		if c.resume != nil {
			c.keepRefusal(protocol.Classify(err))
		}
		return c.fail(err)
	}
	f := protocol.Classify(err)
	if f.Error.Status == statusClientClosed {
		// An agent's user who stops an answer is routine, not a warning:
		// under load these were most of the warn lines.
		c.log.Info("client closed the stream", "error", err, "duration_ms", millis(time.Since(c.start)))
	} else {
		// One ending, as every stream: the in-band error, then [DONE].
		c.log.Warn("stream failed after start", "error", err, "code", f.Error.Code)
		out.fail(redactedError(f.Error, c.h.redactor))
		_ = out.done()
	}
	return f.Outcome
}

// sink is the door's sink of the request's events, and the context to
// run it under: a resumable stream runs detached from its client, its
// sink inside the resumable wrapper (see startResumable). release ends
// what the sink started.
func (c *chatRequest) sink(ctx context.Context) (sink, context.Context, func()) {
	if !c.x.Request.Stream {
		return c.in.sink(c.w, nil, false), ctx, func() {}
	}
	sw := newSSEWriter(c.w)
	sw.coalesce = true // the upstream's onWait flushes
	if !c.resumable {
		return c.in.sink(c.w, sw, false), ctx, func() {}
	}
	return c.startResumable(ctx, sw)
}

// keepRefusal keeps, in a resumable stream's log, the door's answer to f,
// a failure before the first event, for a resume to answer the same. The
// log keeps a JSON body: an upstream's error that is not JSON is kept as
// the door's own.
func (c *chatRequest) keepRefusal(f protocol.Failure) {
	a, ok := c.door.answerTo(f)
	if !ok {
		return
	}
	if f.Relay != nil && !json.Valid(a.body) {
		own, _ := c.door.answerTo(protocol.Failure{Error: f.Error})
		a.body = own.body
	}
	c.resume.refused(a.status, c.h.redactor.Bytes(a.body))
}

// upstream is the protocol.Upstream of this request on provider p.
func (c *chatRequest) upstream(p *Provider, out sink) protocol.Upstream {
	h := c.h
	return &timedUpstream{m: h.metrics, provider: p.Name, wait: &c.upstreamWait, trace: c.trace, next: &upstream{
		propagator:  h.propagator,
		client:      h.client,
		cfg:         &h.cfg,
		provider:    p,
		header:      forwardHeader(c.r.Header, h.forward),
		requestID:   c.id,
		onComment:   func(line []byte) { _ = out.comment(h.redactor.Bytes(line)) },
		onWait:      func() { _ = out.flush() }, // a failed write fails the next event's
		firstByteBy: c.x.FirstByteBy,
		committed:   out.committed,
	}}
}

// fallback is the request's fallback model, nil when none is configured
// for its model, or when it is on another provider for which the gateway
// holds no key: the client's own key goes only to the provider its model
// routes to.
func (c *chatRequest) fallback(out sink) *protocol.Fallback {
	for _, f := range c.h.cfg.Fallbacks {
		if !match(f.Pattern, c.x.Request.Model) {
			continue
		}
		p := c.h.cfg.provider(f.Model)
		if p.Name != c.provider.Name && p.APIKey == "" && !p.Simulated {
			return nil
		}
		return &protocol.Fallback{Model: f.Model, Upstream: c.upstream(p, out)}
	}
	return nil
}

// fail answers a request that failed before any byte was written, and
// returns its outcome.
func (c *chatRequest) fail(err error) metrics.Outcome {
	f := protocol.Classify(err)
	status := f.Error.Status
	if f.Relay != nil {
		status = f.Relay.Status
	}
	level := slog.LevelWarn
	if status == statusClientClosed || status < 500 {
		level = slog.LevelInfo
	}
	c.log.Log(context.Background(), level, "request failed", "status", status, "error", err, "duration_ms", millis(time.Since(c.start)))
	c.door.refuse(c.w, f)
	return f.Outcome
}

// pump writes the events of one strategy run to out, tells c.reasoning
// (when set) what the response said and records the time of the first
// token. It returns the status written and the error that ended the run,
// if any.
func (c *chatRequest) pump(ctx context.Context, strategy protocol.Strategy, out sink) (int, error) {
	rec := c.reasoning
	ids := &c.ids
	if c.door.identity && strategy.Name() != c.h.standard.Name() {
		ids.ident = newIdentity(c.x.Request.Model)
	}
	// A whole answer takes its id, created time and model from its first
	// chunk alone: the others need none.
	ids.firstOnly = !c.x.Request.Stream
	identify(out, ids.ident)
	for ev, err := range strategy.Run(ctx, c.x) {
		if err != nil {
			return 0, err
		}
		var werr error
		switch ev.Kind {
		case protocol.KindStart:
			out.header(ev.Header)
		case protocol.KindChunk:
			rec.chunk(ev.Data)
			c.trace.written(ev.Data)
			ids.next(out, ev, c.door.identity, c.x.Request.Model)
			werr = out.chunk(ev.Data, ev.Ext)
			if !c.firstToken && werr == nil && out.committed() && chat.HasToken(ev.Data) {
				c.tokenWritten()
			}
		case protocol.KindDone:
			ids.said = true
			rec.remember()
			werr = out.done()
		case protocol.KindResponse:
			_ = out.whole(ev.Status, ev.Header, ev.Data) // a failed write means the client left; the status stands
			if ev.Status == http.StatusOK {
				rec.whole(ev.Data)
				c.trace.written(ev.Data)
				c.tokenWritten()
			}
			return ev.Status, nil
		}
		if werr != nil {
			var ge *protocol.GuardError
			if errors.As(werr, &ge) {
				return 0, werr
			}
			// The client is gone; leaving the range closes the upstream.
			return statusClientClosed, fmt.Errorf("write to the client: %w", protocol.ErrClientGone)
		}
	}
	if err := out.finish(); err != nil {
		return 0, &protocol.GuardError{Err: err}
	}
	c.tokenWritten() // a stream's first token came before; a whole answer's is now
	return http.StatusOK, nil
}

// chunkIdentity is the identity of one response's chunks. The guard's
// chunks all get one (ident is set from the start); the standard protocol
// forwards one answer as it came, and only an answer asked again after the
// client got the first one's opening chunk (Event.Again) takes that
// chunk's id, created time and model.
type chunkIdentity struct {
	ident *identity
	first []byte // the first chunk written, while ident is nil
	// opened is that an opening chunk was written, said that more was.
	opened, said bool
	// firstOnly gives only the first chunk the identity.
	firstOnly bool
}

// next readies out to write the chunk of ev with the response's identity:
// it stops giving one after the first chunk of a whole answer, and mints
// one, taught by the first chunk written, for an answer asked again.
func (c *chunkIdentity) next(out sink, ev protocol.Event, door bool, model string) {
	first := !c.opened && !c.said
	c.opened = c.opened || ev.Opening
	c.said = c.said || !ev.Opening
	if c.firstOnly && !first {
		if c.ident != nil {
			c.ident = nil
			identify(out, nil)
		}
		return
	}
	if c.ident == nil && ev.Again && door && c.first != nil {
		c.ident = newIdentity(model)
		c.ident.appendChunk(nil, c.first, nil) // learns the first chunk's identity
		identify(out, c.ident)
	}
	if c.ident == nil && c.first == nil {
		c.first = ev.Data
	}
}

// estimate is the prompt's token count for the rate limits: the fitted
// count, or four bytes a token of the body without a tokenizer.
func (c *chatRequest) estimate() int {
	if c.x.Prompt.Estimate > 0 {
		return c.x.Prompt.Estimate
	}
	return c.bodyBytes / 4
}

// tokenWritten records the time to the first token, once.
func (c *chatRequest) tokenWritten() {
	if !c.firstToken {
		c.firstToken = true
		c.h.metrics.FirstToken(c.door.name, c.strategy.Name(), c.provider.Name, time.Since(c.start))
	}
}

// headerCount reads a header that holds a whole number of 1 or more; 0
// when it is absent, a 400 when it is anything else.
func headerCount(hdr http.Header, name string) (int, error) {
	v := hdr.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, chat.InvalidRequest(name, "header %s must be a whole number of 1 or more, got %q", name, v)
	}
	return n, nil
}

// limits reads the per-request budget headers and the envelope rule. The
// budgets may only lower the configured ones (the guard takes the smaller
// value); the envelope header replaces the model's configured rule.
func (h *Handler) limits(hdr http.Header, model string) (protocol.Limits, error) {
	var l protocol.Limits
	var err error
	if l.Envelope, err = h.envelopeMode(hdr, model); err != nil {
		return l, err
	}
	if l.MaxPhaseCycles, err = headerCount(hdr, "X-Phasegate-Max-Phase-Cycles"); err != nil {
		return l, err
	}
	if l.MaxDuplicateAttempts, err = headerCount(hdr, "X-Phasegate-Max-Duplicate-Attempts"); err != nil {
		return l, err
	}
	if l.Profile, err = h.guardProfile(hdr, model); err != nil {
		return l, err
	}
	switch v := hdr.Get(RulesNoticeHeader); v {
	case "", "false":
	case "true":
		l.RulesNotice = true
	default:
		return l, chat.InvalidRequest(RulesNoticeHeader, "header %s must be true or false, got %q", RulesNoticeHeader, v)
	}
	switch mode := hdr.Get("X-Phasegate-Mode"); mode {
	case "", "act":
	case "plan":
		if !h.planMode {
			return l, chat.InvalidRequest("X-Phasegate-Mode", "plan mode is not configured on this gateway (PLAN_TOOLS is empty)")
		}
		l.Plan = true
	default:
		return l, chat.InvalidRequest("X-Phasegate-Mode", "header X-Phasegate-Mode must be plan or act, got %q", mode)
	}
	return l, nil
}

// envelopeMode is the request's X-Phasegate-Envelope header, else the
// rule configured for its model.
func (h *Handler) envelopeMode(hdr http.Header, model string) (protocol.EnvelopeMode, error) {
	if v := hdr.Get(EnvelopeHeader); v != "" {
		m, err := protocol.ParseEnvelopeMode(v)
		if err != nil {
			return m, chat.InvalidRequest(EnvelopeHeader, "header X-Phasegate-Envelope %s", err)
		}
		return m, nil
	}
	for _, r := range h.cfg.Envelopes {
		if match(r.Pattern, model) {
			return r.Mode, nil
		}
	}
	return protocol.EnvelopeOff, nil
}

// millis is d in milliseconds, to the microsecond: durations are logged
// with the unit in the key (duration_ms), never as bare nanoseconds.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// logServed writes the line of a request served, as l.Info would, but
// without the caller's program counter that slog.Logger takes with
// runtime.Callers for every line: no handler of the gateway writes the
// source, and this line is written for every request.
func logServed(ctx context.Context, l *slog.Logger, status int, d time.Duration) {
	if !l.Enabled(ctx, slog.LevelInfo) {
		return
	}
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "request served", 0)
	r.AddAttrs(slog.Int("status", status), slog.Float64("duration_ms", millis(d)))
	_ = l.Handler().Handle(ctx, r)
}
