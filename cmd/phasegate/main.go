// Command phasegate is an OpenAI-compatible gateway that guards agent tool
// loops. Run it with no configuration to serve the built-in simulated
// model; `phasegate --help` lists every setting.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/term"

	"github.com/phasegate/phasegate/deepseek"
	"github.com/phasegate/phasegate/internal/gather"
	"github.com/phasegate/phasegate/internal/redact"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/sim"
	"github.com/phasegate/phasegate/store"
	"github.com/phasegate/phasegate/tracing"
)

const (
	simProvider = "simulated"
	simBaseURL  = sim.BaseURL
)

// ownsDefaultLog is set when run serves the process, not a test: the
// default loggers of the log and slog packages are then the gateway's.
var ownsDefaultLog bool

func main() {
	ctx, stop := signalContext(isTerminal(os.Stdin))
	defer stop()
	ownsDefaultLog = true
	ownsCollector = os.Getenv("GOGC") == ""
	proxy.ReleaseMode()
	logRedisRetriesAtDebug()
	if err := dispatch(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		// One line per problem, each naming the setting as it was written.
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(os.Stderr, "phasegate:", line)
		}
		os.Exit(1)
	}
}

// errInteractiveInterrupt is the cause of a run's end when Ctrl-C was
// pressed in a terminal: a person waits, no load balancer does, so the
// drain delay is skipped.
var errInteractiveInterrupt = errors.New("interrupted in a terminal")

// signalContext is a context that SIGTERM or SIGINT ends, with
// errInteractiveInterrupt as its cause for a SIGINT when interactive.
// Only the first signal is graceful: once it came, the default handling
// is back, so a second one ends the process at once, whatever it was
// waiting for. stop releases the signals.
func signalContext(interactive bool) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			signal.Stop(sigs)
			cause := fmt.Errorf("signal %v", sig)
			if interactive && sig == os.Interrupt {
				cause = errInteractiveInterrupt
			}
			cancel(cause)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

// isTerminal reports whether f is a terminal, as stdin is when a person
// started the gateway by hand; the null device, the stdin of a process
// started with none (by a container engine, a service manager, exec.Cmd),
// is not one.
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// dispatch runs the subcommand args name: the gateway by default, demo,
// healthcheck, or help. A request for help or the version is answered on stdout and is no
// error.
func dispatch(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var err error
	switch {
	case len(args) > 0 && args[0] == "demo":
		err = runDemo(ctx, args[1:], getenv, stdout, stderr)
	case len(args) == 1 && args[0] == "version":
		_, err = fmt.Fprintln(stdout, versionLine())
	case len(args) > 0 && args[0] == "healthcheck":
		err = runHealthcheck(ctx, args[1:], getenv, stdout)
	case len(args) > 0 && args[0] == "help":
		switch {
		case len(args) > 1 && args[1] == "demo":
			_, err = parseOptions(demoCommand, []string{"--help"}, getenv, stdout)
		case len(args) > 1 && args[1] == "healthcheck":
			err = runHealthcheck(ctx, []string{"--help"}, getenv, stdout)
		default:
			_, err = parseOptions(serveCommand, []string{"--help"}, getenv, stdout)
		}
	default:
		err = run(ctx, args, getenv, stdout, stderr, runHooks{logDelay: gather.DefaultDelay})
	}
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// runHooks are what a caller of run may set beyond the environment; each
// run has its own, so runs side by side do not share them.
type runHooks struct {
	// listening, when set, is told the address the server listens on.
	listening func(net.Addr)
	// adminListening, when set, is told the address the admin routes
	// listen on (ADMIN_LISTEN_ADDR).
	adminListening func(net.Addr)
	// logDelay is how long a log line waits to be written with others.
	logDelay time.Duration
}

// readHeaderTimeout bounds the wait for a request's headers, so a client
// that opens a connection and never finishes its headers cannot hold it.
// Tests lower it.
var readHeaderTimeout = 10 * time.Second

// run serves until ctx ends, then shuts down gracefully: /readyz answers
// 503 for the drain delay while the listener still accepts and serves, so
// a load balancer takes the gateway out of rotation before connections are
// refused; then the listener closes and in-flight requests get the
// shutdown timeout to finish.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, hooks runHooks) error {
	o, err := parseOptions(serveCommand, args, getenv, stdout)
	if err != nil {
		return err
	}
	// Log lines are gathered and written together, a request's several
	// lines in one write; the deferred Close, run's last, writes those
	// still waiting when the gateway stops.
	logOut := gather.New(stderr, hooks.logDelay)
	defer logOut.Close()
	log := newLogger(logOut, o.LogLevel, o.Redactor)
	if ownsDefaultLog {
		// What net/http, httputil and go-redis log (an upstream's stray
		// bytes, quoted) goes through the same redaction, as JSON lines.
		slog.SetDefault(log)
	}
	tp, stopTracing, err := startTracing(ctx, getenv, stderr, log, o.Redactor)
	if err != nil {
		return err
	}
	defer stopTracing()
	h, closeShared, err := newHandler(ctx, o, log, tp)
	if err != nil {
		return err
	}
	defer closeShared()
	if o.AdminAddr != "" {
		stopAdmin, err := serveAdmin(o.AdminAddr, h, log, hooks.adminListening)
		if err != nil {
			return err
		}
		defer stopAdmin()
	}
	ln, err := net.Listen("tcp", o.ListenAddr)
	if err != nil {
		return listenError(o, err)
	}
	// The start's log lines, which whoever started the gateway waits
	// for, go out before the first request.
	started := func() {
		_ = logOut.Flush()
		if hooks.listening != nil {
			hooks.listening(ln.Addr())
		}
	}
	return serve(ctx, o, h, ln, log, started)
}

