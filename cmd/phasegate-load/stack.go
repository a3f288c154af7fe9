package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/phasegate/phasegate/internal/proc"
)

// stack is the gateway and the double under load, and what stops them.
type stack struct {
	gatewayURL  string // root, e.g. http://127.0.0.1:PORT
	upstreamURL string
	pid         int // the gateway's process id; 0 when unknown
	gatewayLog  *logTail
	bodyTimeout time.Duration // BODY_READ_TIMEOUT of a gateway started
	stops       []func()
}

// startTimeout bounds a build or the start of one process.
const startTimeout = 2 * time.Minute

// startStack builds what it must start, then starts the double and the
// gateway on free loopback ports. On error, whatever started is stopped.
func startStack(ctx context.Context, cfg config) (st *stack, err error) {
	st = &stack{pid: cfg.pid, bodyTimeout: cfg.bodyTimeout}
	defer func() {
		if err != nil {
			st.close(io.Discard)
		}
	}()
	gwBin, upBin := cfg.gateway, cfg.upstream
	if gwBin == "" || upBin == "" {
		dir, err := os.MkdirTemp("", "phasegate-load-")
		if err != nil {
			return st, err
		}
		st.stops = append(st.stops, func() { os.RemoveAll(dir) })
		if err := build(ctx, dir); err != nil {
			return st, err
		}
		gwBin = or(gwBin, filepath.Join(dir, "phasegate"))
		upBin = or(upBin, filepath.Join(dir, "upstreamdouble"))
	}
	if st.upstreamURL, err = loopbackURL(upBin); err != nil {
		if st.upstreamURL, err = st.startDouble(ctx, upBin); err != nil {
			return st, err
		}
	}
	if st.gatewayURL, err = loopbackURL(gwBin); err != nil {
		st.gatewayURL, err = st.startGateway(ctx, gwBin)
	}
	return st, err
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// build builds the gateway and the double into dir.
func build(ctx context.Context, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator),
		"github.com/phasegate/phasegate/cmd/phasegate", "github.com/phasegate/phasegate/e2e/upstreamdouble")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, b)
	}
	return nil
}

// loopbackURL reads s as the address of a running server: host:port or an
// http URL whose host is a loopback address. An existing file is never one.
func loopbackURL(s string) (string, error) {
	if _, err := os.Stat(s); err == nil || s == "" {
		return "", errors.New("not an address")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	ips, err := net.LookupIP(u.Hostname())
	if err != nil {
		return "", err
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return "", fmt.Errorf("%s is not a loopback address", s)
		}
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// startDouble starts the upstream double, which prints its URL, and stops
// it by closing its stdin.
func (st *stack) startDouble(ctx context.Context, bin string) (string, error) {
	cmd := exec.Command(bin, "-record=false")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start double: %w", err)
	}
	st.stops = append(st.stops, func() { stdin.Close(); proc.WaitOrKill(cmd, 15*time.Second) })
	line, err := proc.FirstLine(ctx, bufio.NewReader(stdout), func(string) bool { return true }, startTimeout)
	if err != nil {
		return "", fmt.Errorf("double: %w", err)
	}
	return strings.TrimSpace(line), nil
}

// startGateway starts the gateway with only the settings the run needs,
// its upstream the double, and takes its address from its log.
func (st *stack) startGateway(ctx context.Context, bin string) (string, error) {
	cmd := exec.Command(bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LISTEN_ADDR=127.0.0.1:0", "LOG_LEVEL=info",
		"OPENAI_BASE_URL=" + st.upstreamURL + "/v1", "OPENAI_API_KEY=sk-load-test",
		"SHUTDOWN_DRAIN_DELAY=0s", "SHUTDOWN_TIMEOUT=5s", "BODY_READ_TIMEOUT=" + st.bodyTimeout.String(),
		// Every simulated client comes from one loopback address, which a
		// share of the in-flight memory would treat as one client.
		"MAX_INFLIGHT_SHARE=100"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start gateway: %w", err)
	}
	st.pid = cmd.Process.Pid
	st.stops = append(st.stops, func() { _ = cmd.Process.Signal(syscall.SIGTERM); proc.WaitOrKill(cmd, 15*time.Second) })
	r := bufio.NewReader(stderr)
	var addr string
	addr, err = proc.ListeningAddr(ctx, r, startTimeout)
	if err != nil {
		return "", fmt.Errorf("gateway: %w", err)
	}
	st.gatewayLog = newLogTail(r)
	return "http://" + addr, nil
}

// close stops what the stack started, the last started first, and prints
// what the gateway logged.
func (st *stack) close(out io.Writer) {
	for i := len(st.stops) - 1; i >= 0; i-- {
		st.stops[i]()
	}
	if st.gatewayLog != nil {
		st.gatewayLog.print(out)
	}
}
