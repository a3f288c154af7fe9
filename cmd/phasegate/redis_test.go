package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/internal/redistest"
)

// TestRunTwoGatewaysOnRedis runs two gateways on one REDIS_URL, as the
// compose file does: a rate limit spent on one is spent on the other, a
// stream served by one is replayed by the other, and the URL's password
// never reaches a log.
func TestRunTwoGatewaysOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	const password = "pw-SECRET-redis"
	url := strings.Replace(srv.URL, "redis://", "redis://:"+password+"@", 1)
	// The server requires the password the URL carries.
	setPassword(t, srv.Addr, password)
	e := map[string]string{"REDIS_URL": url, "RATE_LIMIT_KEY_RPM": "2", "RESUMABLE_STREAMS": "true"}
	a, b := start(t, nil, e), start(t, nil, e)
	ask := func(g *gateway, id string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, g.url+"/v1/chat/completions",
			strings.NewReader(`{"model":"phasegate-sim","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	first := ask(a, "run-redis-1")
	body, _ := io.ReadAll(first.Body)
	first.Body.Close()
	if first.StatusCode != http.StatusOK || first.Header.Get("X-Phasegate-Resumable") != "true" {
		t.Fatalf("on A: %d, resumable %q\n%s", first.StatusCode, first.Header.Get("X-Phasegate-Resumable"), a.log)
	}
	resp, err := http.Get(b.url + "/v1/phasegate/requests/run-redis-1/events")
	if err != nil {
		t.Fatal(err)
	}
	replay, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(replay) != string(body) {
		t.Errorf("replay on B: %d\n%s\nwant the stream A served:\n%s", resp.StatusCode, replay, body)
	}
	for i, g := range []*gateway{b, a} {
		r := ask(g, "")
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
		want := []int{http.StatusOK, http.StatusTooManyRequests}[i]
		if r.StatusCode != want {
			t.Errorf("request %d of 2/min across both: %d, want %d", i+2, r.StatusCode, want)
		}
	}
	for _, g := range []*gateway{a, b} {
		if err := g.stop(t); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(g.log.String(), password) {
			t.Errorf("the Redis password reached the log:\n%s", g.log)
		}
	}
}

// setPassword makes the server require password.
func setPassword(t *testing.T, addr, password string) {
	t.Helper()
	c, err := (&net.Dialer{}).Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cmd := "CONFIG SET requirepass " + password + "\r\n"
	if _, err := c.Write([]byte(cmd)); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("CONFIG SET requirepass: %q, %v", line, err)
	}
}
