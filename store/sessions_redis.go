package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/phasegate/phasegate/session"
)

// RedisSessions keeps the sessions on Redis, shared by every replica: a
// hash per session, kept for the idle TTL of its last charge, and two
// sorted sets of the sessions by deadline (all, and those capped), so
// that a charge can count them and let go of those expired. Every call is
// one script on Redis's clock.
//
// A request makes one call: its opening (Open), which decides it and
// reserves what it is sure to cost. What it spent beyond that (its
// settlement) is owed (Owe) and carried by the replica's next call, of
// any session, unless it decides something (a budget reached, or no
// longer reached), in which case it is charged at once (Charge).
type RedisSessions struct {
	c *redis.Client
	// mu guards owed: the settlements not yet on Redis, oldest first.
	mu   sync.Mutex
	owed []owedCharge
}

// owedCharge is a settlement owed to the session of key.
type owedCharge struct {
	key string
	c   session.Charge
}

// Bounds of the owed settlements.
const (
	// carryMax bounds the settlements one call carries.
	carryMax = 32
	// owedMax bounds those held: past it, Owe charges at once.
	owedMax = 4096
)

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

// sessionFields are the hash's fields, in the order the script reads and
// returns them.
const sessionFields = `'r', 'tc', 'pt', 'crt', 'ct', 'usd', 'up', 'cap', 'start', 'last', 'dec', 'btc', 'btok', 'busd', 'ttl'`

// chargeArgs is how many arguments one charge takes in sessionScript.
const chargeArgs = 15

