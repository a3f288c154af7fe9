package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// hostile is a request made to cost the gateway: each is answered with
// an error, not served.
type hostile string

const (
	// hostileSchema declares a tool whose schema of about 200 KiB is full
	// of x{0,1000} patterns: a 400 (or a 503 past MAX_INFLIGHT_BYTES).
	hostileSchema hostile = "schema"
	// hostileMessages sends 500,000 tiny messages, about 15 MiB: a 400
	// (or a 503).
	hostileMessages hostile = "messages"
	// hostileTrickle sends its body a byte a second: a 408 once
	// MIN_BODY_RATE_GRACE has passed (or after BODY_READ_TIMEOUT, when
	// shorter).
	hostileTrickle hostile = "trickle"
)

var hostiles = []hostile{hostileSchema, hostileMessages, hostileTrickle}

// kindRefused is a hostile request answered with the error it is owed.
const kindRefused kind = "refused_as_owed"

// hostileBody is the body of a hostile request, built once.
var hostileBody = sync.OnceValue(func() map[hostile]string {
	var s strings.Builder
	s.WriteString(`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{`)
	for i := range 4000 {
		if i > 0 {
			s.WriteByte(',')
		}
		fmt.Fprintf(&s, `"p%d":{"type":"string","pattern":"x{0,1000}"}`, i)
	}
	s.WriteString(`}}}}]}`)
	var m strings.Builder
	m.WriteString(`{"model":"gpt-4o","stream":true,"messages":[`)
	for i := range 500_000 {
		if i > 0 {
			m.WriteByte(',')
		}
		m.WriteString(`{"role":"user","content":"x"}`)
	}
	m.WriteString(`]}`)
	return map[hostile]string{hostileSchema: s.String(), hostileMessages: m.String(), hostileTrickle: requestBody}
})

// owed are the statuses a hostile request may be answered with.
var owed = map[hostile][]int{
	hostileSchema:   {http.StatusBadRequest, http.StatusServiceUnavailable},
	hostileMessages: {http.StatusBadRequest, http.StatusServiceUnavailable},
	hostileTrickle:  {http.StatusRequestTimeout, http.StatusServiceUnavailable},
}

// doHostile makes one hostile request of kind h and judges its answer.
func doHostile(ctx context.Context, client *http.Client, base string, h hostile, timeout time.Duration) outcome {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	o := outcome{}
	var status int
	var err error
	if h == hostileTrickle {
		status, err = trickle(ctx, base, hostileBody()[h])
	} else {
		status, err = post(ctx, client, base, hostileBody()[h])
	}
	switch {
	case err != nil:
		o.kind, o.detail = errKind(ctx, err, kindRead), fmt.Sprintf("%s: %v", h, err)
	case !contains(owed[h], status):
		o.kind, o.detail = kind(fmt.Sprintf("hostile_%s_status_%d", h, status)), string(h)
	default:
		o.kind = kindRefused
	}
	return o
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func post(ctx context.Context, client *http.Client, base, body string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, nil
}

// trickle sends body a byte a second over a connection of its own until
// the gateway answers, and returns the answer's status.
func trickle(ctx context.Context, base, body string) (int, error) {
	u, err := url.Parse(base)
	if err != nil {
		return 0, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", u.Host, len(body))
	if _, err := io.WriteString(conn, head); err != nil {
		return 0, err
	}
	answered := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(answered)
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for i := range len(body) {
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return
			}
			select {
			case <-t.C:
			case <-answered:
				return
			}
		}
	})
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
