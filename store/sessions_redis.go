package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/phasegate/phasegate/session"
)

// RedisSessions keeps the sessions on Redis, shared by every replica: a
// hash per session, kept for the idle TTL of its last charge, and two
// sorted sets of the sessions by deadline (all, and those capped), so
// that a charge can count them and let go of those expired. Every charge
// is one script on Redis's clock.
type RedisSessions struct {
	c *redis.Client
}

// NewRedisSessions returns the sessions of r.
func NewRedisSessions(r *Redis) *RedisSessions { return &RedisSessions{c: r.c} }

// The keys: sessionKey + a session's key is its hash; the sorted sets
// hold every session key by the time (ms, Redis's clock) it expires.
const (
	sessionKey       = prefix + "session:"
	sessionDeadlines = prefix + "sessions-deadline"
	sessionsCapped   = prefix + "sessions-capped"
	// sessionGrace keeps a session's hash past its deadline, until a
	// charge lets it go and reports what it cost.
	sessionGrace = time.Hour
)

// sessionFields are the hash's fields, in the order the scripts read and
// return them.
const sessionFields = `'r', 'tc', 'pt', 'crt', 'ct', 'usd', 'up', 'cap', 'start', 'last', 'dec', 'btc', 'btok', 'busd', 'ttl'`

// sessionLua opens the session scripts: now() is Redis's clock in ms;
// read(h) is the fields of hash h in sessionFields' order; drop(k, h, out)
// forgets session k (hash h), adding what it cost and its cap to out;
// int(x) spells a whole number as Redis stores it (Lua's own tostring
// turns 15 digits into an exponent).
const sessionLua = `
local fields = {` + sessionFields + `}
local dl, cp = KEYS[2], KEYS[3]
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function read(h) return redis.call('HMGET', h, unpack(fields)) end
local function int(x) return string.format('%d', x) end
local function drop(k, h, out)
  local v = redis.call('HMGET', h, 'usd', 'cap')
  out[#out + 1] = v[1] or '0'
  out[#out + 1] = v[2] or ''
  redis.call('DEL', h)
  redis.call('ZREM', dl, k)
  redis.call('ZREM', cp, k)
end
`

// sessionLookScript returns the fields of the session at KEYS[1], or nil
// when it has none or it expired.
var sessionLookScript = redis.NewScript(sessionLua + `
local f = read(KEYS[1])
if not f[10] or now() >= tonumber(f[10]) + tonumber(f[15]) then return nil end
return f
`)

// sessionChargeScript charges the session ARGV[1] (hash KEYS[1]): it
// lets go of up to 32 expired sessions (ARGV[15] prefixes their hashes),
// the charged one too if it expired; adds the counters ARGV[2..8];
// decays the spend (time constant ARGV[16] ms) and adds ARGV[7]; records
// the cap ARGV[9], else the first budget (ARGV[10..12]) a counter
// reached; keeps the budget and the idle TTL ARGV[13] (ms); and returns
// whether the session is new, whether this charge capped it, the sessions
// held and capped, its fields, then what each session let go cost and its
// cap.
var sessionChargeScript = redis.NewScript(sessionLua + `
local h, k, t = KEYS[1], ARGV[1], now()
local ended = {}
for _, x in ipairs(redis.call('ZRANGEBYSCORE', dl, '-inf', t, 'LIMIT', 0, 32)) do drop(x, ARGV[15] .. x, ended) end
local dead = redis.call('ZSCORE', dl, k)
if dead and tonumber(dead) <= t then drop(k, h, ended) end
local f = read(h)
local new = not f[10]
local function n(i) return tonumber(f[i] or '0') or 0 end
local c = {}
for i = 1, 7 do c[i] = n(i) + tonumber(ARGV[i + 1]) end
local cap, last, dec = f[8] or '', tonumber(f[10] or t), n(11)
if t > last then dec = dec * math.exp(-(t - last) / tonumber(ARGV[16])) end
dec = dec + tonumber(ARGV[7])
local was = cap
if cap == '' then cap = ARGV[9] end
if cap == '' then
  local btc, btok, busd = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
  if btc > 0 and c[2] >= btc then cap = 'SESSION_MAX_TOOL_CALLS'
  elseif btok > 0 and math.max(c[3] - c[4], 0) + c[5] >= btok then cap = 'SESSION_MAX_TOKENS'
  elseif busd > 0 and c[6] >= busd then cap = 'SESSION_MAX_USD' end
end
local ttl = tonumber(ARGV[13])
local usd, decs = string.format('%.17g', c[6]), string.format('%.17g', dec)
redis.call('HSET', h, 'r', int(c[1]), 'tc', int(c[2]), 'pt', int(c[3]), 'crt', int(c[4]), 'ct', int(c[5]), 'usd', usd,
  'up', int(c[7]), 'cap', cap, 'start', f[9] or int(t), 'last', int(t), 'dec', decs, 'btc', ARGV[10], 'btok', ARGV[11],
  'busd', ARGV[12], 'ttl', int(ttl))
redis.call('PEXPIRE', h, ttl + tonumber(ARGV[14]))
redis.call('ZADD', dl, t + ttl, k)
if cap ~= '' then redis.call('ZADD', cp, t + ttl, k) end
local out = {new and 1 or 0, (was == '' and cap ~= '') and 1 or 0,
  redis.call('ZCOUNT', dl, '(' .. t, '+inf'), redis.call('ZCOUNT', cp, '(' .. t, '+inf')}
for _, v in ipairs(read(h)) do out[#out + 1] = v end
for _, v in ipairs(ended) do out[#out + 1] = v end
return out
`)

