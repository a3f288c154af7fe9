package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/phasegate/phasegate/settings"
)

const healthcheckUsage = `phasegate healthcheck: ask a running gateway whether it is ready, and exit
0 if it is, 1 if not: the health check of a container image with no shell
or curl (the Dockerfile's HEALTHCHECK).

Usage:
  phasegate healthcheck [flags]

It asks GET /readyz at the address the gateway listens on, read as the
gateway reads it: LISTEN_ADDR (host:port or a port alone), else PORT, else
:8080; a host left out or unspecified (0.0.0.0, ::) is this host's loopback.
/readyz answers 503 while the gateway drains before a shutdown.

Flags:
`

// runHealthcheck asks a running gateway's /readyz and fails unless it
// answers 200: a container's HEALTHCHECK, in an image with no shell or
// curl. The gateway is the one LISTEN_ADDR (or PORT) names, read as the
// gateway reads them, unless --url names another.
func runHealthcheck(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("phasegate healthcheck", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	url := fs.String("url", "", "readiness URL to ask (default: /readyz at LISTEN_ADDR on loopback)")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, healthcheckUsage)
			helpLine(stdout, "url", "string", "readiness URL to ask", "/readyz at LISTEN_ADDR on loopback", "")
			helpLine(stdout, "timeout", "duration", "how long to wait for the answer", timeout.String(), "")
			return err
		}
		return fmt.Errorf("healthcheck: %w (phasegate healthcheck --help lists its flags)", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("healthcheck: unexpected argument %q (phasegate healthcheck --help lists its flags)", fs.Arg(0))
	}
	if *url == "" {
		u, err := readyURL(getenv)
		if err != nil {
			return err
		}
		*url = u
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

// readyURL is the /readyz URL of the gateway the environment configures.
func readyURL(getenv func(string) string) (string, error) {
	base, err := gatewayURL(getenv)
	if err != nil {
		return "", fmt.Errorf("healthcheck: %w", err)
	}
	return base + "/readyz", nil
}

// gatewayURL is the root URL of the gateway the environment configures,
// its address read by the gateway's own rules (listenAddr), on loopback
// when the host is left out or unspecified.
func gatewayURL(getenv func(string) string) (string, error) {
	addr, err := settings.ListenAddress(getenv)
	if err != nil {
		return "", err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("LISTEN_ADDR %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}
