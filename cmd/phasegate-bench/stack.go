package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/phasegate/phasegate/internal/proc"
)

// stack is the gateway and the mock, and what stops them.
type stack struct {
	gatewayURL, mockURL string
	gatewayPID, mockPID int
	stops               []func()
}

const startTimeout = 2 * time.Minute

// startStack builds the gateway unless given one, then starts the mock
// and the gateway. On error, whatever started is stopped.
func startStack(ctx context.Context, cfg config) (st *stack, err error) {
	st = &stack{}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	gw := cfg.gateway
	if gw == "" {
		dir, err := os.MkdirTemp("", "phasegate-bench-")
		if err != nil {
			return st, err
		}
		st.stops = append(st.stops, func() { os.RemoveAll(dir) })
		gw = filepath.Join(dir, "phasegate")
		if err := build(ctx, gw); err != nil {
			return st, err
		}
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
	return st, st.startGateway(ctx, pinned(cfg.pin, gatewayCPU, gw), env)
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

// startGateway starts the gateway and takes its address from its log;
// the rest of its log is read and dropped.
func (st *stack) startGateway(ctx context.Context, args, env []string) error {
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
	st.gatewayPID = cmd.Process.Pid
	st.stops = append(st.stops, func() { _ = cmd.Process.Signal(syscall.SIGTERM); proc.WaitOrKill(cmd, 15*time.Second) })
	r := bufio.NewReaderSize(stderr, 64<<10)
	var addr string
	if addr, err = proc.ListeningAddr(ctx, r, startTimeout); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	go func() { _, _ = io.Copy(io.Discard, r) }() // ends when the gateway exits
	st.gatewayURL = "http://" + addr
	return nil
}

func (st *stack) close() {
	for i := len(st.stops) - 1; i >= 0; i-- {
		st.stops[i]()
	}
}
