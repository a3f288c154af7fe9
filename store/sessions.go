package store

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/phasegate/phasegate/session"
)

// Bounds of MemorySessions.
const (
	// DefaultSessionMemoryBytes bounds what MemorySessions hold.
	DefaultSessionMemoryBytes = 16 << 20
	// DefaultMaxSessions bounds how many sessions MemorySessions hold.
	DefaultMaxSessions = 100_000
	// sweepBatch bounds the expired sessions one charge lets go, so that a
	// charge costs the same whatever expired meanwhile.
	sweepBatch = 32
	// memSessionBytes is what one session costs besides its key: the
	// state, the list element and the map's entry.
	memSessionBytes = 320
)

// MemorySessions keeps the sessions of this process, least recently used
// first to go: bounded in count and in bytes, each kept for the idle TTL of
// its last charge. It evicts as package lru's caches do (plain recency)
// and keeps what they have no room for: a TTL per entry that moves with
// each charge, the sessions that end reported with what they cost, and a
// count of those capped. It is safe for concurrent use.
type MemorySessions struct {
	mu       sync.Mutex
	byKey    map[string]*list.Element // of *memSession
	order    *list.List               // front: the most recently used
	bytes    int64
	maxBytes int64
	maxCount int
	capped   int // sessions held with a spent budget
	// ended are the sessions let go since the last charge (expired,
	// evicted), reported with the next charge; a reset is its caller's to
	// report.
	ended []session.Ended
	now   func() time.Time
}

type memSession struct {
	key string
	st  session.State
}

// NewMemorySessions returns an empty store of at most maxCount sessions
// and maxBytes bytes (0: the defaults).
func NewMemorySessions(maxBytes int64, maxCount int) *MemorySessions {
	if maxBytes <= 0 {
		maxBytes = DefaultSessionMemoryBytes
	}
	if maxCount <= 0 {
		maxCount = DefaultMaxSessions
	}
	return &MemorySessions{byKey: map[string]*list.Element{}, order: list.New(), maxBytes: maxBytes, maxCount: maxCount, now: time.Now}
}

// SetClock replaces the store's clock; for tests.
func (m *MemorySessions) SetClock(now func() time.Time) { m.now = now }

// Look returns the session of key, and false when the store holds none
// (never charged, expired, reset or forgotten).
func (m *MemorySessions) Look(_ context.Context, key string) (session.State, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.held(key, m.now())
	if !ok {
		return session.State{}, false, nil
	}
	return e.Value.(*memSession).st, true, nil
}

// held returns the element of key unless it expired at now, in which case
// it is let go; m.mu is held.
func (m *MemorySessions) held(key string, now time.Time) (*list.Element, bool) {
	e, ok := m.byKey[key]
	if !ok {
		return nil, false
	}
	if s := e.Value.(*memSession); s.st.Expired(now) {
		m.ended = append(m.ended, m.remove(e, s.st.Outcome()))
		return nil, false
	}
	return e, true
}

// Charge adds c to the session of key (a new one when the store holds
// none) and reports it, with the sessions that ended since the last
// charge.
func (m *MemorySessions) Charge(_ context.Context, key string, c session.Charge) (session.Charged, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.sweep(now)
	return m.charge(key, c, now), nil
}

// charge adds c to the session of key at now and reports it; m.mu is
// held.
func (m *MemorySessions) charge(key string, c session.Charge, now time.Time) session.Charged {
	e, ok := m.held(key, now)
	var out session.Charged
	if !ok {
		e = m.order.PushFront(&memSession{key: key})
		m.byKey[key] = e
		m.bytes += m.cost(key)
		out.New = true
	}
	s := e.Value.(*memSession)
	was := s.st.Capped
	s.st = s.st.Apply(c, now)
	m.order.MoveToFront(e)
	if out.Capped = was == "" && s.st.Capped != ""; out.Capped {
		m.capped++
	}
	m.shrink(e)
	out.State, out.Active, out.CappedSessions = s.st, len(m.byKey), m.capped
	out.Ended, m.ended = m.ended, nil
	return out
}

// Open decides a request of the session of key and charges its
// reservation (see session.State.Open), in one step.
func (m *MemorySessions) Open(_ context.Context, key string, o session.Opening) (session.Opened, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.sweep(now)
	var out session.Opened
	if e, ok := m.held(key, now); ok {
		out.Before = e.Value.(*memSession).st
	}
	spent, c := out.Before.Open(o)
	out.Spent = spent
	if c.Requests == 0 { // refused: nothing reserved
		out.State, out.Active, out.CappedSessions = out.Before, len(m.byKey), m.capped
		out.Ended, m.ended = m.ended, nil
		return out, nil
	}
	out.Charged = m.charge(key, c, now)
	out.Reserved = c.Counters
	return out, nil
}

// Owe charges c to the session of key: in memory, at once. The sessions
// it lets go are reported with the next charge.
func (m *MemorySessions) Owe(_ context.Context, key string, c session.Charge) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.sweep(now)
	m.ended = m.charge(key, c, now).Ended
	return nil
}

// Reset forgets the session of key, and returns it as it was (false when
// the store held none).
func (m *MemorySessions) Reset(_ context.Context, key string) (session.State, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.held(key, m.now())
	if !ok {
		return session.State{}, false, nil
	}
	st := e.Value.(*memSession).st
	m.remove(e, session.OutcomeReset) // the caller reports it
	return st, true, nil
}

// sweep lets go of up to sweepBatch of the least recently used sessions
// that expired; it stops at the first that has not (a session with a long
// TTL may hold back shorter ones behind it until it goes). m.mu is held.
func (m *MemorySessions) sweep(now time.Time) {
	for range sweepBatch {
		e := m.order.Back()
		if e == nil {
			return
		}
		s := e.Value.(*memSession)
		if !s.st.Expired(now) {
			return
		}
		m.ended = append(m.ended, m.remove(e, s.st.Outcome()))
	}
}

// shrink forgets the least recently used sessions, never keep, until the
// bounds hold. m.mu is held.
func (m *MemorySessions) shrink(keep *list.Element) {
	for len(m.byKey) > m.maxCount || m.bytes > m.maxBytes {
		e := m.order.Back()
		if e == nil || e == keep {
			return
		}
		m.ended = append(m.ended, m.remove(e, session.OutcomeEvicted))
	}
}

// remove lets go of e and returns how it ended, by outcome. m.mu is
// held.
func (m *MemorySessions) remove(e *list.Element, outcome session.Outcome) session.Ended {
	s := e.Value.(*memSession)
	m.order.Remove(e)
	delete(m.byKey, s.key)
	m.bytes -= m.cost(s.key)
	if s.st.Capped != "" {
		m.capped--
	}
	if len(m.ended) >= 4*sweepBatch {
		m.ended = m.ended[1:] // reported to no charge for long: the oldest go unreported
	}
	return session.Ended{USD: s.st.USD, Outcome: outcome}
}

// cost is what the session of key costs against the byte bound.
func (m *MemorySessions) cost(key string) int64 { return int64(len(key)) + memSessionBytes }
