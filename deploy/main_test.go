package deploy_test

import (
	"testing"

	"github.com/phasegate/phasegate/proxy"
)

// TestMain makes gin's release mode the process's choice, as the
// command does, so the gateway these tests start logs no route table.
func TestMain(m *testing.M) {
	proxy.ReleaseMode()
	m.Run()
}
