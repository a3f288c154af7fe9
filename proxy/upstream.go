package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	sse "github.com/tmaxmax/go-sse"
	"go.opentelemetry.io/otel/propagation"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/protocol"
)

// NewTransport returns the transport for upstream calls: bounded dial and
// TLS handshake, pooled connections (up to 512 idle per provider), HTTP/2
// where the provider offers it, and the response-header wait bounded by
// the first-byte timeout.
func NewTransport(t Timeouts) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: t.Connect, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = t.Connect
	tr.ResponseHeaderTimeout = t.FirstByte
	// Hundreds of concurrent streams go to one provider: keep as many
	// connections as run at once, or each burst pays new TLS handshakes
	// (HTTP/2, which the clone of the default transport attempts, needs
	// only a few).
	tr.MaxIdleConns = 1024
	tr.MaxIdleConnsPerHost = 512
	tr.IdleConnTimeout = 90 * time.Second
	return tr
}

// upstream is the protocol.Upstream of one client request: it knows the
// provider, the client's headers to pass on and where keep-alive comments
// go. It is owned by one request.
type upstream struct {
	client    *http.Client
	cfg       *Config
	provider  *Provider
	header    http.Header // the client's request headers, hop-by-hop stripped
	requestID string
	onComment func(line []byte) // nil: comments are dropped
	// onWait, when set, is called before every wait on the upstream: the
	// call itself, and every read of a stream's body that the SSE reader
	// makes because it holds no complete event. The client's writes
	// gathered so far are flushed then.
	onWait func()
	// firstByteBy, when set, is the request's one first-byte deadline
	// (protocol.Exchange.FirstByteBy): until committed reports that the
	// client has its first byte, a call waits for its own first byte no
	// later than that.
	firstByteBy time.Time
	committed   func() bool
	// propagator, when set, writes the trace context of the call's span
	// (in ctx) into its headers, in place of the client's.
	propagator propagation.TextMapPropagator
}

// Send implements protocol.Upstream.
func (u *upstream) Send(ctx context.Context, req *chat.Request) (*protocol.Response, error) {
	hreq, err := u.newRequest(ctx, req)
	if err != nil {
		return nil, err
	}

	// Streams get a watchdog: the first-byte bound until the first event,
	// then the idle bound, reset per event. Firing cancels the request,
	// which unblocks the body read with the cause. Other answers get the
	// first-byte bound until their headers.
	firstByte, ok := u.firstByte()
	if !ok {
		return nil, fmt.Errorf("upstream: no time left before the first byte: %w", ErrFirstByteTimeout)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	hreq = hreq.WithContext(ctx)
	idle := time.Duration(0)
	if req.Stream {
		idle = u.cfg.Timeouts.Idle
	}
	call := &upstreamCall{ctx: ctx, cancel: cancel, wd: newWatchdog(firstByte, idle, cancel)}

	if u.onWait != nil {
		u.onWait()
	}
	resp, err := u.client.Do(hreq)
	if !req.Stream {
		call.wd.pause() // the headers came: the body is REQUEST_TIMEOUT's
	}
	if err != nil {
		// Classify before stop: stopping cancels ctx, and a cancelled ctx
		// reads as a client that left.
		err = upstreamCallError(ctx, err)
		call.stop()
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer call.stop()
		return nil, u.failed(ctx, resp)
	}
	if !req.Stream || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		defer call.stop()
		return u.whole(ctx, resp)
	}
	return u.stream(call, resp), nil
}

// upstreamCall is one call's context and the watchdog that bounds it.
type upstreamCall struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	wd     *watchdog
}

// stop ends the call: its watchdog, then its context.
func (c *upstreamCall) stop() {
	c.wd.stop()
	c.cancel(context.Canceled)
}

// whole reads and closes an answer that is not a stream.
func (u *upstream) whole(ctx context.Context, resp *http.Response) (*protocol.Response, error) {
	defer resp.Body.Close()
	b, err := readBody(ctx, resp.Body, u.cfg.MaxResponseBytes)
	if err != nil {
		return nil, err
	}
	return &protocol.Response{Status: resp.StatusCode, Header: responseHeader(resp.Header), Body: b}, nil
}

// stream is the answer of a stream, read event by event; closing it ends
// the call.
func (u *upstream) stream(call *upstreamCall, resp *http.Response) *protocol.Response {
	out := &protocol.Response{Status: resp.StatusCode, Header: responseHeader(resp.Header)}
	body := u.tap(resp.Body)
	ended := false // the stream reached [DONE] or the end of its body
	out.Close = func() {
		if ended {
			// What is left after [DONE] is the body's framing: read it, so
			// that the connection goes back to the pool. An answer closed
			// early is not drained: closing it stops the model generating.
			drain(resp.Body, call.cancel)
		}
		resp.Body.Close()
		call.stop()
	}
	out.Events = u.events(call.ctx, body, call.wd, &ended)
	return out
}

