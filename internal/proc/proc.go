// Package proc holds what the load and benchmark commands need to run the
// gateway and its upstream double as processes of their own and watch
// them: the first line a child prints, a bounded wait for its exit, its
// CPU time and memory as /proc tells them (Linux), and an HTTP client for
// many concurrent streams to one loopback host.
package proc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/PID/stat times: 100 on every
// Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// Stat returns the user plus system CPU time and the resident memory of
// process pid, from /proc/PID/stat.
func Stat(pid int) (cpu time.Duration, rss int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The fields after the command name, which is in parentheses; state
	// is the first, utime the 12th, stime the 13th, rss (pages) the 22nd.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 22 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	pages, _ := strconv.ParseInt(f[21], 10, 64)
	return time.Duration(utime+stime) * clockTick, pages * int64(os.Getpagesize()), nil
}

// Status reads a kB field of /proc/PID/status (VmRSS, VmHWM) in bytes; 0
// when it cannot be read.
func Status(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// FirstLine returns the first line of r that ok accepts, within timeout.
// The reading goroutine ends when r does: give it a child's output, which
// ends when the child exits.
func FirstLine(ctx context.Context, r *bufio.Reader, ok func(string) bool, timeout time.Duration) (string, error) {
	found := make(chan string, 1)
	failed := make(chan error, 1)
	go func() {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				failed <- fmt.Errorf("exited before it was ready: %w", err)
				return
			}
			if ok(line) {
				found <- line
				return
			}
		}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case line := <-found:
		return line, nil
	case err := <-failed:
		return "", err
	case <-t.C:
		return "", errors.New("not ready in time")
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// WaitOrKill waits up to d for cmd to exit, then kills it.
func WaitOrKill(cmd *exec.Cmd, d time.Duration) { KillAfter(cmd, Exited(cmd), d) }

// Exited waits for the started cmd and closes the channel it returns when
// cmd has exited; it is the one Wait of cmd.
func Exited(cmd *exec.Cmd) <-chan struct{} {
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return done
}

// KillAfter waits until exited (from Exited) is closed, killing cmd when
// that takes longer than d.
func KillAfter(cmd *exec.Cmd, exited <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		_ = cmd.Process.Kill()
		<-exited
	}
}

// LoopbackClient is a client for concurrency streams to one host, never
// through a proxy, keeping a connection for each.
func LoopbackClient(concurrency int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxIdleConns:        concurrency * 2,
		MaxIdleConnsPerHost: concurrency * 2,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}}
}

// ListeningAddr reads a gateway's JSON log lines from r until its
// "phasegate listening" line, within timeout, and returns the address it
// names.
func ListeningAddr(ctx context.Context, r *bufio.Reader, timeout time.Duration) (string, error) {
	var addr string
	_, err := FirstLine(ctx, r, func(line string) bool {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "phasegate listening" {
			addr = rec.Addr
			return true
		}
		return false
	}, timeout)
	return addr, err
}
