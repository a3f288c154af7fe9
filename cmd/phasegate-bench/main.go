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
// takes a binary, and repeated, builds to compare side by side in one run
// (-gateway old=/tmp/phasegate-old -gateway new=build): each gets the
// three routes, named after it. -peer NAME=CMD starts another gateway
// beside them (lean Bifrost, say), measured on its chat completions
// route, with a column of each route's CPU over the first peer's. With -pin (the default when taskset(1) is found and the
// machine has two CPUs or more) the gateway runs on the last CPU, the mock
// and the driver on the others. A run is bounded by -max-duration, each
// request by -request-timeout. It exits 1 when a request failed or a
// phasegate gateway cut an answer as degenerate text (its
// phasegate_degenerate_text_total above 0: a case would then measure the
// cut and the answer asked again), 2 on bad flags or a gateway that could
// not be started or read. Run as "phasegate-bench mock", it is the mock upstream: it prints
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

// errFailed is a run whose requests did not all succeed, or whose
// answers were not all the answers the cases measure.
var errFailed = errors.New("requests failed")

type config struct {
	rounds         int
	scale          float64
	cases          string
	gateways       []binary // the phasegate builds measured, side by side
	peers          []binary // other gateways measured beside them
	peerModel      string
	peerHeaders    [][2]string // name and value; $UPSTREAM_URL is expanded
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
	fs.Func("gateway", "gateway binary, [NAME=]BINARY; repeat it to measure builds side by side (e.g. old=/tmp/phasegate-old -gateway new=build); \"build\" or none builds ./cmd/phasegate", func(v string) error {
		b, err := parseBinary(v, len(c.gateways))
		c.gateways = append(c.gateways, b)
		return err
	})
	fs.Func("peer", "another OpenAI-compatible gateway measured beside, NAME=CMD; CMD runs under sh with PEER_ADDR (host:port to listen on), PEER_PORT and UPSTREAM_URL (the mock's base URL, with /v1) set, and must serve POST /v1/chat/completions there; repeatable", func(v string) error {
		name, cmd, ok := strings.Cut(v, "=")
		if !ok || name == "" || cmd == "" {
			return errors.New("want NAME=CMD")
		}
		c.peers = append(c.peers, binary{name: name, path: cmd})
		return nil
	})
	fs.Func("peer-header", "a header sent to the peers, \"Name: value\"; $UPSTREAM_URL in the value is the mock's base URL (a peer may route by headers, as Portkey's gateway does with x-portkey-provider and x-portkey-custom-host); repeatable", func(v string) error {
		name, value, ok := strings.Cut(v, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return errors.New("want \"Name: value\"")
		}
		c.peerHeaders = append(c.peerHeaders, [2]string{strings.TrimSpace(name), strings.TrimSpace(value)})
		return nil
	})
	fs.StringVar(&c.peerModel, "peer-model", "", "model name sent to the peers (a peer may want a provider prefix, as openai/gpt-4o); empty sends gpt-4o")
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
	if len(c.gateways) == 0 {
		c.gateways = []binary{{}}
	}
	if len(c.gateways) > 1 {
		for _, g := range c.gateways {
			if g.name == "" {
				return c, errors.New("-gateway: name each of several gateways, NAME=BINARY")
			}
		}
	}
	if c.rounds < 1 || c.scale <= 0 || c.maxDuration <= 0 || c.requestTimeout <= 0 {
		return c, errors.New("-rounds, -scale, -max-duration and -request-timeout must be positive")
	}
	return c, nil
}

// binary is a gateway to start: a name (for the table's routes) and a
// binary, or a peer's command line.
type binary struct {
	name, path string // path "" builds ./cmd/phasegate
}

func parseBinary(v string, n int) (binary, error) {
	name, path, ok := strings.Cut(v, "=")
	if !ok {
		name, path = "", v
	}
	if path == "build" {
		path = ""
	}
	if ok && name == "" {
		return binary{}, fmt.Errorf("gateway %d: empty name", n+1)
	}
	return binary{name: name, path: path}, nil
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
	for _, sv := range st.servers {
		fmt.Fprintf(out, "%s %s (pid %d)\n", sv.label(), sv.url, sv.pid)
	}
	fmt.Fprintf(out, "mock %s (pid %d), pinned %v, %d CPUs\n", st.mockURL, st.mockPID, cfg.pin, runtime.NumCPU())
	rep := &report{}
	for _, sv := range st.servers {
		sv.rssStart = rssOf(sv.pid)
	}
	if err := warmUp(ctx, cfg, st, cases); err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // let the warm-up's garbage go
	for _, sv := range st.servers {
		sv.rssIdle = rssOf(sv.pid)
	}
	for round := range cfg.rounds {
		for _, c := range cases {
			for _, t := range st.targets(c) {
				m, err := measure(ctx, cfg, st, c, t)
				if err != nil {
					return fmt.Errorf("round %d, %s via %s: %w", round+1, c.name, t.name, err)
				}
				rep.add(c, t, m)
			}
		}
	}
	for _, sv := range st.servers {
		sv.rssPeak = hwmOf(sv.pid)
	}
	rep.print(out, cases, st)
	if err := rep.verdict(); err != nil {
		return err
	}
	return uncut(ctx, st)
}
