package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/phasegate/phasegate/internal/proc"
)

// stack is the gateways and the mock, and what stops them.
type stack struct {
	servers []*server
	mockURL string
	mockPID int
	stops   []func()
}

// server is one gateway the driver measures: a phasegate build, or a peer.
type server struct {
	name                       string
	peer                       bool
	url                        string
	pid                        int
	rssStart, rssIdle, rssPeak int64
}

func (s *server) label() string {
	switch {
	case s.peer:
		return "peer " + s.name
	case s.name != "":
		return "gateway " + s.name
	}
	return "gateway"
}

const startTimeout = 2 * time.Minute

// startStack builds the gateway when a -gateway asks for a build, then
// starts the mock, the gateways and the peers. On error, whatever started
// is stopped.
func startStack(ctx context.Context, cfg config) (st *stack, err error) {
	st = &stack{}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	built, err := st.buildOnce(ctx, cfg)
	if err != nil {
		return st, err
	}
	self, err := os.Executable()
	if err != nil {
		return st, err
	}
	driverCPUs, gatewayCPU := cpus(cfg.pin)
	if cfg.pin {
		// The driver, this process, keeps off the gateway's CPU.
		if b, err := exec.Command("taskset", "-a", "-cp", driverCPUs, strconv.Itoa(os.Getpid())).CombinedOutput(); err != nil {
			return st, fmt.Errorf("taskset: %w: %s", err, b)
		}
	}
	if err := st.startMock(ctx, pinned(cfg.pin, driverCPUs, self, "mock")); err != nil {
		return st, err
	}
	env := append([]string{"PATH=" + os.Getenv("PATH"), "LISTEN_ADDR=127.0.0.1:0",
		"OPENAI_BASE_URL=" + st.mockURL + "/v1", "OPENAI_API_KEY=sk-bench",
		"SHUTDOWN_DRAIN_DELAY=0s", "SHUTDOWN_TIMEOUT=5s",
		// The mock picks its answer from this header, which the gateway
		// passes upstream only when told to.
		"FORWARD_HEADERS=X-Bench-Scenario"}, cfg.env...)
	for _, g := range cfg.gateways {
		path := cmp.Or(g.path, built)
		if err := st.startGateway(ctx, g.name, pinned(cfg.pin, gatewayCPU, path), env); err != nil {
			return st, err
		}
	}
	for _, p := range cfg.peers {
		if err := st.startPeer(ctx, p, pinned(cfg.pin, gatewayCPU, "sh", "-c", "exec "+p.path)); err != nil {
			return st, err
		}
	}
	return st, nil
}

// buildOnce builds ./cmd/phasegate when a gateway names no binary, and
// returns the binary's path.
func (st *stack) buildOnce(ctx context.Context, cfg config) (string, error) {
	if !slices.ContainsFunc(cfg.gateways, func(b binary) bool { return b.path == "" }) {
		return "", nil
	}
	dir, err := os.MkdirTemp("", "phasegate-bench-")
	if err != nil {
		return "", err
	}
	st.stops = append(st.stops, func() { os.RemoveAll(dir) })
	gw := filepath.Join(dir, "phasegate")
	return gw, build(ctx, gw)
}

// cpus returns the CPU list of the driver and mock, and the gateway's CPU.
func cpus(pin bool) (rest, gateway string) {
	n := runtime.NumCPU()
	if !pin || n < 2 {
		return "", ""
	}
	return "0-" + strconv.Itoa(n-2), strconv.Itoa(n - 1)
}

// pinned is the command line of args run on cpus when pin is set.
func pinned(pin bool, cpus string, args ...string) []string {
	if !pin {
		return args
	}
	return append([]string{"taskset", "-c", cpus}, args...)
}

func build(ctx context.Context, out string) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/phasegate/phasegate/cmd/phasegate")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, b)
	}
	return nil
}

// startMock starts the mock, which prints its URL, and stops it by closing
// its stdin. taskset execs the command, so the pid is the mock's.
func (st *stack) startMock(ctx context.Context, args []string) error {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start mock: %w", err)
	}
	st.mockPID = cmd.Process.Pid
	st.stops = append(st.stops, func() { stdin.Close(); proc.WaitOrKill(cmd, 15*time.Second) })
	line, err := proc.FirstLine(ctx, bufio.NewReader(stdout), func(string) bool { return true }, startTimeout)
	if err != nil {
		return fmt.Errorf("mock: %w", err)
	}
	st.mockURL = strings.TrimSpace(line)
	return nil
}

// startGateway starts a gateway and takes its address from its log;
// the rest of its log is read and dropped.
func (st *stack) startGateway(ctx context.Context, name string, args, env []string) error {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start gateway: %w", err)
	}
	sv := &server{name: name, pid: cmd.Process.Pid}
	st.servers = append(st.servers, sv)
	st.stops = append(st.stops, func() { _ = cmd.Process.Signal(syscall.SIGTERM); proc.WaitOrKill(cmd, 15*time.Second) })
	r := bufio.NewReaderSize(stderr, 64<<10)
	var addr string
	if addr, err = proc.ListeningAddr(ctx, r, startTimeout); err != nil {
		return fmt.Errorf("gateway %s: %w", name, err)
	}
	go func() { _, _ = io.Copy(io.Discard, r) }() // ends when the gateway exits
	sv.url = "http://" + addr
	return nil
}

// startPeer starts a peer's command line (sh execs it, as taskset does,
// so the pid is the peer's) on a free loopback port and waits until the
// port accepts connections. Its output is dropped.
func (st *stack) startPeer(ctx context.Context, p binary, args []string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "PEER_ADDR="+addr, "PEER_PORT="+port, "UPSTREAM_URL="+st.mockURL+"/v1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start peer %s: %w", p.name, err)
	}
	exited := proc.Exited(cmd)
	st.stops = append(st.stops, func() { _ = cmd.Process.Signal(syscall.SIGTERM); proc.KillAfter(cmd, exited, 15*time.Second) })
	st.servers = append(st.servers, &server{name: p.name, peer: true, pid: cmd.Process.Pid, url: "http://" + addr})
	return waitListening(ctx, addr, exited)
}

// waitListening waits until addr accepts a connection, within
// startTimeout, unless the process exits first.
func waitListening(ctx context.Context, addr string, exited <-chan struct{}) error {
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return fmt.Errorf("peer on %s exited before it listened", addr)
		case <-deadline.C:
			return fmt.Errorf("peer never listened on %s", addr)
		case <-tick.C:
		}
	}
}

func (st *stack) close() {
	for i := len(st.stops) - 1; i >= 0; i-- {
		st.stops[i]()
	}
}