// newRequest builds the upstream request of req: its body, the client's
// headers that pass, the provider's key, the trace context.
func (u *upstream) newRequest(ctx context.Context, req *chat.Request) (*http.Request, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint(u.provider.BaseURL, "/chat/completions"), bytes.NewReader(req.Encode()))
	if err != nil {
		return nil, fmt.Errorf("build upstream request: %w", err)
	}
	u.setHeaders(hreq.Header)
	if u.propagator != nil {
		u.propagator.Inject(ctx, propagation.HeaderCarrier(hreq.Header))
	}
	hreq.Header.Set("Content-Type", "application/json")
	if req.Stream {
		hreq.Header.Set("Accept", "text/event-stream")
	}
	return hreq, nil
}

// failed is the error of an answer whose status is not 2xx, its body
// read and closed: a redirect is the gateway's own error, never relayed;
// any other keeps the upstream's status, allowed headers and body.
func (u *upstream) failed(ctx context.Context, resp *http.Response) error {
	defer resp.Body.Close()
	if isRedirect(resp.StatusCode) {
		return redirectError(resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, u.cfg.MaxResponseBytes))
	if err != nil {
		return upstreamCallError(ctx, err)
	}
	return &protocol.UpstreamError{Status: resp.StatusCode, Header: responseHeader(resp.Header), Body: b}
}

// firstByte is how long this call may wait for its first byte: the
// first-byte timeout, or what is left of the request's one first-byte
// deadline while the client has no byte yet; false when nothing is left.
func (u *upstream) firstByte() (time.Duration, bool) {
	d := u.cfg.Timeouts.FirstByte
	if u.firstByteBy.IsZero() || (u.committed != nil && u.committed()) {
		return d, true
	}
	left := time.Until(u.firstByteBy)
	if left <= 0 {
		return 0, false
	}
	if d <= 0 || left < d {
		d = left
	}
	return d, true
}

// drain reads what is left of a finished body, at most 64 KiB and for at
// most 250 ms (cancel aborts the read), so that its connection can be
// reused.
func drain(body io.Reader, cancel context.CancelCauseFunc) {
	t := time.AfterFunc(250*time.Millisecond, func() { cancel(context.Canceled) })
	defer t.Stop()
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
}

// readBody reads a whole upstream answer of at most max bytes. A longer
// one is an error, not a body silently cut into invalid JSON.
func readBody(ctx context.Context, body io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(body, max+1))
	if err != nil {
		return nil, upstreamCallError(ctx, err)
	}
	if int64(len(b)) > max {
		return nil, &chat.Error{Status: http.StatusBadGateway, Type: chat.TypeUpstream, Code: "upstream_response_too_large",
			Message: "the upstream answer is larger than the gateway accepts (" + formatBytes(max) + ")"}
	}
	return b, nil
}

// events reads SSE events off body. The watchdog is paused while the
// consumer handles an event (a slow client is not an idle upstream) and
// re-armed with the idle bound when the wait for the next one starts;
// comments never re-arm it, so keep-alives never hold a dead stream open.
//
// ended is set when the stream reached [DONE] or the end of its body.
func (u *upstream) events(ctx context.Context, body io.Reader, wd *watchdog, ended *bool) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		for ev, err := range sse.Read(body, &sse.ReadConfig{MaxEventSize: u.cfg.MaxEventBytes}) {
			if err != nil {
				yield(nil, u.streamReadError(ctx, err))
				return
			}
			wd.pause()
			if ev.Data == chat.Done {
				*ended = true
			}
			// The event's data as bytes, without a copy: go-sse makes a
			// string for each event's data and keeps no reference to it
			// once it is yielded, so the receiver owns the bytes, may keep
			// them and never writes them (protocol.Response.Events).
			if ev.Data != "" && !yield(unsafe.Slice(unsafe.StringData(ev.Data), len(ev.Data)), nil) {
				return
			}
			wd.resume()
		}
		if ctx.Err() != nil {
			// The body ended because the request was cancelled.
			yield(nil, upstreamCallError(ctx, ctx.Err()))
			return
		}
		*ended = true
	}
}

// streamReadError classifies a failure to read an open stream: a
// cancellation or a timeout keeps its cause; an event over the size limit
// says so; anything else (a connection cut mid-way) means the answer is
// truncated: the upstream was reached, it stopped short.
func (u *upstream) streamReadError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return upstreamCallError(ctx, err)
	}
	if errors.Is(err, bufio.ErrTooLong) {
		return fmt.Errorf("%w: %w", &chat.Error{Status: http.StatusBadGateway, Type: chat.TypeUpstream, Code: "upstream_event_too_large",
			Message: "an upstream event was larger than the gateway accepts (" + formatBytes(int64(u.cfg.MaxEventBytes)) + ")"}, err)
	}
	return fmt.Errorf("%w: %w", protocol.ErrTruncated, err)
}

// watchdog bounds the waits of a stream: the first-byte bound until the
// first event, the idle bound between events. Firing cancels the request
// with ErrFirstByteTimeout or ErrIdleTimeout. A nil *watchdog bounds
// nothing. It is owned by one stream; its timer runs on its own goroutine.
type watchdog struct {
	timer   *time.Timer
	idle    time.Duration
	started atomic.Bool
}

