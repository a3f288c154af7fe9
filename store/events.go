package store

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Event is one data event of a resumable stream.
type Event struct {
	// N is the event's position in its stream, from 1.
	N int
	// Data is what the event's data lines hold: a chunk, or "[DONE]".
	Data []byte
	// PhaseStart marks the first event of phase PhaseIndex (the phase
	// metadata of the two-stage protocol).
	PhaseStart bool
	PhaseIndex int
}

// StreamInfo is what a store knows of a resumable stream.
type StreamInfo struct {
	// Owner is who may resume or cancel the stream (a digest of the client
	// key, or "" when the gateway has no client keys).
	Owner string
	// Ended reports that the stream's last event is stored; Cancelled that
	// it was cancelled.
	Ended, Cancelled bool
	// Phases maps a phase index to the position of its first event.
	Phases map[int]int
	// Status is the HTTP status of a stream that failed before its first
	// event (see Fail), 0 otherwise.
	Status int
}

// ErrExists reports a stream id that is already taken.
var ErrExists = errors.New("stream id already in use")

// MemoryStreams keeps the events of resumable streams in this process, for
// a single gateway. Each stream is forgotten ttl after its last event.
// It is safe for concurrent use.
type MemoryStreams struct {
	ttl       time.Duration
	mu        sync.Mutex
	streams   map[string]*memStream
	lastSweep time.Time
}

type memStream struct {
	info    StreamInfo
	events  []Event
	expires time.Time
	// changed is closed, and replaced, whenever the stream changes, to
	// wake its readers.
	changed chan struct{}
}

// NewMemoryStreams returns an empty store that keeps each stream for ttl
// after its last event.
func NewMemoryStreams(ttl time.Duration) *MemoryStreams {
	return &MemoryStreams{ttl: ttl, streams: map[string]*memStream{}}
}

// Start opens stream id, owned by owner.
func (m *MemoryStreams) Start(_ context.Context, id, owner string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if now.Sub(m.lastSweep) > time.Second {
		m.lastSweep = now
		for k, s := range m.streams {
			if now.After(s.expires) {
				delete(m.streams, k)
			}
		}
	}
	if s, ok := m.streams[id]; ok && now.Before(s.expires) {
		return ErrExists
	}
	m.streams[id] = &memStream{info: StreamInfo{Owner: owner, Phases: map[int]int{}}, expires: now.Add(m.ttl), changed: make(chan struct{})}
	return nil
}

// get returns the live stream id; m.mu is held.
func (m *MemoryStreams) get(id string) (*memStream, error) {
	s, ok := m.streams[id]
	if !ok || time.Now().After(s.expires) {
		return nil, ErrNotFound
	}
	return s, nil
}

// Append adds events (numbered by the caller, in order) to stream id;
// end marks its last. Events at positions already stored are skipped, and
// an ended stream takes nothing more, so a batch may be sent again.
func (m *MemoryStreams) Append(_ context.Context, id string, events []Event, end bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.get(id)
	if err != nil {
		return err
	}
	if s.info.Ended {
		events = nil
	}
	for _, ev := range events {
		if n := len(s.events); n > 0 && ev.N <= s.events[n-1].N {
			continue // stored already
		}
		ev.Data = append([]byte(nil), ev.Data...)
		s.events = append(s.events, ev)
		if _, seen := s.info.Phases[ev.PhaseIndex]; ev.PhaseStart && !seen {
			s.info.Phases[ev.PhaseIndex] = ev.N
		}
	}
	s.info.Ended = s.info.Ended || end
	s.expires = time.Now().Add(m.ttl)
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

// Fail ends stream id, which failed before its first event: its log holds
// only body, the error its client was answered with status, at position 1.
func (m *MemoryStreams) Fail(_ context.Context, id string, status int, body []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.get(id)
	if err != nil {
		return err
	}
	if !s.info.Ended {
		s.events = []Event{{N: 1, Data: append([]byte(nil), body...)}}
		s.info.Ended, s.info.Status = true, status
	}
	s.expires = time.Now().Add(m.ttl)
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

// Read returns the events of stream id after position after, waiting up
// to wait for one when there is none yet, and whether the stream has
// ended (with no event after those returned).
func (m *MemoryStreams) Read(ctx context.Context, id string, after int, wait time.Duration) ([]Event, bool, error) {
	m.mu.Lock()
	s, err := m.get(id)
	if err != nil {
		m.mu.Unlock()
		return nil, false, err
	}
	if after < len(s.events) || s.info.Ended {
		evs := append([]Event(nil), s.events[min(after, len(s.events)):]...)
		m.mu.Unlock()
		return evs, s.info.Ended, nil
	}
	changed := s.changed
	m.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-changed:
	case <-t.C:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	return nil, false, nil
}

// Info returns what is known of stream id.
func (m *MemoryStreams) Info(_ context.Context, id string) (StreamInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.get(id)
	if err != nil {
		return StreamInfo{}, err
	}
	info := s.info
	info.Phases = make(map[int]int, len(s.info.Phases))
	for k, v := range s.info.Phases {
		info.Phases[k] = v
	}
	return info, nil
}

// Cancel marks stream id cancelled. The proxy stops its upstream itself:
// in one process there is no other replica to tell.
func (m *MemoryStreams) Cancel(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.get(id)
	if err != nil {
		return err
	}
	s.info.Cancelled = true
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}
