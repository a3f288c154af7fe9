package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/store"
)

// clientIDKey is the context key of a request's client id (see clientID).
type clientIDKey struct{}

// clientAddrKey is the context key of a request's client address, as the
// address limits key it (see clientAddress); absent when they are off.
type clientAddrKey struct{}

// clientAddress is the address the rate limits know a client by: gin's
// ClientIP (X-Forwarded-For is believed only from TRUSTED_PROXIES), an
// IPv6 address taken as its /64, since one host is commonly handed a
// whole /64 to pick addresses from.
func clientAddress(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = a.Unmap()
	if a.Is6() {
		return netip.PrefixFrom(a, 64).Masked().String()
	}
	return a.String()
}

// clientID names the client of a request without its key: a digest of the
// client key it presented (or, with no client keys configured, of the
// bearer token it sends upstream), "anonymous" when it has none. It keys
// the rate limits and owns resumable streams; it is never logged.
func clientID(r *http.Request) string {
	if id, ok := r.Context().Value(clientIDKey{}).(string); ok {
		return id
	}
	if token, ok := cutBearer(r.Header.Get("Authorization")); ok {
		return digest(token)
	}
	return "anonymous"
}

func digest(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:12])
}

// budget is one limit that applies to a request.
type budget struct {
	label     string // the limit label of the metrics
	key       string
	perMinute int
}

// rateBudgets are the budgets of one request, requests and tokens.
type rateBudgets struct {
	requests, tokens []budget
}

func (h *Handler) budgets(r *http.Request, project string) rateBudgets {
	l := h.cfg.RateLimits
	var b rateBudgets
	add := func(list *[]budget, label, key string, n int) {
		if n > 0 {
			*list = append(*list, budget{label: label, key: key, perMinute: n})
		}
	}
	client := "key:" + clientID(r)
	add(&b.requests, "key_requests", "rpm:"+client, l.KeyRequests)
	add(&b.tokens, "key_tokens", "tpm:"+client, l.KeyTokens)
	if project != "" {
		add(&b.requests, "project_requests", "rpm:project:"+project, l.ProjectRequests)
		add(&b.tokens, "project_tokens", "tpm:project:"+project, l.ProjectTokens)
	}
	if addr, ok := r.Context().Value(clientAddrKey{}).(string); ok {
		add(&b.requests, "address_requests", "rpm:address:"+addr, l.AddressRequests)
		add(&b.tokens, "address_tokens", "tpm:address:"+addr, l.AddressTokens)
	}
	return b
}

// errRateLimitUnavailable: the store of the limits failed and
// RATE_LIMIT_FAIL_OPEN is false.
var errRateLimitUnavailable = &chat.Error{Status: http.StatusServiceUnavailable, Type: chat.TypeServer, Code: "rate_limit_unavailable",
	Message: "the rate limits cannot be checked right now; send the request again shortly"}

// admit spends one request and the prompt estimate of c's budgets, and
// writes OpenAI's x-ratelimit-* headers. Over a limit it returns a 429
// (with Retry-After set) and spends nothing: what the budgets before the
// one that refused took is given back.
func (c *chatRequest) admit(ctx context.Context, estimate int) error {
	h := c.h
	if !h.cfg.RateLimits.any() {
		return nil
	}
	c.rates = h.budgets(c.r, c.x.ProjectID)
	var err error
	c.charged, err = h.admitRates(ctx, c.w.Header(), c.rates, max(estimate, 1))
	return err
}

// admitPassThrough spends one request of r's budgets, and bodyBytes/4
// tokens (not corrected afterwards: the gateway does not read the
// answers it passes through), as admit does for a chat request. Only a
// refusal carries the gateway's x-ratelimit-* headers: an answer passed
// through carries the upstream's.
func (h *Handler) admitPassThrough(ctx context.Context, w http.ResponseWriter, r *http.Request, bodyBytes int) error {
	if !h.cfg.RateLimits.any() {
		return nil
	}
	hdr := http.Header{}
	_, err := h.admitRates(ctx, hdr, h.budgets(r, r.Header.Get("X-Project-Id")), bodyBytes/4)
	if err != nil {
		copyHeader(w.Header(), hdr)
	}
	return err
}

// admitRates spends one request and estimate tokens (none when 0) of b,
// writes the x-ratelimit-* headers and, on a refusal, Retry-After to hdr.
// It returns the tokens charged; a refusal charges nothing.
func (h *Handler) admitRates(ctx context.Context, hdr http.Header, b rateBudgets, estimate int) (int, error) {
	reqs, spentReqs, err := h.spend(ctx, b.requests, 1)
	setRateHeaders(hdr, "requests", reqs)
	if err != nil {
		return 0, refused(hdr, err)
	}
	if estimate == 0 {
		return 0, nil
	}
	toks, _, err := h.spend(ctx, b.tokens, estimate)
	setRateHeaders(hdr, "tokens", toks)
	if err != nil {
		h.refund(ctx, spentReqs, 1)
		return 0, refused(hdr, err)
	}
	return estimate, nil
}

// refused sets the Retry-After of a refusal and returns its error.
func refused(hdr http.Header, err error) error {
	var rl *rateLimitError
	if errors.As(err, &rl) {
		hdr.Set("Retry-After", retryAfterSeconds(rl.retryAfter))
		return rl.e
	}
	return err
}

