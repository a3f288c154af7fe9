package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/phasegate/phasegate/internal/proc"
)

// The requests: an agent's turn with one declared tool, answered by the
// double's agent-text or agent-tool scenario (X-Test-Scenario).
const requestBody = `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},` +
	`"messages":[{"role":"system","content":"You are a coding agent."},` +
	`{"role":"user","content":"The handler test fails with a closed stream. Find out why."}],` +
	`"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather for a city.",` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}`

// kind is how one request ended; ok and disconnected are not errors.
type kind string

const (
	kindOK           kind = "ok"
	kindDisconnected kind = "disconnected" // the client hung up, as planned
	kindConnect      kind = "connect"
	kindTimeout      kind = "timeout"
	kindRead         kind = "read_error"
	kindInBand       kind = "in_band_error"
	kindTruncated    kind = "truncated"    // no [DONE]
	kindWrongAnswer  kind = "wrong_answer" // [DONE] without the expected finish
)

// plan is what one client does.
type plan struct {
	tool      bool
	hostile   hostile // "": an agent's request
	cutAfter  int     // events read before hanging up; 0 reads all
	slowDelay time.Duration
}

// outcome is one request's result. total and first are set for a request
// read in full at full speed.
type outcome struct {
	plan
	kind   kind
	detail string
	first  time.Duration // to the first content or tool-call event
	total  time.Duration
}

// results gathers outcomes; safe for concurrent use.
type results struct {
	mu       sync.Mutex
	outcomes []outcome
	started  time.Time
	elapsed  time.Duration
}

func (r *results) add(o outcome) {
	r.mu.Lock()
	r.outcomes = append(r.outcomes, o)
	r.mu.Unlock()
}

// drive starts cfg.concurrency clients against base, each making requests
// one after another until cfg.duration is over or cfg.maxRequests were
// started, and waits for the last to end.
func drive(ctx context.Context, cfg config, base string) *results {
	client := proc.LoopbackClient(cfg.concurrency)
	defer client.CloseIdleConnections()
	// Requests run under ctx, to their end; only starting them stops at
	// the deadline.
	starting, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	res := &results{started: time.Now()}
	var started atomic.Int64
	var wg sync.WaitGroup
	for i := range cfg.concurrency {
		rng := rand.New(rand.NewPCG(cfg.seed, uint64(i)))
		wg.Go(func() {
			for starting.Err() == nil && started.Add(1) <= int64(cfg.maxRequests) {
				p := choose(rng, cfg)
				if p.hostile != "" {
					res.add(doHostile(ctx, client, base, p.hostile, cfg.requestTimeout))
					continue
				}
				res.add(do(ctx, client, base, p, cfg.requestTimeout))
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(res.started)
	return res
}

// choose picks what the next client does.
func choose(rng *rand.Rand, cfg config) plan {
	p := plan{tool: rng.Float64() < cfg.tool}
	if cfg.hostile > 0 && rng.Float64() < cfg.hostile {
		p.hostile = hostiles[rng.IntN(len(hostiles))]
		return p
	}
	switch x := rng.Float64(); {
	case x < cfg.disconnect:
		p.cutAfter = 1 + rng.IntN(90) // both scenarios send more events
	case x < cfg.disconnect+cfg.slow:
		p.slowDelay = cfg.slowDelay
	}
	return p
}

// do makes one streamed request and reads it as p says.
func do(ctx context.Context, client *http.Client, base string, p plan, timeout time.Duration) outcome {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	o := outcome{plan: p}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader([]byte(requestBody)))
	if err != nil {
		panic(err) // a constant request
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Test-Scenario", map[bool]string{false: "agent-text", true: "agent-tool"}[p.tool])
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		o.kind, o.detail = errKind(ctx, err, kindConnect), err.Error()
		return o
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		o.kind, o.detail = kind(fmt.Sprintf("status_%d", resp.StatusCode)), string(b)
		return o
	}
	o.kind, o.detail = read(ctx, resp.Body, p, start, &o.first)
	o.total = time.Since(start)
	return o
}

// read reads a stream's events as p says and judges how it ended.
func read(ctx context.Context, body io.Reader, p plan, start time.Time, first *time.Duration) (kind, string) {
	br := bufio.NewReaderSize(body, 16<<10)
	events, finish := 0, ""
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return kindTruncated, fmt.Sprintf("after %d events", events)
			}
			return errKind(ctx, err, kindRead), err.Error()
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		events++
		switch {
		case bytes.HasPrefix(data, []byte("[DONE]")):
			return judge(p, finish)
		case bytes.HasPrefix(data, []byte(`{"error"`)):
			return kindInBand, string(bytes.TrimSpace(data))
		case bytes.Contains(data, []byte(`"finish_reason":"`)):
			finish = finishReason(data)
		}
		if *first == 0 && firstToken(data) {
			*first = time.Since(start)
		}
		if p.cutAfter > 0 && events >= p.cutAfter {
			return kindDisconnected, ""
		}
		if p.slowDelay > 0 {
			time.Sleep(p.slowDelay)
		}
	}
}

// firstToken reports whether an event carries content or a tool call (the
// opening role chunk's empty content does not count).
func firstToken(data []byte) bool {
	_, after, ok := bytes.Cut(data, []byte(`"content":"`))
	return ok && len(after) > 0 && after[0] != '"' || bytes.Contains(data, []byte(`"tool_calls"`))
}

func finishReason(data []byte) string {
	_, after, _ := bytes.Cut(data, []byte(`"finish_reason":"`))
	reason, _, _ := bytes.Cut(after, []byte(`"`))
	return string(reason)
}

func judge(p plan, finish string) (kind, string) {
	want := map[bool]string{false: "stop", true: "tool_calls"}[p.tool]
	if finish != want {
		return kindWrongAnswer, fmt.Sprintf("finish %q, want %q", finish, want)
	}
	return kindOK, ""
}

// errKind tells a timeout from other failures.
func errKind(ctx context.Context, err error, otherwise kind) kind {
	var ne net.Error
	if ctx.Err() != nil || (errors.As(err, &ne) && ne.Timeout()) {
		return kindTimeout
	}
	return otherwise
}

// warmUp sends a few requests through the gateway, so the idle figures are
// those of a gateway that has served, and fails if one goes wrong.
func warmUp(ctx context.Context, cfg config, gatewayURL string) error {
	client := proc.LoopbackClient(4)
	defer client.CloseIdleConnections()
	for i := range 8 {
		o := do(ctx, client, gatewayURL, plan{tool: i%2 == 1}, cfg.requestTimeout)
		if o.kind != kindOK {
			return fmt.Errorf("warm-up request %d through the gateway: %s %s", i, o.kind, o.detail)
		}
	}
	return nil
}
