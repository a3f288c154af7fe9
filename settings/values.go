package settings

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/phasegate/phasegate/proxy"
)

// resolver reads the values of the settings, collecting an error for each
// one that is not what its setting allows.
type resolver struct {
	v    map[*Setting]Value
	errs []error
	// port is PORT's value, when it gives the listen address.
	port *Value
}

// bad records that s's value breaks rule, naming the setting as written.
func (r *resolver) bad(s *Setting, rule string) {
	r.errs = append(r.errs, fmt.Errorf("%s: %s", s.written(r.v[s]), rule))
}

func (r *resolver) num(s *Setting) int {
	n, err := strconv.Atoi(strings.TrimSpace(r.v[s].Raw))
	if err != nil || n < s.min {
		r.bad(s, fmt.Sprintf("must be a whole number of %d or more", s.min))
	}
	return n
}

func (r *resolver) dur(s *Setting) time.Duration {
	raw := strings.TrimSpace(r.v[s].Raw)
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 {
		rule := "must be a duration of 0 or more, with a unit: 500ms, 30s, 2m, 1h"
		if _, nerr := strconv.Atoi(raw); nerr == nil {
			rule += " (" + raw + "s for seconds)"
		}
		r.bad(s, rule)
	}
	return d
}

// decimal reads a number of 0 or more, such as 2.50.
func (r *resolver) decimal(s *Setting) float64 {
	n, err := strconv.ParseFloat(strings.TrimSpace(r.v[s].Raw), 64)
	if err != nil || !(n >= 0) || math.IsInf(n, 0) {
		r.bad(s, "must be a number of 0 or more, such as 2.50")
	}
	return n
}

// positiveDur reads a duration that must be more than 0.
func (r *resolver) positiveDur(s *Setting) time.Duration {
	d := r.dur(s)
	if d == 0 {
		r.bad(s, "must be a duration of more than 0, with a unit: 50ms, 1s")
	}
	return d
}

func (r *resolver) boolean(s *Setting) bool {
	switch strings.ToLower(strings.TrimSpace(r.v[s].Raw)) {
	case "true", "1", "yes", "on":
		return true
	case "false", "0", "no", "off":
		return false
	}
	r.bad(s, "must be true or false")
	return false
}

func (r *resolver) choice(s *Setting) string {
	raw := strings.TrimSpace(r.v[s].Raw)
	if !slices.Contains(s.choices, raw) {
		r.bad(s, "must be "+orList(s.choices))
	}
	return raw
}

// redisURL reads REDIS_URL: empty, or a redis:// or rediss:// URL with a
// host. The value is a secret (it may hold a password) and never shown.
func (r *resolver) redisURL() proxy.Secret {
	raw := strings.TrimSpace(r.v[RedisURL].Raw)
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
		r.bad(RedisURL, "must be a redis:// or rediss:// URL with a host, such as redis://redis:6379/0")
	}
	return proxy.Secret(raw)
}

func (r *resolver) baseURL(s *Setting) string {
	raw := strings.TrimSpace(r.v[s].Raw)
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		r.bad(s, "must be an http:// or https:// URL with a host, such as "+s.def)
	case u.RawQuery != "" || u.Fragment != "":
		r.bad(s, "must be an API root without a query or fragment, such as "+s.def)
	}
	return raw
}

// listenAddr returns the address to listen on: LISTEN_ADDR as host:port,
// a bare port taken as ":port"; PORT, when LISTEN_ADDR is unset, stands
// for it.
func (r *resolver) listenAddr() string {
	if r.port != nil {
		raw := strings.TrimSpace(r.port.Raw)
		if !isPort(raw) {
			r.errs = append(r.errs, fmt.Errorf("PORT=%s: must be a port number, 0 to 65535 (or set LISTEN_ADDR)", r.port.Raw))
			return ""
		}
		return ":" + raw
	}
	return r.addr(ListenAddr, "such as :8080, 127.0.0.1:8080 or 8080")
}

// adminAddr reads ADMIN_LISTEN_ADDR: empty, host:port, or a port alone.
func (r *resolver) adminAddr() string {
	if strings.TrimSpace(r.v[AdminListenAddr].Raw) == "" {
		return ""
	}
	return r.addr(AdminListenAddr, "such as 127.0.0.1:9090 or 9090")
}

// addr reads host:port, or a port alone taken as ":port".
func (r *resolver) addr(s *Setting, example string) string {
	raw := strings.TrimSpace(r.v[s].Raw)
	if isPort(raw) {
		return ":" + raw
	}
	host, port, err := net.SplitHostPort(raw)
	if err != nil || !isPort(port) || strings.ContainsAny(host, " /") {
		r.bad(s, "must be host:port or a port alone, "+example)
	}
	return raw
}

func isPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n <= 65535 && s[0] != '+' && s[0] != '-'
}

// ListenAddress returns the address the gateway listens on as the
// environment configures it (LISTEN_ADDR, else PORT, else the default),
// by the gateway's own rules.
func ListenAddress(getenv func(string) string) (string, error) {
	r := &resolver{v: map[*Setting]Value{ListenAddr: {Raw: ListenAddr.def}}}
	if raw := getenv(ListenAddr.env); raw != "" {
		r.v[ListenAddr] = Value{Raw: raw, Source: Source{From: FromEnv}}
	} else if port := getenv("PORT"); port != "" {
		r.port = &Value{Raw: port, Source: Source{From: FromEnv}}
	}
	addr := r.listenAddr()
	if len(r.errs) > 0 {
		return "", r.errs[0]
	}
	return addr, nil
}

// fallbacks reads MODEL_FALLBACKS: MODEL=FALLBACK items.
func (r *resolver) fallbacks() []proxy.Fallback {
	var out []proxy.Fallback
	for _, item := range list(r.v[ModelFallbacks].Raw) {
		pattern, model, ok := strings.Cut(item, "=")
		pattern, model = strings.TrimSpace(pattern), strings.TrimSpace(model)
		if !ok || pattern == "" || model == "" {
			r.bad(ModelFallbacks, "must be MODEL=FALLBACK items, comma-separated, such as deepseek-v4-pro=deepseek-v4-flash")
			continue
		}
		out = append(out, proxy.Fallback{Pattern: pattern, Model: model})
	}
	return out
}

// fieldSettings are the settings that give each field of proxy.Config
// the proxy checks, by the field's name.
var fieldSettings = map[string]*Setting{
	"MaxBodyBytes":               MaxBodyBytes,
	"MaxEventBytes":              MaxEventBytes,
	"MaxInflightBytes":           MaxInflightBytes,
	"ClientKeys":                 PhasegateAPIKeys,
	"PassThrough":                PassthroughEndpoints,
	"ForwardHeaders":             ForwardHeaders,
	"TrustedProxies":             TrustedProxies,
	"Retry.Attempts":             UpstreamRetries,
	"Retry.MaxWait":              UpstreamRetryMaxWait,
	"Timeouts.Connect":           UpstreamConnectTimeout,
	"Timeouts.FirstByte":         UpstreamFirstByteTimeout,
	"Timeouts.Idle":              UpstreamIdleTimeout,
	"Timeouts.Request":           RequestTimeout,
	"Timeouts.Body":              BodyReadTimeout,
	"RateLimits.KeyRequests":     RateLimitKeyRPM,
	"RateLimits.KeyTokens":       RateLimitKeyTPM,
	"RateLimits.ProjectRequests": RateLimitProjectRPM,
	"RateLimits.ProjectTokens":   RateLimitProjectTPM,
	"RateLimits.AddressRequests": RateLimitAddressRPM,
	"RateLimits.AddressTokens":   RateLimitAddressTPM,
	"Resume.TTL":                 ResumeTTL,
	"Resume.MaxBytes":            ResumeMaxBytes,
	"Resume.MemoryBytes":         ResumeMemoryBytes,
	"ResponsesTTL":               ResponsesTTL,
	"HostedTools":                HostedTools,
	"ReasoningKey":               ReasoningKey,
}

// proxyErrors names the setting of each field the proxy found wrong, as
// the user wrote it (the variable, the flag, or the file key and its
// line). A problem of no single setting keeps the proxy's words.
func (r *resolver) proxyErrors(err error) error {
	var out []error
	for _, e := range unjoin(err) {
		var fe *proxy.FieldError
		if s, ok := fieldSettings[fieldOf(e, &fe)]; ok {
			out = append(out, fmt.Errorf("%s: %s", s.written(r.v[s]), fe.Problem))
			continue
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

func fieldOf(err error, fe **proxy.FieldError) string {
	if errors.As(err, fe) {
		return (*fe).Field
	}
	return ""
}

// unjoin returns the errors err joins, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// orList joins choices as "a", "a or b", "a, b or c".
func orList(choices []string) string {
	if len(choices) <= 1 {
		return strings.Join(choices, "")
	}
	return strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
}

// list splits a comma-separated setting, dropping empty items.
func list(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// clientKeys reads PHASEGATE_API_KEYS: comma-separated keys, each KEY or
// KEY:PROJECT.
func clientKeys(raw string) []proxy.ClientKey {
	var keys []proxy.ClientKey
	for _, item := range strings.Split(raw, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, project, _ := strings.Cut(item, ":")
		keys = append(keys, proxy.ClientKey{Key: proxy.Secret(strings.TrimSpace(key)), Project: strings.TrimSpace(project)})
	}
	return keys
}
