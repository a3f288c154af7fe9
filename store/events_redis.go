package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStreams keeps the events of resumable streams on Redis, so any
// replica can replay them and follow them live: one Redis stream per
// request (entry ids 0-N, N the event's position, so XREAD after 0-N is
// "starting after N") and a hash of what is known of it. A cancel is
// published on a channel every replica watches.
type RedisStreams struct {
	r   *Redis
	ttl time.Duration
}

// NewRedisStreams returns the stream store of r; each stream is kept for
// ttl after its last event.
func NewRedisStreams(r *Redis, ttl time.Duration) *RedisStreams {
	return &RedisStreams{r: r, ttl: ttl}
}

const (
	streamKey     = prefix + "stream:"
	streamInfoKey = prefix + "stream-info:"
	cancelChannel = prefix + "cancel"
)

// Start opens stream id, owned by owner.
func (s *RedisStreams) Start(ctx context.Context, id, owner string) error {
	info := streamInfoKey + id
	var set *redis.BoolCmd
	_, err := s.r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		set = p.HSetNX(ctx, info, "owner", owner)
		p.PExpire(ctx, info, s.ttl)
		return nil
	})
	if err != nil {
		return fmt.Errorf("start stream: %w", err)
	}
	if !set.Val() {
		return ErrExists
	}
	return nil
}

// appendScript adds events to a stream in one call: ARGV[1] is the TTL
// in ms, ARGV[2] "1" to end the stream, then per event its position,
// data and phase index ("" when it starts no phase). One script rather
// than MULTI and a command per event: a stream whose events come one at a
// time pays one short command per event.
//
// It is idempotent: positions already stored are skipped, and an ended
// stream takes nothing more. A call whose reply was lost (retried by the
// client, or by the recorder) then succeeds rather than failing on an
// entry id "equal or smaller than the target stream top item".
var appendScript = redis.NewScript(`
local key, info = KEYS[1], KEYS[2]
local ttl = tonumber(ARGV[1])
if redis.call('EXISTS', info) == 0 then
  return -1
end
if redis.call('HGET', info, 'ended') ~= '1' then
  local last = 0
  local top = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)
  if #top > 0 then
    last = tonumber(string.sub(top[1][1], 3))
  end
  for i = 3, #ARGV, 3 do
    if tonumber(ARGV[i]) > last then
      redis.call('XADD', key, '0-' .. ARGV[i], 'd', ARGV[i + 1])
      last = tonumber(ARGV[i])
      if ARGV[i + 2] ~= '' then
        redis.call('HSETNX', info, 'p:' .. ARGV[i + 2], ARGV[i])
      end
    end
  end
  if ARGV[2] == '1' then
    redis.call('XADD', key, '0-*', 'e', '1')
    redis.call('HSET', info, 'ended', '1')
  end
end
if redis.call('EXISTS', key) == 1 then
  redis.call('PEXPIRE', key, ttl)
end
redis.call('PEXPIRE', info, ttl)
return 0
`)

// Append adds events (numbered by the caller, in order) to stream id;
// end marks its last. One round trip. Events at positions already stored
// are skipped, so a batch may be sent again after a failure. An empty
// batch keeps the stream for another ttl; a stream that expired is
// ErrNotFound.
func (s *RedisStreams) Append(ctx context.Context, id string, events []Event, end bool) error {
	args := make([]any, 0, 2+3*len(events))
	endArg := "0"
	if end {
		endArg = "1"
	}
	args = append(args, s.ttl.Milliseconds(), endArg)
	for _, ev := range events {
		phase := ""
		if ev.PhaseStart {
			phase = strconv.Itoa(ev.PhaseIndex)
		}
		args = append(args, ev.N, ev.Data, phase)
	}
	n, err := appendScript.Run(ctx, s.r.c, []string{streamKey + id, streamInfoKey + id}, args...).Int()
	if err != nil {
		return fmt.Errorf("append %d events to stream: %w", len(events), err)
	}
	if n < 0 {
		return ErrNotFound // expired: a log is never made again without its owner
	}
	return nil
}

// failScript ends a stream that failed before its first event: ARGV[1]
// is the TTL in ms, ARGV[2] the status, ARGV[3] the error body.
var failScript = redis.NewScript(`
local key, info = KEYS[1], KEYS[2]
if redis.call('HGET', info, 'ended') ~= '1' and redis.call('EXISTS', key) == 0 then
  redis.call('XADD', key, '0-1', 'd', ARGV[3])
  redis.call('XADD', key, '0-*', 'e', '1')
  redis.call('HSET', info, 'ended', '1', 'status', ARGV[2])
  redis.call('PEXPIRE', key, tonumber(ARGV[1]))
end
redis.call('PEXPIRE', info, tonumber(ARGV[1]))
return 0
`)

