package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// runHealthcheck asks a running gateway's /readyz and fails unless it
// answers 200: a container's HEALTHCHECK, in an image with no shell or
// curl. The gateway is the one LISTEN_ADDR names (a host left out or
// unspecified is this host's loopback), unless --url names another.
func runHealthcheck(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := flag.NewFlagSet("phasegate healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := getenv("LISTEN_ADDR")
	if addr == "" {
		addr = ":8080"
	}
	url := fs.String("url", "", "readiness URL to ask (default: /readyz at LISTEN_ADDR on loopback)")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("healthcheck: LISTEN_ADDR %q: %w", addr, err)
		}
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			host = "127.0.0.1"
		}
		*url = "http://" + net.JoinHostPort(host, port) + "/readyz"
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %s", *url, resp.Status)
	}
	return nil
}