// sessionScript is every call on the sessions. KEYS[1] and KEYS[2] are
// the sorted sets, then the hash of each charge carried, then, but for a
// flush, the hash of the session called for. ARGV[1] is the call (open,
// charge, look, reset, flush), ARGV[2] the grace (ms) a hash is kept past
// its deadline, ARGV[3] what prefixes the hashes, ARGV[4] the spend
// rate's time constant (ms), ARGV[5] how many charges are carried, then
// chargeArgs arguments each (see charge), then the call's own.
//
// Its reply: whether the session is new, whether the call recorded its
// cap, the sessions held and capped, the budget the request would cross
// (open), whether the session was found, its fields as the call found it
// (after it, for a charge) and after it, how many carried charges
// recorded a cap and each's key and cap, then each session let go: what
// it cost and its cap.
var sessionScript = redis.NewScript(`
local fields = {` + sessionFields + `}
local dl, cp = KEYS[1], KEYS[2]
local call, grace, pre, window = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local t = redis.call('TIME')
t = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ended = {}
local function read(h) return redis.call('HMGET', h, unpack(fields)) end
-- int spells a whole number as Redis stores it (Lua's own tostring turns
-- 15 digits into an exponent).
local function int(x) return string.format('%d', x) end
local function drop(k, h)
  local v = redis.call('HMGET', h, 'usd', 'cap')
  ended[#ended + 1] = v[1] or '0'
  ended[#ended + 1] = v[2] or ''
  redis.call('DEL', h)
  redis.call('ZREM', dl, k)
  redis.call('ZREM', cp, k)
end
local function expire(k, h)
  local dead = redis.call('ZSCORE', dl, k)
  if dead and tonumber(dead) <= t then drop(k, h) end
end
-- charge adds to the session a[i] (hash h) the counters a[i+1..i+7],
-- records the cap a[i+8], else (unless a[i+14] is '1', a reservation)
-- the first budget a[i+9..i+11] a counter reached; decays the spend and
-- adds a[i+6]; keeps the budget, the idle TTL a[i+12] (ms) and the
-- charge's id a[i+13], so that a charge sent again after its reply was
-- lost is applied once. It returns whether the session is new and
-- whether the charge recorded its cap.
local function charge(h, a, i)
  local k = a[i]
  expire(k, h)
  local f = read(h)
  if a[i + 13] ~= '' and redis.call('HGET', h, 'cid') == a[i + 13] then return false, false end
  local function n(j) return tonumber(f[j] or '0') or 0 end
  local c = {}
  for j = 1, 7 do c[j] = n(j) + tonumber(a[i + j]) end
  local cap, last, dec = f[8] or '', tonumber(f[10] or t), n(11)
  if t > last then dec = dec * math.exp(-(t - last) / window) end
  dec = dec + tonumber(a[i + 6])
  local was = cap
  if cap == '' then cap = a[i + 8] end
  if cap == '' and a[i + 14] ~= '1' then
    local btc, btok, busd = tonumber(a[i + 9]), tonumber(a[i + 10]), tonumber(a[i + 11])
    if btc > 0 and c[2] >= btc then cap = 'SESSION_MAX_TOOL_CALLS'
    elseif btok > 0 and math.max(c[3] - c[4], 0) + c[5] >= btok then cap = 'SESSION_MAX_TOKENS'
    elseif busd > 0 and c[6] >= busd then cap = 'SESSION_MAX_USD' end
  end
  local ttl = tonumber(a[i + 12])
  redis.call('HSET', h, 'r', int(c[1]), 'tc', int(c[2]), 'pt', int(c[3]), 'crt', int(c[4]), 'ct', int(c[5]),
    'usd', string.format('%.17g', c[6]), 'up', int(c[7]), 'cap', cap, 'start', f[9] or int(t), 'last', int(t),
    'dec', string.format('%.17g', dec), 'btc', a[i + 9], 'btok', a[i + 10], 'busd', a[i + 11], 'ttl', int(ttl), 'cid', a[i + 13])
  redis.call('PEXPIRE', h, ttl + grace)
  redis.call('ZADD', dl, t + ttl, k)
  if cap ~= '' then redis.call('ZADD', cp, t + ttl, k) end
  return not f[10], was == '' and cap ~= ''
end
-- spent is the budget a request of the session of fields f would cross
-- (see session.State.Spent), with a prompt of p tokens priced at pm and
-- ph a million, or not (priced '0'); and the prompt's misses and dollars.
local function spent(f, a, i, p, pm, ph, priced)
  local function n(j) return tonumber(f[j] or '0') or 0 end
  local ratio = 1
  if n(3) > 0 then ratio = math.max(n(3) - n(4), 0) / n(3) end
  local miss = math.floor(p * ratio)
  local usd = 0
  if priced == '1' then usd = (miss * pm + (p - miss) * ph) / 1e6 end
  local btc, btok, busd = tonumber(a[i + 9]), tonumber(a[i + 10]), tonumber(a[i + 11])
  local s = f[8] or ''
  if s ~= '' then return s, miss, usd end
  if btc > 0 and n(2) >= btc then return 'SESSION_MAX_TOOL_CALLS', miss, usd end
  if btok > 0 and math.max(n(3) - n(4), 0) + n(5) + miss > btok then return 'SESSION_MAX_TOKENS', miss, usd end
  if busd > 0 and n(6) + usd > busd then return 'SESSION_MAX_USD', miss, usd end
  return '', miss, usd
end
local carried, capped = tonumber(ARGV[5]), {}
local rest = 6 + carried * ` + strconv.Itoa(chargeArgs) + `
if call == 'open' or call == 'charge' or call == 'flush' then
  for _, x in ipairs(redis.call('ZRANGEBYSCORE', dl, '-inf', t, 'LIMIT', 0, 32)) do drop(x, pre .. x) end
end
for j = 0, carried - 1 do
  local i = 6 + j * ` + strconv.Itoa(chargeArgs) + `
  local _, cap = charge(KEYS[3 + j], ARGV, i)
  if cap then capped[#capped + 1] = ARGV[i]; capped[#capped + 1] = redis.call('HGET', KEYS[3 + j], 'cap') end
end
local h = KEYS[3 + carried]
local new, cap, found, f, g, s = false, false, false, {}, nil, ''
if call == 'charge' then
  new, cap = charge(h, ARGV, rest)
  f, found = read(h), true
elseif call == 'open' then
  -- ARGV[rest..]: a reservation's charge arguments (its counters unset),
  -- then the prompt, its prices, whether priced, the calls to reserve,
  -- and whether a spent session is refused.
  local o = rest + ` + strconv.Itoa(chargeArgs) + `
  local p = tonumber(ARGV[o])
  expire(ARGV[rest], h)
  f = read(h)
  found = f[10] ~= false
  local miss, usd
  s, miss, usd = spent(f, ARGV, rest, p, tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), ARGV[o + 3])
  if s == '' or ARGV[o + 5] ~= '1' then
    local a = {}
    for j = 0, ` + strconv.Itoa(chargeArgs-1) + ` do a[j + 1] = ARGV[rest + j] end
    a[2], a[4], a[5], a[9] = '1', ARGV[o], int(p - miss), s
    if ARGV[o + 3] == '1' then a[7] = string.format('%.17g', usd) else a[8] = ARGV[o] end
    if s == '' then a[3] = ARGV[o + 4] end
    new, cap = charge(h, a, 1)
    g = read(h)
  end
elseif call == 'look' or call == 'reset' then
  f = read(h)
  found = f[10] ~= false and t < tonumber(f[10]) + tonumber(f[15])
  if call == 'reset' then redis.call('DEL', h); redis.call('ZREM', dl, ARGV[rest]); redis.call('ZREM', cp, ARGV[rest]) end
end
g = g or f
local out = {new and 1 or 0, cap and 1 or 0, redis.call('ZCOUNT', dl, '(' .. t, '+inf'), redis.call('ZCOUNT', cp, '(' .. t, '+inf'), s, found and 1 or 0}
for j = 1, 15 do out[#out + 1] = f[j] or false end
for j = 1, 15 do out[#out + 1] = g[j] or false end
out[#out + 1] = #capped / 2
for _, v in ipairs(capped) do out[#out + 1] = v end
for _, v in ipairs(ended) do out[#out + 1] = v end
return out
`)

