// Command phasegate-load drives concurrent streamed agent requests through a
// gateway to the scripted upstream double (e2e/upstreamdouble), both running
// as processes of their own on 127.0.0.1, and reports what the gateway
// added: errors by kind, latency, CPU per request, memory per open stream,
// and whether its goroutines and memory came back once the load stopped.
//
// By default it builds both binaries with `go build` (run it inside the
// module) and starts them; -gateway and -upstream take a binary to start or
// the loopback address of one already running. Every address must be a
// loopback one. A run is bounded by -duration and -max-requests, each request
// by -request-timeout, and the wait for the gateway to settle by -settle.
//
//	go run ./cmd/phasegate-load -concurrency 500 -duration 60s
//
// It exits 1 when the errors exceed -max-errors or the gateway's goroutines,
// live Go heap or RSS outside the Go heap did not come back within -settle,
// 2 on bad flags. The plain RSS is reported, not judged: the Go runtime
// keeps freed heap resident for reuse, up to about its heap goal.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	var fail failedError
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.As(err, &fail):
		fmt.Fprintln(os.Stderr, "phasegate-load: FAIL:", err)
		os.Exit(1)
	case err != nil:
		fmt.Fprintln(os.Stderr, "phasegate-load:", err)
		os.Exit(2)
	}
}

// failedError is a run that finished but missed a target.
type failedError struct{ reasons []string }

func (e failedError) Error() string { return fmt.Sprint(e.reasons) }

// config is the run's flags.
type config struct {
	concurrency    int
	duration       time.Duration
	maxRequests    int
	disconnect     float64 // share of requests whose client leaves mid-stream
	slow           float64 // share of requests read slowly
	slowDelay      time.Duration
	tool           float64 // share of requests answered with a tool call
	hostile        float64 // share of hostile requests (hostile.go)
	bodyTimeout    time.Duration
	maxRSSMiB      float64
	direct         time.Duration
	requestTimeout time.Duration
	sample         time.Duration
	settle         time.Duration
	gateway        string
	upstream       string
	pid            int
	maxErrors      int
	goroutineSlack int
	heapSlackMiB   float64
	rssSlackMiB    float64
	seed           uint64
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("phasegate-load", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&c.concurrency, "concurrency", 100, "concurrent streams")
	fs.DurationVar(&c.duration, "duration", 30*time.Second, "how long new requests are started through the gateway")
	fs.IntVar(&c.maxRequests, "max-requests", 200000, "most requests started through the gateway")
	fs.Float64Var(&c.disconnect, "disconnect", 0.1, "share of requests whose client hangs up at a random point of the stream")
	fs.Float64Var(&c.slow, "slow", 0.1, "share of requests read slowly (-slow-delay after every event)")
	fs.DurationVar(&c.slowDelay, "slow-delay", 40*time.Millisecond, "pause of a slow reader after each event")
	fs.Float64Var(&c.tool, "tool", 0.5, "share of requests answered with a tool call (the rest with text)")
	fs.Float64Var(&c.hostile, "hostile", 0, "share of hostile requests, each in turn a tool schema of 200 KiB of x{0,1000} patterns, 500,000 tiny messages, or a body trickled a byte a second; each must get the error it is owed (400, 400, 408; or 503 past MAX_INFLIGHT_BYTES)")
	fs.DurationVar(&c.bodyTimeout, "body-read-timeout", 5*time.Second, "BODY_READ_TIMEOUT of the gateway started")
	fs.Float64Var(&c.maxRSSMiB, "max-rss", 0, "most the gateway's peak RSS (VmHWM) may reach, in MiB; 0 reports it unjudged")
	fs.DurationVar(&c.direct, "direct", 15*time.Second, "how long the load, every client reading in full, goes straight to the double first, for the latency the gateway adds; 0 skips it")
	fs.DurationVar(&c.requestTimeout, "request-timeout", 60*time.Second, "bound on one request")
	fs.DurationVar(&c.sample, "sample", 5*time.Second, "interval of the gateway's RSS and goroutine samples")
	fs.DurationVar(&c.settle, "settle", 150*time.Second, "longest wait, after the load, for goroutines, heap and RSS to come back (idle upstream connections close after 90 s; the runtime collects at least every 2 min)")
	fs.StringVar(&c.gateway, "gateway", "", "gateway binary to start, or the loopback address of a running one; empty builds ./cmd/phasegate")
	fs.StringVar(&c.upstream, "upstream", "", "upstream double binary to start, or the loopback address of a running one; empty builds ./e2e/upstreamdouble")
	fs.IntVar(&c.pid, "pid", 0, "process id of a running gateway given by address, for its CPU and RSS")
	fs.IntVar(&c.maxErrors, "max-errors", 0, "errors allowed (intended disconnects are not errors)")
	fs.IntVar(&c.goroutineSlack, "goroutine-slack", 20, "goroutines above the idle count still counted as back")
	fs.Float64Var(&c.heapSlackMiB, "heap-slack", 8, "live Go heap above the idle figure, in MiB, still counted as back (as the last garbage collection found it, once one ran after the load)")
	fs.Float64Var(&c.rssSlackMiB, "rss-slack", 32, "RSS outside the Go heap (RSS less the heap in use and the free heap the runtime keeps), above the same at idle, in MiB, still counted as back")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the random choices")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.concurrency < 1 || c.maxRequests < 1:
		return c, errors.New("-concurrency and -max-requests must be at least 1")
	case c.duration <= 0 || c.requestTimeout <= 0 || c.sample <= 0:
		return c, errors.New("-duration, -request-timeout and -sample must be positive")
	case c.disconnect < 0 || c.slow < 0 || c.tool < 0 || c.disconnect+c.slow > 1 || c.tool > 1 || c.hostile < 0 || c.hostile > 1:
		return c, errors.New("-disconnect, -slow, -tool and -hostile are shares in [0, 1], -disconnect plus -slow at most 1")
	}
	return c, nil
}

func run(ctx context.Context, args []string, out io.Writer) error {
	cfg, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	st, err := startStack(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.close(out)
	fmt.Fprintf(out, "gateway %s (pid %d), upstream double %s\n", st.gatewayURL, st.pid, st.upstreamURL)

	var direct *results
	if cfg.direct > 0 {
		fmt.Fprintf(out, "direct to the double: %d streams for %s\n", cfg.concurrency, cfg.direct)
		d := cfg
		d.duration, d.disconnect, d.slow = cfg.direct, 0, 0
		direct = drive(ctx, d, st.upstreamURL)
	}
	if err := warmUp(ctx, cfg, st.gatewayURL); err != nil {
		return err
	}
	rep, err := measure(ctx, cfg, st, out)
	if err != nil {
		return err
	}
	rep.direct = direct
	rep.print(out, cfg)
	return rep.verdict(cfg)
}