// sessionResetScript forgets the session ARGV[1] (hash KEYS[1]) and
// returns its fields, or nil when it had none or it had expired.
var sessionResetScript = redis.NewScript(sessionLua + `
local f = read(KEYS[1])
local live = f[10] and now() < tonumber(f[10]) + tonumber(f[15])
drop(ARGV[1], KEYS[1], {})
if not live then return nil end
return f
`)

func (r *RedisSessions) keys(key string) []string {
	return []string{sessionKey + key, sessionDeadlines, sessionsCapped}
}

// Look returns the session of key, and false when Redis holds none (or it
// expired).
func (r *RedisSessions) Look(ctx context.Context, key string) (session.State, bool, error) {
	v, err := sessionLookScript.Run(ctx, r.c, r.keys(key)).Slice()
	if errors.Is(err, redis.Nil) {
		return session.State{}, false, nil
	}
	if err != nil {
		return session.State{}, false, fmt.Errorf("look up session: %w", err)
	}
	st, err := sessionState(v)
	if err != nil {
		return session.State{}, false, fmt.Errorf("look up session: %w", err)
	}
	return st, true, nil
}

// Charge adds c to the session of key in one script, and reports it with
// the sessions that expired meanwhile.
func (r *RedisSessions) Charge(ctx context.Context, key string, c session.Charge) (session.Charged, error) {
	ttl := c.Budget.IdleTTL
	if ttl <= 0 {
		ttl = time.Hour
	}
	args := []any{key, c.Requests, c.ToolCalls, c.PromptTokens, c.CacheReadTokens, c.CompletionTokens,
		strconv.FormatFloat(c.USD, 'g', -1, 64), c.UnpricedTokens, string(c.Cap), c.Budget.ToolCalls, c.Budget.Tokens,
		strconv.FormatFloat(c.Budget.USD, 'g', -1, 64), ttl.Milliseconds(), sessionGrace.Milliseconds(), sessionKey,
		session.RateWindow.Milliseconds()}
	v, err := sessionChargeScript.Run(ctx, r.c, r.keys(key), args...).Slice()
	if err != nil {
		return session.Charged{}, fmt.Errorf("charge session: %w", err)
	}
	out, err := chargedReply(v)
	if err != nil {
		return session.Charged{}, fmt.Errorf("charge session: %w", err)
	}
	return out, nil
}

// Reset forgets the session of key and returns it as it was (false when
// Redis held none).
func (r *RedisSessions) Reset(ctx context.Context, key string) (session.State, bool, error) {
	v, err := sessionResetScript.Run(ctx, r.c, r.keys(key), key).Slice()
	if errors.Is(err, redis.Nil) {
		return session.State{}, false, nil
	}
	if err != nil {
		return session.State{}, false, fmt.Errorf("reset session: %w", err)
	}
	st, err := sessionState(v)
	if err != nil {
		return session.State{}, false, fmt.Errorf("reset session: %w", err)
	}
	return st, true, nil
}

// chargedReply reads sessionChargeScript's reply.
func chargedReply(v []any) (session.Charged, error) {
	const head, nFields = 4, 15
	if len(v) < head+nFields || (len(v)-head-nFields)%2 != 0 {
		return session.Charged{}, fmt.Errorf("script replied %d values", len(v))
	}
	var out session.Charged
	out.New, out.Capped = num(v[0]) == 1, num(v[1]) == 1
	out.Active, out.CappedSessions = int(num(v[2])), int(num(v[3]))
	var err error
	if out.State, err = sessionState(v[head : head+nFields]); err != nil {
		return out, err
	}
	for rest := v[head+nFields:]; len(rest) >= 2; rest = rest[2:] {
		usd, _ := strconv.ParseFloat(text(rest[0]), 64)
		out.Ended = append(out.Ended, session.Ended{USD: usd, Outcome: session.State{Capped: session.Cap(text(rest[1]))}.Outcome()})
	}
	return out, nil
}

// sessionState reads a session's fields, in sessionFields' order.
func sessionState(v []any) (session.State, error) {
	if len(v) != 15 {
		return session.State{}, fmt.Errorf("a session of %d fields", len(v))
	}
	var bad error
	i := func(k int) int64 {
		n, err := strconv.ParseInt(text(v[k]), 10, 64)
		if err != nil && v[k] != nil {
			bad = fmt.Errorf("session field %d: %w", k, err)
		}
		return n
	}
	f := func(k int) float64 {
		n, err := strconv.ParseFloat(text(v[k]), 64)
		if err != nil && v[k] != nil {
			bad = fmt.Errorf("session field %d: %w", k, err)
		}
		return n
	}
	st := session.State{
		Counters: session.Counters{Requests: i(0), ToolCalls: i(1), PromptTokens: i(2), CacheReadTokens: i(3), CompletionTokens: i(4),
			USD: f(5), UnpricedTokens: i(6)},
		Capped: session.Cap(text(v[7])), Started: time.UnixMilli(i(8)), Last: time.UnixMilli(i(9)), Decayed: f(10),
		Budget: session.Budget{ToolCalls: i(11), Tokens: i(12), USD: f(13), IdleTTL: time.Duration(i(14)) * time.Millisecond},
	}
	return st, bad
}

// text is a reply value as a string ("" for nil).
func text(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

// num is a reply value as a whole number (0 when it is none).
func num(v any) int64 {
	n, _ := strconv.ParseInt(text(v), 10, 64)
	return n
}