// reply is sessionScript's reply, read.
type reply struct {
	session.Charged
	// before is the session as the call found it (after it, for a
	// charge); Charged.State is after it.
	before  session.State
	spent   session.Cap
	found   bool
	settled []session.Settled
}

// run runs sessionScript's call on the session of key ("" for a flush),
// with the call's own arguments, carrying up to carryMax owed settlements
// (but for a look or a reset). Settlements it could not deliver are owed still.
func (r *RedisSessions) run(ctx context.Context, call, key string, own ...any) (reply, error) {
	var carried []owedCharge
	if call != "look" && call != "reset" { // whose callers report no sessions let go
		carried = r.take()
	}
	keys := []string{sessionDeadlines, sessionsCapped}
	args := []any{call, sessionGrace.Milliseconds(), sessionKey, session.RateWindow.Milliseconds(), len(carried)}
	for _, o := range carried {
		keys = append(keys, sessionKey+o.key)
		args = append(args, chargeArguments(o.key, o.c)...)
	}
	if key != "" {
		keys = append(keys, sessionKey+key)
	}
	v, err := sessionScript.Run(ctx, r.c, keys, append(args, own...)...).Slice()
	if err != nil {
		r.giveBack(carried)
		return reply{}, err
	}
	return parseReply(v)
}

// chargeArguments are sessionScript's arguments of charge c of the
// session of key.
func chargeArguments(key string, c session.Charge) []any {
	ttl := c.Budget.IdleTTL
	if ttl <= 0 {
		ttl = time.Hour
	}
	reserve := "0"
	if c.Reserve {
		reserve = "1"
	}
	return []any{key, c.Requests, c.ToolCalls, c.PromptTokens, c.CacheReadTokens, c.CompletionTokens,
		strconv.FormatFloat(c.USD, 'g', -1, 64), c.UnpricedTokens, string(c.Cap), c.Budget.ToolCalls, c.Budget.Tokens,
		strconv.FormatFloat(c.Budget.USD, 'g', -1, 64), ttl.Milliseconds(), c.ID, reserve}
}

// take removes up to carryMax owed settlements, the oldest.
func (r *RedisSessions) take() []owedCharge {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(len(r.owed), carryMax)
	out := slices.Clone(r.owed[:n])
	r.owed = slices.Delete(r.owed, 0, n)
	return out
}

// giveBack owes again the settlements a failed call carried, first: each
// is applied once, should the call have reached Redis after all.
func (r *RedisSessions) giveBack(carried []owedCharge) {
	if len(carried) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.owed = append(carried, r.owed...)
	if len(r.owed) > owedMax {
		r.owed = r.owed[:owedMax] // Redis has failed for long: the newest go uncharged
	}
}

