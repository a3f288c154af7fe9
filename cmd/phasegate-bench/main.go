// Command phasegate-bench measures what the gateway costs, whole process
// against whole process: the gateway, a fast mock upstream and the load
// driver each run as a process of their own on 127.0.0.1, and the
// gateway's CPU is read from /proc/PID/stat before and after each case.
// Every case — a scenario at a concurrency — is run straight to the mock
// and through the gateway's routes (/standard, /v1 without tools, /v1 with
// tools declared), the routes interleaved within each round, and the
// figures reported are the medians of the rounds.
//
//	go run ./cmd/phasegate-bench -rounds 3
//
// By default it builds the gateway (run it inside the module); -gateway
// takes a binary. With -pin (the default when taskset(1) is found and the
// machine has two CPUs or more) the gateway runs on the last CPU, the mock
// and the driver on the others. A run is bounded by -max-duration, each
// request by -request-timeout. It exits 1 when a request failed, 2 on bad
// flags. Run as "phasegate-bench mock", it is the mock upstream: it prints
// its URL and serves until its standard input closes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "mock" {
		if err := serveMock(); err != nil {
			fmt.Fprintln(os.Stderr, "phasegate-bench mock:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errFailed):
		fmt.Fprintln(os.Stderr, "phasegate-bench:", err)
		os.Exit(1)
	case err != nil:
		fmt.Fprintln(os.Stderr, "phasegate-bench:", err)
		os.Exit(2)
	}
}

// errFailed is a run whose requests did not all succeed.
var errFailed = errors.New("requests failed")

type config struct {
	rounds         int
	scale          float64
	cases          string
	gateway        string
	pin            bool
	maxDuration    time.Duration
	requestTimeout time.Duration
	env            []string
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	var env string
	fs := flag.NewFlagSet("phasegate-bench", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&c.rounds, "rounds", 3, "rounds; every case runs on every route once per round")
	fs.Float64Var(&c.scale, "scale", 1, "factor on the requests of every case")
	fs.StringVar(&c.cases, "cases", "", "comma-separated case names to run (e.g. small-c1,stream-c32); empty runs all")
	fs.StringVar(&c.gateway, "gateway", "", "gateway binary; empty builds ./cmd/phasegate")
	_, err := exec.LookPath("taskset")
	fs.BoolVar(&c.pin, "pin", err == nil && runtime.NumCPU() >= 2, "run the gateway on a CPU of its own, with taskset")
	fs.DurationVar(&c.maxDuration, "max-duration", 20*time.Minute, "bound on the whole run")
	fs.DurationVar(&c.requestTimeout, "request-timeout", 30*time.Second, "bound on one request")
	fs.StringVar(&env, "env", "", "comma-separated NAME=VALUE settings added to the gateway's environment")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if env != "" {
		c.env = strings.Split(env, ",")
	}
	if c.rounds < 1 || c.scale <= 0 || c.maxDuration <= 0 || c.requestTimeout <= 0 {
		return c, errors.New("-rounds, -scale, -max-duration and -request-timeout must be positive")
	}
	return c, nil
}

func run(ctx context.Context, args []string, out io.Writer) error {
	cfg, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.maxDuration)
	defer cancel()
	cases, err := pickCases(cfg)
	if err != nil {
		return err
	}
	st, err := startStack(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.close()
	fmt.Fprintf(out, "gateway %s (pid %d), mock %s (pid %d), pinned %v, %d CPUs\n", st.gatewayURL, st.gatewayPID, st.mockURL, st.mockPID, cfg.pin, runtime.NumCPU())
	rep := &report{idleStart: rssOf(st.gatewayPID)}
	if err := warmUp(ctx, cfg, st); err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // let the warm-up's garbage go
	rep.idle = rssOf(st.gatewayPID)
	for round := range cfg.rounds {
		for _, c := range cases {
			for _, t := range c.targets() {
				m, err := measure(ctx, cfg, st, c, t)
				if err != nil {
					return fmt.Errorf("round %d, %s via %s: %w", round+1, c.name, t.name, err)
				}
				rep.add(c, t, m)
			}
		}
	}
	rep.peak = hwmOf(st.gatewayPID)
	rep.print(out, cases)
	return rep.verdict()
}