// serve serves h on ln until ctx ends, then drains and shuts down. started
// is called once the start is logged, before the first request is served.
func serve(ctx context.Context, o options, h *proxy.Handler, ln net.Listener, log *slog.Logger, started func()) error {
	// Requests run under a context the shutdown can end with a cause, so a
	// stream still running when the grace is spent ends with an in-band
	// error and [DONE] rather than a cut connection.
	base, endRequests := context.WithCancelCause(context.WithoutCancel(ctx))
	defer endRequests(nil)
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return base },
		// No WriteTimeout: it would cut long streams. Each request is
		// bounded by REQUEST_TIMEOUT instead.
	}
	logStart(log, o, ln.Addr())
	started()

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	h.Drain()
	delay := o.DrainDelay
	if errors.Is(context.Cause(ctx), errInteractiveInterrupt) {
		// The drain delay is for a load balancer, not a person at a
		// terminal.
		delay = 0
	}
	log.Info("draining: /readyz answers 503 until the listener closes", "delay", delay.String())
	select {
	case <-time.After(delay):
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("shutting down", "grace", o.ShutdownTimeout.String())
	shutdown(srv, o.ShutdownTimeout, endRequests, log)
	<-served
	return nil
}

// shutdown closes the listener and waits grace for in-flight requests;
// then it ends those left with ErrShuttingDown, which they answer in-band,
// and gives them a moment to write it before the connections close.
func shutdown(srv *http.Server, grace time.Duration, endRequests context.CancelCauseFunc, log *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err == nil {
		return
	}
	log.Warn("shutdown grace ran out; ending the requests left", "grace", grace.String())
	endRequests(protocol.ErrShuttingDown)
	fctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Shutdown(fctx); err != nil {
		_ = srv.Close()
	}
}

// startTracing starts tracing when the OTEL_* variables ask for it; stop
// flushes the last spans, within its own bound since the signal that ends
// the gateway has ended ctx. tp is nil when tracing is off.
func startTracing(ctx context.Context, getenv func(string) string, stderr io.Writer, log *slog.Logger, red *redact.Redactor) (tp *sdktrace.TracerProvider, stop func(), err error) {
	tp, err = tracing.FromEnv(ctx, getenv, stderr, red)
	if err != nil || tp == nil {
		return nil, func() {}, err
	}
	log.Info("tracing on: spans are exported as the OTEL_* environment variables say")
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("tracing shutdown", "error", err)
		}
	}, nil
}

// serveAdmin serves the admin routes (/metrics, /debug/, health) on a
// listener of their own until stop is called, after the client routes
// shut down: an operator still sees /readyz answer 503 while they drain.
// listening, when set, is told the address they listen on.
func serveAdmin(addr string, h *proxy.Handler, log *slog.Logger, listening func(net.Addr)) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on ADMIN_LISTEN_ADDR: %w", err)
	}
	srv := &http.Server{Handler: h.Admin(), ReadHeaderTimeout: readHeaderTimeout}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // ErrServerClosed once stopped
	}()
	log.Info("admin routes listening", "addr", ln.Addr().String())
	if listening != nil {
		listening(ln.Addr())
	}
	return func() {
		_ = srv.Close()
		<-done
	}, nil
}

// The bounds of the recent requests' trace events the admin route serves:
// at most 64 events of each of the last 1000 requests, a few MB at most.
const (
	recentRequests = 1000
	recentEvents   = 64
)

