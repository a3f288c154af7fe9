package main

import (
	"time"

	"github.com/phasegate/phasegate/internal/proc"
)

// cpuOf is the user plus system time of process pid, 0 when unknown.
func cpuOf(pid int) time.Duration {
	cpu, _, _ := proc.Stat(pid)
	return cpu
}

func rssOf(pid int) int64 { return proc.Status(pid, "VmRSS") }
func hwmOf(pid int) int64 { return proc.Status(pid, "VmHWM") }

// sampleRSS keeps the largest RSS of pid in *peak, sampled every 50 ms,
// until the returned stop is called.
func sampleRSS(pid int, peak *int64) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			*peak = max(*peak, rssOf(pid))
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}
