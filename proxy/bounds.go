package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
)

// errBusy answers a request past the memory bound of requests in flight.
var errBusy = &chat.Error{Status: http.StatusServiceUnavailable, Type: chat.TypeServer, Code: "server_busy",
	Message: "this gateway holds as many request bodies as its memory bound allows (MAX_INFLIGHT_BYTES); try again shortly"}

// errShare answers a request whose client already holds its share of the
// memory bound of requests in flight: the fault of that client's own
// bodies, so a 429, as a rate limit is.
var errShare = &chat.Error{Status: http.StatusTooManyRequests, Type: "requests", Code: "inflight_share_exceeded",
	Message: "this client's request bodies in flight hold its share of the gateway's memory bound (MAX_INFLIGHT_SHARE of MAX_INFLIGHT_BYTES); finish or close the requests it has open, or try again shortly"}

// inflight is the memory bound of the request bodies in flight: of all
// of them together (MAX_INFLIGHT_BYTES), and of each tenant's
// (MAX_INFLIGHT_SHARE), so that no one client can hold the whole bound.
// A tenant is a client key, or a client address where there are no
// client keys (see Handler.tenant). It is safe for concurrent use.
type inflight struct {
	total, share int64
	mu           sync.Mutex
	used         int64
	tenants      map[string]int64 // bytes held, only tenants holding any
}

func newInflight(total, share int64) *inflight {
	return &inflight{total: total, share: min(share, total), tenants: map[string]int64{}}
}

// acquire charges n bytes to tenant ("" charges the total bound only):
// nil, or errBusy past the total bound, or errShare past the tenant's
// share; a refusal charges nothing.
func (f *inflight) acquire(tenant string, n int64) *chat.Error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.used+n > f.total {
		return errBusy
	}
	if tenant != "" {
		if f.tenants[tenant]+n > f.share {
			return errShare
		}
		f.tenants[tenant] += n
	}
	f.used += n
	return nil
}

// release gives back n bytes acquire charged to tenant.
func (f *inflight) release(tenant string, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.used -= n
	if tenant == "" {
		return
	}
	if f.tenants[tenant] -= n; f.tenants[tenant] <= 0 {
		delete(f.tenants, tenant)
	}
}

// TryAcquire charges n bytes to the total bound alone: what a request
// adds beyond its body (the stored history of a Responses request).
func (f *inflight) TryAcquire(n int64) bool { return f.acquire("", n) == nil }

// Release gives back n bytes TryAcquire charged.
func (f *inflight) Release(n int64) { f.release("", n) }

// tenant names who a request's body is charged to: its client key when
// the gateway has client keys and the request presents one, else its
// client address (gin's ClientIP, see clientAddress).
func (h *Handler) tenant(c *gin.Context) string {
	if len(h.keys.digests) > 0 {
		if token, ok := cutBearer(c.Request.Header.Get("Authorization")); ok {
			if i := h.keys.match(token); i >= 0 {
				return "key:" + strconv.Itoa(i)
			}
		}
	}
	return "addr:" + clientAddress(c.ClientIP())
}

// boundBody is the middleware that bounds what a request body costs:
// its memory, charged as it arrives, counts against the bound of all
// requests in flight and against its tenant's share of it until the
// request ends, and its reads have a deadline and a least rate. A body
// that announces a length and sends nothing holds nothing. What the
// request holds beyond its body (the stored history a reference brings)
// is charged the same way, by chargeRequest.
func (h *Handler) boundBody(c *gin.Context) {
	r := c.Request
	b := &boundedBody{body: r.Body, w: c.Writer, h: h, tenant: h.tenant(c)}
	defer b.release()
	r = r.WithContext(context.WithValue(r.Context(), boundedBodyKey{}, b))
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = b
	}
	c.Request = r
	c.Next()
}

// boundedBodyKey is the context key of a request's boundedBody.
type boundedBodyKey struct{}

// chargeRequest counts n more bytes that r holds beyond its body against
// the bound of requests in flight and the share of r's tenant, as its
// body's bytes are, until r ends: nil, or errBusy or errShare (counted,
// with Retry-After set on w). It is called by r's handler, which owns
// its body. A request that did not pass boundBody is charged nothing.
func (h *Handler) chargeRequest(w http.ResponseWriter, r *http.Request, n int64) error {
	b, ok := r.Context().Value(boundedBodyKey{}).(*boundedBody)
	if !ok {
		return nil
	}
	if e := b.charge(n); e != nil {
		b.refused(e)
		w.Header().Set("Retry-After", "1")
		return e
	}
	return nil
}

// boundedBody is a request body read under its bounds. It is owned by
// the request's handler.
type boundedBody struct {
	body    io.ReadCloser
	w       http.ResponseWriter
	h       *Handler
	tenant  string
	charged int64
	// first is the time of the first read; zero before it. received
	// counts the bytes read since.
	first    time.Time
	received int64
	// deadline is the read deadline set on the connection; tooSlow
	// reports that it is the one of the least rate, before the body's.
	deadline time.Time
	tooSlow  bool
	ended    bool
}

