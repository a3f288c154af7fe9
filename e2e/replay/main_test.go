package replay_test

import (
	"runtime/debug"
	"testing"

	"go.uber.org/goleak"

	"github.com/phasegate/phasegate/proxy"
)

func TestMain(m *testing.M) {
	proxy.ReleaseMode()
	// The replay allocates and drops hundreds of megabytes of histories;
	// collecting half as often halves what the collector (and, under
	// -race, the detector's bookkeeping of freed memory) costs, for a
	// heap of a few hundred megabytes at most.
	debug.SetGCPercent(200)
	goleak.VerifyTestMain(m)
}
