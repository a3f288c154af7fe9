//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// child is the gateway running as a process of its own.
type child struct {
	cmd    *exec.Cmd
	stderr string // the file its log goes to
	addr   string
	exited chan struct{} // closed once cmd.Wait returned
	err    error         // what cmd.Wait returned, once exited is closed
}

// startProcess starts the test binary as the gateway with environment e (and
// LISTEN_ADDR on a free loopback port) and waits, within wait, for it to
// log its address. It is killed when the test ends if it is still running.
func startProcess(t *testing.T, e map[string]string) *child {
	t.Helper()
	c := &child{stderr: filepath.Join(t.TempDir(), "stderr"), exited: make(chan struct{})}
	logf, err := os.Create(c.stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close() // the child has its own descriptor
	c.cmd = exec.Command(os.Args[0])
	// Only what the test sets: nothing of the environment the tests run
	// in (a real API key, say) reaches the child.
	c.cmd.Env = []string{runMainEnv + "=1", "LISTEN_ADDR=127.0.0.1:0", "LOG_LEVEL=info"}
	for k, v := range e {
		c.cmd.Env = append(c.cmd.Env, k+"="+v)
	}
	// Files, not pipes: Wait then has no copying to wait for, so it
	// returns as soon as the process exits.
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.WaitDelay = time.Second
	// Should the test binary die first, the child dies with it.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-c.exited:
			return
		default:
		}
		_ = c.cmd.Process.Kill()
		select {
		case <-c.exited:
		case <-time.After(wait):
			t.Errorf("the gateway process %d outlived a kill", c.cmd.Process.Pid)
		}
	})

	c.await(t, "its address", func() bool {
		c.addr = c.logged("phasegate listening")
		return c.addr != ""
	})
	return c
}

