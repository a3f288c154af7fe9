package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
)

// errBusy answers a request past the memory bound of requests in flight.
var errBusy = &chat.Error{Status: http.StatusServiceUnavailable, Type: chat.TypeServer, Code: "server_busy",
	Message: "this gateway holds as many request bodies as its memory bound allows (MAX_INFLIGHT_BYTES); try again shortly"}

// boundBody is the middleware that bounds what a request body costs:
// its memory counts against the bound of all requests in flight
// (charged for its Content-Length before the handler runs, or as it is
// read when the length is not sent) until the request ends, and its
// reads have a deadline. A request past the memory bound is answered 503
// with Retry-After, counted.
func (h *Handler) boundBody(c *gin.Context) {
	r := c.Request
	if r.Body == nil || r.Body == http.NoBody {
		c.Next()
		return
	}
	b := &boundedBody{body: r.Body, w: c.Writer, h: h}
	defer b.release()
	if n := r.ContentLength; n > 0 && !b.charge(min(n, h.cfg.MaxBodyBytes)) {
		h.metrics.Bounded(metrics.BoundInflightBytes)
		b.stop()
		c.Writer.Header().Set("Retry-After", "1")
		h.refuseRoute(c, errBusy)
		c.Abort()
		return
	}
	b.sized = r.ContentLength > 0
	r.Body = b
	c.Next()
}

// boundedBody is a request body read under its bounds. It is owned by
// the request's handler.
type boundedBody struct {
	body    io.ReadCloser
	w       http.ResponseWriter
	h       *Handler
	sized   bool // charged for its Content-Length up front
	charged int64
	// deadline is when the body must have been read; zero before the
	// first read.
	deadline time.Time
	ended    bool
}

// charge counts n more bytes of body against the bound; false when they
// do not fit.
func (b *boundedBody) charge(n int64) bool {
	if n <= 0 {
		return true
	}
	if !b.h.inflight.TryAcquire(n * InflightFactor) {
		return false
	}
	b.charged += n * InflightFactor
	b.h.metrics.InflightBytes(n * InflightFactor)
	return true
}

func (b *boundedBody) release() {
	if b.charged > 0 {
		b.h.inflight.Release(b.charged)
		b.h.metrics.InflightBytes(-b.charged)
		b.charged = 0
	}
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.ended {
		return 0, io.EOF
	}
	if b.deadline.IsZero() {
		b.setDeadline()
	}
	n, err := b.body.Read(p)
	if !b.sized && !b.charge(int64(n)) {
		b.h.metrics.Bounded(metrics.BoundInflightBytes)
		b.w.Header().Set("Retry-After", "1")
		b.stop()
		return 0, errBusy
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		b.h.metrics.Bounded(metrics.BoundBodyTimeout)
		err = &chat.Error{Status: http.StatusRequestTimeout, Type: chat.TypeInvalidRequest, Code: "request_body_timeout",
			Message: fmt.Sprintf("the request body did not arrive within %s", b.limit())}
	}
	switch {
	case err == io.EOF:
		b.end()
	case err != nil:
		b.stop()
	}
	return n, err
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

// setDeadline sets the read deadline of the connection, from the first
// read of the body on.
func (b *boundedBody) setDeadline() {
	b.deadline = time.Now()
	if d := b.limit(); d > 0 {
		b.deadline = b.deadline.Add(d)
		_ = http.NewResponseController(b.w).SetReadDeadline(b.deadline) // unsupported: the request timeout still ends the handler
	}
}

// end clears the read deadline once the body is read: net/http then
// reads the connection in the background to learn that the client left,
// and that read must not time out during a long stream. (net/http clears
// it too as it starts that read; this does not rely on it.)
func (b *boundedBody) end() {
	b.ended = true
	if b.limit() > 0 {
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