// settle charges the tokens a request spent beyond its estimate, in
// full: a budget may go into debt, and the next requests wait until it is
// paid back (OpenAI's tokens per minute count completion tokens so).
func (c *chatRequest) settle(ctx context.Context) {
	if c.charged == 0 || c.x.Meter == nil {
		return
	}
	extra := c.x.Meter.(*requestMeter).spent - c.charged
	if extra <= 0 {
		return
	}
	for _, b := range c.rates.tokens {
		if _, err := c.h.limiter.Charge(ctx, b.key, b.perMinute, extra); err != nil {
			c.h.metrics.StoreFailed(metrics.StoreRateLimit)
			c.log.Warn("shared store failed; tokens spent beyond the estimate not charged", "error", err)
			return
		}
	}
}

// spend takes n units of each budget in turn and returns the decision of
// the tightest and the budgets it spent. A refusal ends it with a 429,
// and what the budgets before took is given back: a request refused by
// one budget spends none.
func (h *Handler) spend(ctx context.Context, budgets []budget, n int) (*store.Decision, []budget, error) {
	var tightest *store.Decision
	var spent []budget
	for _, b := range budgets {
		d, err := h.limiter.Allow(ctx, b.key, b.perMinute, n)
		if err != nil {
			h.metrics.StoreFailed(metrics.StoreRateLimit)
			if h.cfg.RateLimits.FailOpen {
				h.metrics.RateLimit(b.label, metrics.RateFailedOpen)
				h.log.Warn("shared store failed; rate limit not applied (RATE_LIMIT_FAIL_OPEN)", "limit", b.label, "error", err)
				continue
			}
			h.metrics.RateLimit(b.label, metrics.RateFailedClosed)
			h.log.Warn("shared store failed; request refused (RATE_LIMIT_FAIL_OPEN=false)", "limit", b.label, "error", err)
			h.refund(ctx, spent, n)
			return tightest, nil, errRateLimitUnavailable
		}
		if tightest == nil || d.Remaining < tightest.Remaining || !d.Allowed {
			tightest = &d
		}
		if !d.Allowed {
			h.metrics.RateLimit(b.label, metrics.RateLimited)
			h.refund(ctx, spent, n)
			return tightest, nil, rateLimited(b, n, d)
		}
		spent = append(spent, b)
		h.metrics.RateLimit(b.label, metrics.RateAllowed)
	}
	return tightest, spent, nil
}

// refund gives back n units of each of budgets, spent by a request that
// was refused after all.
func (h *Handler) refund(ctx context.Context, budgets []budget, n int) {
	for _, b := range budgets {
		if _, err := h.limiter.Charge(ctx, b.key, b.perMinute, -n); err != nil {
			h.metrics.StoreFailed(metrics.StoreRateLimit)
			h.log.Warn("shared store failed; units of a refused request not given back", "limit", b.label, "error", err)
			return
		}
	}
}

// rateLimited is the 429 of budget b refusing n units, in OpenAI's
// shape: type "requests" or "tokens", code rate_limit_exceeded.
func rateLimited(b budget, n int, d store.Decision) *rateLimitError {
	unit := "requests"
	if strings.HasSuffix(b.label, "_tokens") {
		unit = "tokens"
	}
	whose := "this API key"
	switch {
	case strings.HasPrefix(b.label, "project_"):
		whose = "this project"
	case strings.HasPrefix(b.label, "address_"):
		whose = "this client address"
	}
	msg := "Rate limit reached for " + whose + ": " + strconv.Itoa(d.Limit) + " " + unit + " per minute"
	if n > d.Limit {
		msg += "; this request alone needs " + strconv.Itoa(n) + " " + unit
	}
	msg += ". Please try again in " + strconv.FormatFloat(d.RetryAfter.Seconds(), 'f', 1, 64) + "s."
	return &rateLimitError{e: &chat.Error{Status: http.StatusTooManyRequests, Type: unit, Code: "rate_limit_exceeded", Message: msg},
		retryAfter: d.RetryAfter}
}

// rateLimitError is a 429 and how long to wait.
type rateLimitError struct {
	e          *chat.Error
	retryAfter time.Duration
}

func (e *rateLimitError) Error() string { return e.e.Error() }
func (e *rateLimitError) Unwrap() error { return e.e }

// setRateHeaders writes OpenAI's x-ratelimit-{limit,remaining,reset}-kind
// headers of decision d (nil: none applies).
func setRateHeaders(h http.Header, kind string, d *store.Decision) {
	if d == nil {
		return
	}
	h.Set("X-Ratelimit-Limit-"+kind, strconv.Itoa(d.Limit))
	h.Set("X-Ratelimit-Remaining-"+kind, strconv.Itoa(d.Remaining))
	h.Set("X-Ratelimit-Reset-"+kind, formatReset(d.ResetAfter))
}

// formatReset spells a wait as OpenAI does: "1s", "6m0s", "20ms".
func formatReset(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	}
	return d.Round(time.Second).String()
}

// retryAfterSeconds is the Retry-After of a wait: whole seconds, rounded
// up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	return strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10)
}
