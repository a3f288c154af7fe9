package main

import (
	"io"
	"net"
	"testing"
)

// TestHealthcheck: the subcommand passes while the gateway is ready, and
// fails once it is gone.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	g := start(t, nil, nil)
	_, port, _ := net.SplitHostPort(g.addr)
	ctx := testContext(t)
	if err := runHealthcheck(ctx, nil, env(map[string]string{"LISTEN_ADDR": ":" + port}), io.Discard); err != nil {
		t.Errorf("ready gateway: %v", err)
	}
	if err := runHealthcheck(ctx, []string{"--url", g.url + "/readyz"}, env(nil), io.Discard); err != nil {
		t.Errorf("ready gateway by --url: %v", err)
	}
	if err := g.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := runHealthcheck(ctx, nil, env(map[string]string{"LISTEN_ADDR": "0.0.0.0:" + port}), io.Discard); err == nil {
		t.Errorf("stopped gateway: no error")
	}
}
