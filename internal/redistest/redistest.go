// Package redistest starts a real redis-server for tests: on a free
// loopback port, with a temporary directory, stopped when the test ends.
// It is never a mock: a test of the shared state runs against the engine
// the replicas use. Only tests import it.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process.
type Server struct {
	// URL is the redis:// URL of the server.
	URL  string
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts redis-server and waits until it accepts connections. A
// machine without redis-server fails the test: the shared state is
// untested otherwise, and a skip would read as a pass. .ci/run puts
// Debian's redis-server on PATH.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not on PATH: the tests of the shared state run a real Redis. "+
			"Install Debian's redis-server package (apt-get install redis-server), or run .ci/run, which unpacks it: %v", err)
	}
	port := freePort(t)
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), done: make(chan struct{})}
	s.URL = "redis://" + s.Addr + "/0"
	s.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", t.TempDir(),
		"--save", "", "--appendonly", "no", "--protected-mode", "yes", "--daemonize", "no", "--loglevel", "warning")
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("redis-server output: %v", err)
	}
	s.cmd.Stderr = s.cmd.Stdout
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	logs := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case logs <- sc.Text():
			default:
			}
		}
		_ = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(s.Kill)
	s.waitReady(t, logs)
	return s
}

// waitReady waits up to 10 seconds for the server to answer PING.
func (s *Server) waitReady(t testing.TB, logs chan string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if s.ping(ctx) == nil {
			return
		}
		select {
		case <-s.done:
			t.Fatalf("redis-server exited at start: %s", drain(logs))
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("redis-server did not answer on %s within 10s: %s", s.Addr, drain(logs))
}

func (s *Server) ping(ctx context.Context) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.Addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redis answered %q", line)
	}
	return nil
}

// Kill stops the server at once (SIGKILL, as a crash would) and waits for
// it to exit. It may be called more than once.
func (s *Server) Kill() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
	}
}

func drain(logs chan string) string {
	var b strings.Builder
	for {
		select {
		case l := <-logs:
			b.WriteString(l + "\n")
		default:
			return b.String()
		}
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// CPU is the user and system CPU time the server has used so far, read
// from /proc (Linux), at the kernel's clock tick (usually 10 ms).
func (s *Server) CPU() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc stat: %q", b)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc stat: %q", b)
	}
	const ticksPerSecond = 100 // USER_HZ on every Linux the tests run on
	return time.Duration(utime+stime) * time.Second / ticksPerSecond, nil
}

// Pause stops the server (SIGSTOP) without closing its connections: a
// Redis that hangs, not one that refuses. Continue, or Kill at the end of
// the test, ends the pause.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("pause redis-server: %v", err)
	}
}

// Continue resumes a paused server (SIGCONT).
func (s *Server) Continue(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("continue redis-server: %v", err)
	}
}
