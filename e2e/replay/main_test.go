package replay_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/phasegate/phasegate/proxy"
)

func TestMain(m *testing.M) {
	proxy.ReleaseMode()
	goleak.VerifyTestMain(m)
}