// charge counts n more bytes of body against the bounds: nil, or the
// error of the bound they do not fit.
func (b *boundedBody) charge(n int64) *chat.Error {
	if n <= 0 {
		return nil
	}
	if e := b.h.inflight.acquire(b.tenant, n*InflightFactor); e != nil {
		return e
	}
	b.charged += n * InflightFactor
	b.h.metrics.InflightBytes(n * InflightFactor)
	return nil
}

// refused counts a refusal of charge.
func (b *boundedBody) refused(e *chat.Error) {
	bound := metrics.BoundInflightBytes
	if e == errShare {
		bound = metrics.BoundInflightShare
	}
	b.h.metrics.Bounded(bound)
}

func (b *boundedBody) release() {
	if b.charged > 0 {
		b.h.inflight.release(b.tenant, b.charged)
		b.h.metrics.InflightBytes(-b.charged)
		b.charged = 0
	}
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.ended {
		return 0, io.EOF
	}
	if b.first.IsZero() {
		b.first = time.Now()
	}
	b.setDeadline()
	n, err := b.body.Read(p)
	b.received += int64(n)
	if e := b.charge(int64(n)); e != nil {
		b.refused(e)
		b.w.Header().Set("Retry-After", "1")
		b.stop()
		return 0, e
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = b.timedOut()
	}
	switch {
	case err == io.EOF:
		b.end()
	case err != nil:
		b.stop()
	}
	return n, err
}

// timedOut is the 408 of a body whose read deadline passed: too slow for
// the least rate, or not all there by the body's deadline.
func (b *boundedBody) timedOut() error {
	if b.tooSlow {
		b.h.metrics.Bounded(metrics.BoundBodyTooSlow)
		rate := float64(b.received) / max(time.Since(b.first).Seconds(), 1e-3)
		return &chat.Error{Status: http.StatusRequestTimeout, Type: chat.TypeInvalidRequest, Code: "request_body_too_slow",
			Message: fmt.Sprintf("the request body arrived at %s/s, slower than this gateway accepts (MIN_BODY_RATE, %s/s once %s have passed)",
				formatBytes(int64(rate)), formatBytes(b.h.cfg.MinBodyRate.BytesPerSecond), b.h.cfg.MinBodyRate.Grace)}
	}
	b.h.metrics.Bounded(metrics.BoundBodyTimeout)
	return &chat.Error{Status: http.StatusRequestTimeout, Type: chat.TypeInvalidRequest, Code: "request_body_timeout",
		Message: fmt.Sprintf("the request body did not arrive within %s", b.limit())}
}

// limit is how long the body may take: Timeouts.Body, but no longer than
// the whole request may; zero for no bound.
func (b *boundedBody) limit() time.Duration {
	t := b.h.cfg.Timeouts
	if t.Request > 0 && (t.Body == 0 || t.Request < t.Body) {
		return t.Request
	}
	return t.Body
}

// setDeadline sets the read deadline of the connection for the next
// read: the body's deadline (limit after its first read), or sooner the
// time at which the body, if nothing more arrives, falls below the least
// rate (MinBodyRate after its grace). A deadline that has not moved is
// not set again.
func (b *boundedBody) setDeadline() {
	var at time.Time
	if d := b.limit(); d > 0 {
		at = b.first.Add(d)
	}
	b.tooSlow = false
	if m := b.h.cfg.MinBodyRate; m.BytesPerSecond > 0 {
		wait := max(m.Grace, time.Duration(float64(b.received)/float64(m.BytesPerSecond)*float64(time.Second)))
		if slow := b.first.Add(wait); at.IsZero() || slow.Before(at) {
			at, b.tooSlow = slow, true
		}
	}
	if at.IsZero() || at.Equal(b.deadline) {
		return
	}
	b.deadline = at
	_ = http.NewResponseController(b.w).SetReadDeadline(at) // unsupported: the request timeout still ends the handler
}

// end clears the read deadline once the body is read: net/http then
// reads the connection in the background to learn that the client left,
// and that read must not time out during a long stream. (net/http clears
// it too as it starts that read; this does not rely on it.)
func (b *boundedBody) end() {
	b.ended = true
	if !b.deadline.IsZero() {
		_ = http.NewResponseController(b.w).SetReadDeadline(time.Time{})
	}
}

// stop ends the reads of a body that is refused: net/http would
// otherwise read what is left of it, as slowly as the client sends it,
// before writing the answer. The connection is closed after the answer.
func (b *boundedBody) stop() {
	b.ended = true
	_ = http.NewResponseController(b.w).SetReadDeadline(time.Unix(1, 0))
}

func (b *boundedBody) Close() error { return b.body.Close() }