// Fail ends stream id, which failed before its first event: its log holds
// only body, the error its client was answered with status, at position 1.
func (s *RedisStreams) Fail(ctx context.Context, id string, status int, body []byte) error {
	if err := failScript.Run(ctx, s.r.c, []string{streamKey + id, streamInfoKey + id}, s.ttl.Milliseconds(), status, body).Err(); err != nil {
		return fmt.Errorf("end failed stream: %w", err)
	}
	return nil
}

// Read returns the events of stream id after position after, waiting up
// to wait for one when there is none yet, and whether the stream has
// ended (with no event after those returned).
func (s *RedisStreams) Read(ctx context.Context, id string, after int, wait time.Duration) ([]Event, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, max(wait, time.Millisecond)+s.r.timeout)
	defer cancel()
	res, err := s.r.blocking.XRead(ctx, &redis.XReadArgs{
		Streams: []string{streamKey + id, "0-" + strconv.Itoa(after)},
		Count:   1024,
		Block:   max(wait, time.Millisecond),
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read stream after %d: %w", after, err)
	}
	var evs []Event
	for _, st := range res {
		for _, m := range st.Messages {
			if _, end := m.Values["e"]; end {
				return evs, true, nil
			}
			n, _ := strconv.Atoi(strings.TrimPrefix(m.ID, "0-"))
			d, _ := m.Values["d"].(string)
			evs = append(evs, Event{N: n, Data: []byte(d)})
		}
	}
	return evs, false, nil
}

// MaxFollowers is how many reads may wait at once: the connections of
// the pool blocking reads have to themselves.
func (s *RedisStreams) MaxFollowers() int { return s.r.followers }

// Info returns what is known of stream id.
func (s *RedisStreams) Info(ctx context.Context, id string) (StreamInfo, error) {
	h, err := s.r.c.HGetAll(ctx, streamInfoKey+id).Result()
	if err != nil {
		return StreamInfo{}, fmt.Errorf("read stream info: %w", err)
	}
	owner, ok := h["owner"]
	if !ok {
		return StreamInfo{}, ErrNotFound
	}
	info := StreamInfo{Owner: owner, Ended: h["ended"] == "1", Cancelled: h["cancelled"] == "1", Phases: map[int]int{}}
	info.Status, _ = strconv.Atoi(h["status"])
	for k, v := range h {
		if idx, ok := strings.CutPrefix(k, "p:"); ok {
			i, err1 := strconv.Atoi(idx)
			n, err2 := strconv.Atoi(v)
			if err1 == nil && err2 == nil {
				info.Phases[i] = n
			}
		}
	}
	return info, nil
}

// cancelScript marks the stream of KEYS[1] cancelled and tells every
// replica, unless it ended: a stream that finished stays whole for its
// replays. It returns -1 for a stream it does not hold.
var cancelScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if redis.call('HGET', KEYS[1], 'ended') == '1' then
  return 0
end
redis.call('HSET', KEYS[1], 'cancelled', '1')
redis.call('PUBLISH', ARGV[1], ARGV[2])
return 1
`)

// Cancel marks stream id cancelled and tells every replica that watches,
// unless it ended already.
func (s *RedisStreams) Cancel(ctx context.Context, id string) error {
	n, err := cancelScript.Run(ctx, s.r.c, []string{streamInfoKey + id}, cancelChannel, id).Int()
	if err != nil {
		return fmt.Errorf("cancel stream: %w", err)
	}
	if n < 0 {
		return ErrNotFound
	}
	return nil
}

// Watch calls cancelled with the id of every stream cancelled on any
// replica, until ctx is done; ready is called once the subscription is
// confirmed (or after 2 seconds without Redis). The subscription survives a Redis restart
// (go-redis subscribes again); cancels sent while Redis was down are
// lost, but marked on the stream, so a resume still answers 409.
func (s *RedisStreams) Watch(ctx context.Context, cancelled func(id string), ready func()) {
	sub := s.r.c.Subscribe(ctx, cancelChannel)
	defer sub.Close()
	wait, stop := context.WithTimeout(ctx, 2*time.Second)
	_, _ = sub.Receive(wait) // the confirmation, so a cancel sent after Watch started is seen
	stop()
	ready()
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			cancelled(m.Payload)
		}
	}
}