// newHandler builds the gateway of o; tp, when not nil, traces it. The
// returned func releases the shared store, once the server is done.
func newHandler(ctx context.Context, o options, log *slog.Logger, tp *sdktrace.TracerProvider) (*proxy.Handler, func(), error) {
	tr := http.RoundTripper(proxy.NewTransport(o.Proxy.Timeouts))
	if o.Simulated {
		tr = &sim.Transport{Handler: sim.Handler(), Next: tr}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	names := make([]string, 0, len(o.Proxy.Providers))
	for _, p := range o.Proxy.Providers {
		names = append(names, p.Name)
	}
	models := make([]string, 0, len(o.Tokens.Models))
	for name := range o.Tokens.Models {
		models = append(models, name)
	}
	sort.Strings(models)
	m := metrics.New(reg, names, models...)
	counter, err := newCounter(o.Tokens)
	if err != nil {
		return nil, nil, fmt.Errorf("token counter: %w", err)
	}
	metrics.RegisterTokenRatios(reg, models, counter.Ratio)
	opts := proxy.Options{Logger: log, Transport: tr, DefaultProtocol: o.DefaultProtocol,
		PlanMode: len(o.PlanTools) > 0, Metrics: m, Gatherer: reg, Tokens: counter, Redactor: o.Redactor}
	tracer := setTracers(o, log, tp, &opts)
	if o.ThinkingRepair {
		opts.Thinking = proxy.LocalReasoning(deepseek.NewReasoningMemory(o.ThinkingBytes, o.ThinkingTTL))
	}
	opts.Sessions = store.NewMemorySessions(o.SessionMemoryBytes, store.DefaultMaxSessions)
	closeRedis, err := openShared(ctx, o, log, &opts)
	if err != nil {
		return nil, nil, err
	}
	if o.TwoStage {
		opts.TwoStage = protocol.NewTwoStage(protocol.TwoStageConfig{
			MaxPhaseCycles:       o.MaxPhaseCycles,
			MaxDuplicateAttempts: o.MaxDuplicateAttempts,
			HideNotices:          !o.ShowNotices,
			RulesNotice:          o.RulesNotice,
			WholeAnswers:         o.WholeAnswers,
			PlanTools:            o.PlanTools,
			RepeatableTools:      o.RepeatableTools,
			Profile:              o.Profile,
			AgentMaxPhaseCycles:  o.AgentMaxPhaseCycles,
			StrictDuplicates:     o.StrictDuplicates,
			MaxFailingStreak:     o.MaxFailingStreak,
			Envelopes:            o.Envelopes,
			MaxEnvelopeRetries:   o.EnvelopeRetries,
			Metrics:              m,
		}, tracer)
	}
	h, err := proxy.New(o.Proxy, opts)
	if err != nil {
		closeRedis()
		return nil, nil, err
	}
	return h, func() { h.Close(); closeRedis() }, nil
}

// setTracers sets where the trace events of a request go: the log, the
// spans of tp when set, and the recent requests of the admin routes when
// they are open. It returns the tracer the guard reports to.
func setTracers(o options, log *slog.Logger, tp *sdktrace.TracerProvider, opts *proxy.Options) protocol.Tracer {
	tracers := metrics.Tracers{metrics.NewTraceLog(log)}
	if tp != nil {
		opts.TracerProvider = tp
		tracers = append(tracers, tracing.SpanEvents{})
	}
	if o.Proxy.AdminAPIKey != "" {
		opts.Recent = metrics.NewRecent(recentRequests, recentEvents)
		tracers = append(tracers, opts.Recent)
	}
	var tracer protocol.Tracer = tracers
	if len(tracers) == 1 {
		tracer = tracers[0]
	}
	opts.Tracer = tracer
	return tracer
}

// openShared puts the state replicas share on the Redis of REDIS_URL, when
// set. A Redis that does not answer at start is logged, not fatal: each
// feature degrades as documented until it does.
func openShared(ctx context.Context, o options, log *slog.Logger, opts *proxy.Options) (func(), error) {
	if o.RedisURL == "" {
		return func() {}, nil
	}
	r, err := store.OpenRedisWith(o.RedisURL.Reveal(), store.RedisOptions{Timeout: o.RedisTimeout, BreakerCooldown: o.RedisCooldown, Observer: opts.Metrics, Logger: log})
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := r.Ping(pingCtx); err != nil {
		log.Warn("Redis does not answer; shared state degrades until it does", "error", err)
	} else {
		log.Info("shared state on Redis")
	}
	if opts.Thinking != nil {
		opts.Thinking = store.NewReasoning(r, o.ThinkingBytes, o.ThinkingTTL)
	}
	opts.Limiter = store.NewRedisLimiter(r)
	opts.Sessions = store.NewRedisSessions(r)
	opts.Streams = store.NewRedisStreams(r, o.Proxy.WithDefaults().Resume.TTL)
	opts.Responses = store.NewRedisResponses(r, o.Proxy.WithDefaults().ResponsesTTL, proxy.DefaultResponsesMemoryBytes)
	return func() { _ = r.Close() }, nil
}

// newLogger returns the gateway's logger. Every line goes through red: a
// key that slipped into an upstream error message or a header value
// never reaches a log.
func newLogger(w io.Writer, level string, red *redact.Redactor) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level)) // validated by parseOptions
	return slog.New(redact.Handler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}), red))
}