// newWatchdog returns a running watchdog, or nil when both bounds are 0.
func newWatchdog(firstByte, idle time.Duration, cancel context.CancelCauseFunc) *watchdog {
	if firstByte <= 0 && idle <= 0 {
		return nil
	}
	w := &watchdog{idle: idle}
	d := firstByte
	if d <= 0 {
		d = math.MaxInt64 // stopped below; a zero duration would fire at once
	}
	w.timer = time.AfterFunc(d, func() {
		if w.started.Load() {
			cancel(ErrIdleTimeout)
			return
		}
		cancel(ErrFirstByteTimeout)
	})
	if firstByte <= 0 {
		w.timer.Stop()
	}
	return w
}

// pause stops the clock: an event arrived.
func (w *watchdog) pause() {
	if w == nil {
		return
	}
	w.timer.Stop()
	w.started.Store(true)
}

// resume starts the idle bound: the wait for the next event begins.
func (w *watchdog) resume() {
	if w != nil && w.idle > 0 {
		w.timer.Reset(w.idle)
	}
}

func (w *watchdog) stop() {
	if w != nil {
		w.timer.Stop()
	}
}

// setHeaders copies the client's headers, then applies the provider's key
// and the request id.
func (u *upstream) setHeaders(h http.Header) {
	for k, vs := range u.header {
		h[k] = append([]string(nil), vs...)
	}
	upstreamAuth(h, u.provider)
	h.Set("X-Request-Id", u.requestID)
}

// upstreamCallError wraps a transport error with the cause of the
// cancellation when the watchdog or the deadline fired. A transport
// timeout waiting for the response headers is a first-byte timeout; a
// failure to connect, timed out or not, leaves the upstream unreachable.
func upstreamCallError(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
		if errors.Is(cause, ErrFirstByteTimeout) || errors.Is(cause, ErrIdleTimeout) || errors.Is(cause, ErrRequestTimeout) ||
			errors.Is(cause, protocol.ErrShuttingDown) {
			return fmt.Errorf("upstream: %w", cause)
		}
		return fmt.Errorf("upstream: %w", ctx.Err())
	}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &ne) && ne.Timeout() && !(errors.As(err, &oe) && oe.Op == "dial") {
		return fmt.Errorf("%w: %w", ErrFirstByteTimeout, err)
	}
	return fmt.Errorf("%w: %w", ErrUpstreamUnreachable, err)
}

// tap wraps a stream's body with the comment tap and the wait hook, where
// set.
func (u *upstream) tap(body io.Reader) io.Reader {
	if u.onComment != nil {
		body = &commentTap{r: body, onComment: u.onComment}
	}
	if u.onWait != nil {
		body = &waitReader{r: body, wait: u.onWait}
	}
	return body
}

// waitReader calls wait before every read of r.
type waitReader struct {
	r    io.Reader
	wait func()
}

func (w *waitReader) Read(p []byte) (int, error) {
	w.wait()
	return w.r.Read(p)
}

// commentTap passes a stream through and reports each SSE comment line
// (one starting with ':') as it goes by: go-sse drops comments, and the
// keep-alive comments DeepSeek sends under load are worth passing on.
type commentTap struct {
	r         io.Reader
	onComment func([]byte)
	lineStart bool // the next byte starts a line
	inComment bool
	comment   []byte
	started   bool
}

func (t *commentTap) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if !t.started {
		t.started, t.lineStart = true, true
	}
	// Jump from line end to line end (bytes.IndexByte is vectorised); only
	// the first byte of a line, and the bytes of a comment, are looked at.
	for b := p[:n]; len(b) > 0; {
		switch {
		case t.inComment:
			i := lineEnd(b)
			if i < 0 {
				t.keep(b)
				b = nil
				continue
			}
			t.keep(b[:i])
			t.inComment, t.lineStart = false, true
			t.onComment(t.comment)
			t.comment = t.comment[:0]
			b = b[i+1:]
		case t.lineStart && b[0] == ':':
			t.inComment, t.lineStart = true, false
			t.comment = append(t.comment[:0], ':')
			b = b[1:]
		case t.lineStart && (b[0] == '\n' || b[0] == '\r'):
			b = b[1:]
		default:
			i := lineEnd(b)
			t.lineStart = i >= 0
			if i < 0 {
				b = nil
				continue
			}
			b = b[i+1:]
		}
	}
	return n, err
}

// keep adds b to the comment being read, up to 1 KiB.
func (t *commentTap) keep(b []byte) {
	if room := 1024 - len(t.comment); room > 0 {
		t.comment = append(t.comment, b[:min(room, len(b))]...)
	}
}

// lineEnd returns the index of the first '\r' or '\n' in b, or -1.
func lineEnd(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	head := b
	if i >= 0 {
		head = b[:i]
	}
	if j := bytes.IndexByte(head, '\r'); j >= 0 {
		return j
	}
	return i
}

func moveUpstreamRequestID(h http.Header) {
	if id := h.Values("X-Request-Id"); len(id) > 0 {
		h.Del("X-Request-Id")
		h["X-Upstream-Request-Id"] = id
	}
}