// Owe charges c to the session of key with the next call of this store
// (of any session): a settlement that decides nothing makes no call of
// its own. Past owedMax owed settlements, it charges c at once.
func (r *RedisSessions) Owe(ctx context.Context, key string, c session.Charge) error {
	r.mu.Lock()
	if len(r.owed) < owedMax {
		r.owed = append(r.owed, owedCharge{key: key, c: c})
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	_, err := r.Charge(ctx, key, c)
	return err
}

// Flush charges the settlements owed, in calls of carryMax, and reports
// the sessions the calls let go.
func (r *RedisSessions) Flush(ctx context.Context) ([]session.Ended, error) {
	var ended []session.Ended
	for {
		r.mu.Lock()
		n := len(r.owed)
		r.mu.Unlock()
		if n == 0 {
			return ended, nil
		}
		out, err := r.run(ctx, "flush", "")
		if err != nil {
			return ended, fmt.Errorf("charge sessions: %w", err)
		}
		ended = append(ended, out.Ended...)
	}
}

// Open decides a request of the session of key and charges its
// reservation (see session.State.Open), in one call that carries owed
// settlements.
func (r *RedisSessions) Open(ctx context.Context, key string, o session.Opening) (session.Opened, error) {
	res := session.Charge{Budget: o.Budget, ID: o.ID, Reserve: true}
	priced, reject := "0", "0"
	if o.Priced {
		priced = "1"
	}
	if o.Reject {
		reject = "1"
	}
	own := append(chargeArguments(key, res), o.Prompt, strconv.FormatFloat(o.MissPrice, 'g', -1, 64),
		strconv.FormatFloat(o.HitPrice, 'g', -1, 64), priced, o.Calls, reject)
	out, err := r.run(ctx, "open", key, own...)
	if err != nil {
		return session.Opened{}, fmt.Errorf("open session: %w", err)
	}
	opened := session.Opened{Charged: out.Charged, Spent: out.spent, Settled: out.settled}
	if out.found {
		opened.Before = out.before
	}
	spent, c := opened.Before.Open(o)
	if spent != out.spent {
		return session.Opened{}, fmt.Errorf("open session: Redis decided %q, the gateway %q", out.spent, spent)
	}
	opened.Reserved = c.Counters
	return opened, nil
}

// Charge adds c to the session of key in one call that carries owed
// settlements, and reports it with the sessions that expired meanwhile.
func (r *RedisSessions) Charge(ctx context.Context, key string, c session.Charge) (session.Charged, error) {
	out, err := r.run(ctx, "charge", key, chargeArguments(key, c)...)
	if err != nil {
		return session.Charged{}, fmt.Errorf("charge session: %w", err)
	}
	return out.Charged, nil
}

// Look returns the session of key, and false when Redis holds none (or it
// expired).
func (r *RedisSessions) Look(ctx context.Context, key string) (session.State, bool, error) {
	out, err := r.run(ctx, "look", key, key)
	if err != nil {
		return session.State{}, false, fmt.Errorf("look up session: %w", err)
	}
	if !out.found {
		return session.State{}, false, nil
	}
	return out.State, true, nil
}

// Reset forgets the session of key and returns it as it was (false when
// Redis held none).
func (r *RedisSessions) Reset(ctx context.Context, key string) (session.State, bool, error) {
	out, err := r.run(ctx, "reset", key, key)
	if err != nil {
		return session.State{}, false, fmt.Errorf("reset session: %w", err)
	}
	if !out.found {
		return session.State{}, false, nil
	}
	return out.State, true, nil
}

// parseReply reads sessionScript's reply.
func parseReply(v []any) (reply, error) {
	const head, nFields = 6, 15
	if len(v) < head+2*nFields+1 {
		return reply{}, fmt.Errorf("script replied %d values", len(v))
	}
	var out reply
	out.New, out.Capped = num(v[0]) == 1, num(v[1]) == 1
	out.Active, out.CappedSessions = int(num(v[2])), int(num(v[3]))
	out.spent, out.found = session.Cap(text(v[4])), num(v[5]) == 1
	var err error
	if out.before, err = sessionState(v[head : head+nFields]); err != nil {
		return out, err
	}
	if out.State, err = sessionState(v[head+nFields : head+2*nFields]); err != nil {
		return out, err
	}
	rest := v[head+2*nFields:]
	n := int(num(rest[0]))
	if rest = rest[1:]; len(rest) < 2*n || (len(rest)-2*n)%2 != 0 {
		return out, fmt.Errorf("script replied %d values", len(v))
	}
	for ; n > 0; n, rest = n-1, rest[2:] {
		out.settled = append(out.settled, session.Settled{Key: text(rest[0]), Cap: session.Cap(text(rest[1]))})
	}
	for ; len(rest) >= 2; rest = rest[2:] {
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