// await waits, within wait, until logged reports what the child logged
// (what, in the failure) is there; the child exiting first fails the
// test. The log is a file the child writes, so it is read again every
// 20 ms: there is nothing to wait on but the file.
func (c *child) await(t *testing.T, what string, logged func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !logged() {
		select {
		case <-c.exited:
			t.Fatalf("the gateway exited (%v) before it logged %s; its log:\n%s", c.err, what, c.log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not log %s within %v; its log:\n%s", what, wait, c.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// log returns what the child logged so far.
func (c *child) log() string {
	b, err := os.ReadFile(c.stderr)
	if err != nil {
		return fmt.Sprintf("(reading the log: %v)", err)
	}
	return string(b)
}

// logged returns the addr of the first JSON log line whose msg is msg, ""
// when there is none yet.
func (c *child) logged(msg string) string {
	sc := bufio.NewScanner(strings.NewReader(c.log()))
	for sc.Scan() {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == msg {
			return rec.Addr
		}
	}
	return ""
}

// line is one line of a stream and when it arrived.
type line struct {
	text string
	at   time.Time
}

// probe is one GET /readyz on a fresh connection after the signal.
type probe struct {
	at     time.Time // when it was sent
	status int       // 0 when it failed
	err    error
}

// TestProcessShutdown runs the gateway as a real process and sends it
// SIGTERM while a stream is in flight: /readyz turns 503 at once while the
// listener still accepts; the listener closes after SHUTDOWN_DRAIN_DELAY
// and new connections are refused; the stream keeps receiving its
// upstream's events until SHUTDOWN_TIMEOUT is spent, then ends with an
// in-band shutting_down error and [DONE]; the process exits 0.
func TestProcessShutdown(t *testing.T) {
	t.Parallel()
	const (
		drainDelay = 1500 * time.Millisecond
		grace      = 1500 * time.Millisecond
		pace       = 50 * time.Millisecond
	)
	// An answer that would run for 30 s: one piece every pace.
	s := sim.NewStream("deepseek-v4-flash").Role()
	for i := range 600 {
		s.Delay(pace).Content(fmt.Sprintf("w%d ", i))
	}
	reply := s.Finish("stop").Done().Reply()
	_, usrv := proxytest.NewServer(t, func(proxytest.Received) sim.Reply { return reply })

	c := startProcess(t, map[string]string{
		"DEEPSEEK_BASE_URL":    usrv.URL,
		"PROVIDERS":            "deepseek",
		"SHUTDOWN_DRAIN_DELAY": drainDelay.String(),
		"SHUTDOWN_TIMEOUT":     grace.String(),
	})
	base := "http://" + c.addr
	// Every wait below is bounded by this context, by wait, or both.
	ctx, cancel := context.WithTimeout(context.Background(), 3*wait)
	defer cancel()

	// Each probe dials afresh, so a refused connection shows the listener
	// closed.
	probes := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	ready := func() probe {
		p := probe{at: time.Now()}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := probes.Do(req)
		if err != nil {
			p.err = err
			return p
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		p.status = resp.StatusCode
		return p
	}
	if p := ready(); p.status != http.StatusOK {
		t.Fatalf("/readyz before the signal: %d %v, want 200", p.status, p.err)
	}

	// The stream, read line by line into lines until it ends.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"deepseek-v4-flash","stream":true,"messages":[{"role":"user","content":"count"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the stream: %v; the gateway's log:\n%s", err, c.log())
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		t.Fatalf("the stream: %d %s", resp.StatusCode, b)
	}
	lines := make(chan line, 4096)
	readErr := make(chan error, 1)
	go func() {
		r := bufio.NewReader(resp.Body)
		for {
			text, err := r.ReadString('\n')
			if text = strings.TrimSpace(text); text != "" {
				lines <- line{text, time.Now()}
			}
			if err != nil {
				close(lines)
				readErr <- err
				return
			}
		}
	}()
	var got []line
	// After the signal, the stream must end within wait.
	var ended <-chan time.Time
	next := func() (line, bool) {
		select {
		case l, ok := <-lines:
			if ok {
				got = append(got, l)
			}
			return l, ok
		case <-ended:
			t.Fatalf("the stream did not end within %v of the signal; it read:\n%s\nthe gateway's log:\n%s", wait, show(got), c.log())
		case <-ctx.Done():
			t.Fatalf("the stream stalled; it read:\n%s\nthe gateway's log:\n%s", show(got), c.log())
		}
		return line{}, false
	}
	// Content is flowing before the signal.
	for pieces := 0; pieces < 3; {
		l, ok := next()
		if !ok {
			t.Fatalf("the stream ended before the signal:\n%s", show(got))
		}
		if strings.Contains(l.text, `"content":"w`) {
			pieces++
		}
	}

	signalled := time.Now()
	ended = time.After(wait)
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}

	// Probe /readyz until connections are refused, every 50 ms, bounded.
	// A probe that connects just as the listener closes ends in EOF or a
	// reset, not a refusal: probing goes on.
	var probed []probe
	for len(probed) < 400 {
		p := ready()
		probed = append(probed, p)
		if errors.Is(p.err, syscall.ECONNREFUSED) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	last := probed[len(probed)-1]
	if !errors.Is(last.err, syscall.ECONNREFUSED) {
		t.Fatalf("/readyz after the signal never refused the connection; probes:\n%s\nthe gateway's log:\n%s", showProbes(probed, signalled), c.log())
	}
	closed := last.at
	if since := closed.Sub(signalled); since < drainDelay {
		t.Errorf("connections refused %v after the signal, before the %v drain delay:\n%s", since, drainDelay, showProbes(probed, signalled))
	}
	// /readyz says 503 at once: no 200 once a 503 was seen, and a 503
	// within the drain delay (the listener closes only after it).
	first503 := -1
	for i, p := range probed[:len(probed)-1] {
		switch {
		case p.status == http.StatusServiceUnavailable && first503 < 0:
			first503 = i
		case p.status == http.StatusServiceUnavailable:
		case p.status == http.StatusOK && first503 < 0:
			// A probe racing the signal's delivery.
		case p.err != nil && p.at.Sub(signalled) > drainDelay-100*time.Millisecond:
			// A probe racing the listener's close.
		default:
			t.Errorf("/readyz while draining answered %d (%v):\n%s", p.status, p.err, showProbes(probed, signalled))
		}
	}
	if first503 < 0 {
		t.Fatalf("/readyz never answered 503 before the listener closed:\n%s", showProbes(probed, signalled))
	}
	if since := probed[first503].at.Sub(signalled); since >= drainDelay {
		t.Errorf("/readyz first answered 503 %v after the signal, not within the %v drain delay", since, drainDelay)
	}

	// The stream runs on past the listener's close, until the grace is
	// spent, and then ends in-band.
	for {
		if _, ok := next(); !ok {
			break
		}
	}
	if err := <-readErr; !errors.Is(err, io.EOF) {
		t.Errorf("the stream ended with %v, want a clean end after [DONE]", err)
	}
	afterClose, errAt := 0, -1
	for i, l := range got {
		if strings.Contains(l.text, `"content":"w`) && l.at.After(closed) {
			afterClose++
		}
		if errAt < 0 && strings.Contains(l.text, `"code":"shutting_down"`) {
			errAt = i
		}
	}
	if afterClose < 3 {
		t.Errorf("%d content events arrived after the listener closed, want the stream to keep receiving until the grace is spent:\n%s", afterClose, show(got))
	}
	if errAt < 0 {
		t.Fatalf("the stream did not end with a shutting_down error:\n%s\nthe gateway's log:\n%s", show(got), c.log())
	}
	if tail := got[errAt+1:]; len(tail) != 1 || tail[0].text != "data: [DONE]" {
		t.Errorf("after the shutting_down error the stream sent %s, want only data: [DONE]", show(tail))
	}
	if since := got[errAt].at.Sub(signalled); since < drainDelay+grace {
		t.Errorf("the stream was ended %v after the signal, before the drain delay and the grace (%v) were spent", since, drainDelay+grace)
	}
	for _, l := range got {
		if strings.Contains(l.text, `"finish_reason":"stop"`) {
			t.Errorf("the stream finished normally (%s), want it ended by the shutdown", l.text)
		}
	}

	select {
	case <-c.exited:
	case <-time.After(wait):
		t.Fatalf("the gateway did not exit within %v of the stream's end; its log:\n%s", wait, c.log())
	}
	if c.err != nil || c.cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("the gateway exited with %v (code %d), want 0; its log:\n%s", c.err, c.cmd.ProcessState.ExitCode(), c.log())
	}
	if !strings.Contains(c.log(), "grace ran out") {
		t.Errorf("no log line for the streams ended by the shutdown:\n%s", c.log())
	}
}

// show formats stream lines for a failure message, with their arrival
// times relative to the first: the first 5 and the last 20.
func show(ls []line) string {
	var b bytes.Buffer
	for i, l := range ls {
		if i == 5 && len(ls) > 25 {
			fmt.Fprintf(&b, "  ... %d lines\n", len(ls)-25)
		}
		if i >= 5 && i < len(ls)-20 {
			continue
		}
		fmt.Fprintf(&b, "  +%4dms %.160s\n", l.at.Sub(ls[0].at).Milliseconds(), l.text)
	}
	return b.String()
}

func showProbes(ps []probe, since time.Time) string {
	var b bytes.Buffer
	for _, p := range ps {
		fmt.Fprintf(&b, "  +%4dms %d %v\n", p.at.Sub(since).Milliseconds(), p.status, p.err)
	}
	return b.String()
}

// TestProcessSecondSignalStopsAtOnce: a SIGINT from elsewhere than a
// terminal (the gateway's stdin is the null device, as under a container
// engine or a service manager) drains as SIGTERM does, for the whole
// drain delay; a second signal ends the process at once, without waiting
// for the delay.
func TestProcessSecondSignalStopsAtOnce(t *testing.T) {
	t.Parallel()
	c := startProcess(t, map[string]string{"SHUTDOWN_DRAIN_DELAY": "1h"})
	if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	c.await(t, "a drain after SIGINT", func() bool { return strings.Contains(c.log(), `"msg":"draining`) })
	if !strings.Contains(c.log(), `"delay":"1h0m0s"`) {
		t.Errorf("a SIGINT with no terminal did not drain for SHUTDOWN_DRAIN_DELAY:\n%s", c.log())
	}
	if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.exited:
	case <-time.After(wait):
		t.Fatalf("the gateway still runs %v after a second signal; its log:\n%s", wait, c.log())
	}
	var ee *exec.ExitError
	if !errors.As(c.err, &ee) {
		t.Fatalf("the gateway exited with %v after a second signal, want it ended by the signal", c.err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Errorf("the gateway exited with %v, want it ended by the second SIGINT", c.err)
	}
}

// TestIsTerminal: neither the null device nor a file is a terminal.
func TestIsTerminal(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, f := range []*os.File{null, f} {
		if isTerminal(f) {
			t.Errorf("isTerminal(%s) = true", f.Name())
		}
	}
	// A pseudo-terminal's master answers as a terminal does.
	pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open a pseudo-terminal: %v", err)
	}
	defer pty.Close()
	if !isTerminal(pty) {
		t.Errorf("isTerminal(%s) = false", pty.Name())
	}
}

// TestProcessCollectorPacedUntilTables: the real process runs its
// collector at GOGC=200 until a tokenizer's tables are loaded (its heap is
// a few MB until then), and at the default 100 once a request needed a
// count; a GOGC the operator gave is kept throughout. Read from
// go_gc_gogc_percent on /metrics.
func TestProcessCollectorPacedUntilTables(t *testing.T) {
	// Over a 1,000-token window by its size (1,400 bytes), within it by its
	// count (about 200 tokens): the fit counts it, and it is served.
	long := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("tokens ", 200) +
		`"}],"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object"}}}]}`
	for _, tt := range []struct {
		name          string
		env           map[string]string
		before, after string
	}{
		{name: "default", env: map[string]string{"CONTEXT_WINDOW": "1000"}, before: "200", after: "100"},
		{name: "GOGC given", env: map[string]string{"CONTEXT_WINDOW": "1000", "GOGC": "150"}, before: "150", after: "150"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := startProcess(t, tt.env)
			base := "http://" + c.addr
			if got := gogcPercent(t, base); got != tt.before {
				t.Errorf("go_gc_gogc_percent at start = %s, want %s", got, tt.before)
			}
			resp := proxytest.Do(t, proxytest.Context(t), http.DefaultClient, http.MethodPost, base+"/v1/chat/completions", long)
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Phasegate-Prompt-Tokens") == "" {
				t.Fatalf("status %d, X-Phasegate-Prompt-Tokens %q, want a counted prompt: %s", resp.StatusCode, resp.Header.Get("X-Phasegate-Prompt-Tokens"), body)
			}
			if got := gogcPercent(t, base); got != tt.after {
				t.Errorf("go_gc_gogc_percent after a counted request = %s, want %s", got, tt.after)
			}
		})
	}
}

// gogcPercent reads go_gc_gogc_percent from base's /metrics.
func gogcPercent(t *testing.T, base string) string {
	t.Helper()
	resp := proxytest.Do(t, proxytest.Context(t), http.DefaultClient, http.MethodGet, base+"/metrics", "")
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_gc_gogc_percent "); ok {
			return v
		}
	}
	t.Fatalf("no go_gc_gogc_percent in /metrics:\n%s", b)
	return ""
}
