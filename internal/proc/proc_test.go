package proc

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestStatOfThisProcess(t *testing.T) {
	// Burn a little CPU so that the count is above zero.
	deadline := time.Now().Add(50 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ {
		_ = strings.Repeat("x", n%64)
	}
	cpu, rss, err := Stat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if cpu <= 0 || rss <= 0 {
		t.Errorf("Stat = %v CPU, %d bytes resident; want both above zero", cpu, rss)
	}
	if hwm := Status(os.Getpid(), "VmHWM"); hwm < rss/2 {
		t.Errorf("VmHWM = %d, want at least about the resident %d", hwm, rss)
	}
}

func TestFirstLine(t *testing.T) {
	r := bufio.NewReader(strings.NewReader("starting\n{\"msg\":\"listening\"}\nmore\n"))
	line, err := FirstLine(context.Background(), r, func(s string) bool { return strings.Contains(s, "listening") }, time.Second)
	if err != nil || line != "{\"msg\":\"listening\"}\n" {
		t.Errorf("FirstLine = %q, %v", line, err)
	}
	_, err = FirstLine(context.Background(), bufio.NewReader(strings.NewReader("no\n")), func(string) bool { return false }, time.Second)
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Errorf("FirstLine on an output that ends = %v, want exited before it was ready", err)
	}
}

func TestWaitOrKill(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	WaitOrKill(cmd, 100*time.Millisecond)
	if cmd.ProcessState == nil || cmd.ProcessState.Exited() {
		t.Errorf("state %v: want killed by a signal", cmd.ProcessState)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("WaitOrKill took %v", d)
	}
}
