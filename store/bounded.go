package store

// boundedKeys are the keys of a bounded set on Redis: entry prefixes
// each entry's string, age is the sorted set of entries by age, size the
// hash of their sizes, total the sum of those sizes.
type boundedKeys struct{ entry, age, size, total string }

// keysOf returns the keys of the bounded set called name.
func keysOf(name string) boundedKeys {
	return boundedKeys{entry: prefix + name + ":", age: prefix + name + "-age", size: prefix + name + "-size", total: prefix + name + "-bytes"}
}

// list is the keys in the order boundedLua reads them from KEYS.
func (k boundedKeys) list() []string { return []string{k.entry, k.age, k.size, k.total} }

// boundedLua opens the scripts that keep a bounded set of entries on
// Redis (the records of the Responses API, the reasoning by tool call
// id): KEYS are the prefix of each entry's string, the sorted set of
// entries by age, the hash of their sizes and the total of those sizes.
// It defines drop(k), which forgets entry k and its bookkeeping and
// returns how many strings it deleted; keep(k, v, n, now, ttl), which
// stores v under k for ttl ms (0: until dropped) and counts n bytes for
// it, aged now; expire(now, ttl), which drops the entries older than ttl
// ms (0: none); shrink(max), which drops the oldest until the total is
// at most max bytes; and now(), Redis's clock (TIME) in milliseconds, the
// one clock every replica shares: a replica whose own clock ran ahead
// would otherwise age the others' entries early, and one behind would
// keep its own too long.
const boundedLua = `
local pfx, age, size, total = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local function drop(k)
  local n = redis.call('HGET', size, k)
  if n then
    redis.call('DECRBY', total, n)
    redis.call('HDEL', size, k)
  end
  redis.call('ZREM', age, k)
  return redis.call('DEL', pfx .. k)
end
local function keep(k, v, n, now, ttl)
  if ttl > 0 then
    redis.call('SET', pfx .. k, v, 'PX', ttl)
  else
    redis.call('SET', pfx .. k, v)
  end
  redis.call('ZADD', age, now, k)
  redis.call('HSET', size, k, n)
  redis.call('INCRBY', total, n)
end
local function expire(now, ttl)
  if ttl > 0 then
    for _, k in ipairs(redis.call('ZRANGEBYSCORE', age, '-inf', now - ttl)) do drop(k) end
  end
end
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function shrink(max)
  for _ = 1, 100000 do
    if tonumber(redis.call('GET', total) or '0') <= max then break end
    local oldest = redis.call('ZRANGE', age, 0, 0)
    if #oldest == 0 then break end
    drop(oldest[1])
  end
end
`
