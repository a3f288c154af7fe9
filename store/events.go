package store

import (
	"context"
	"errors"
	"sort"
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

// ErrFull reports that the memory of a MemoryStreams holds as many bytes
// of events as it may: the stream is not started, or takes no more
// events.
var ErrFull = errors.New("resumable stream memory is full")

// MemoryStreams keeps the events of resumable streams in this process, for
// a single gateway. Each stream is forgotten ttl after its last event (an
// empty Append keeps a quiet stream). The events of all streams together
// hold at most maxBytes: past it, the streams that ended are forgotten
// first, those that ended earliest first, and then a stream is refused
// (ErrFull). It is safe for concurrent use.
type MemoryStreams struct {
	ttl       time.Duration
	maxBytes  int64
	mu        sync.Mutex
	streams   map[string]*memStream
	bytes     int64 // of the events of every stream held
	lastSweep time.Time
}

type memStream struct {
	info    StreamInfo
	events  []Event
	bytes   int64
	expires time.Time
	// changed is closed, and replaced, whenever the stream changes, to
	// wake its readers.
	changed chan struct{}
}

// EndAllowance is what one Append that ends a stream may store past
// maxBytes: the event that says why the stream ends there, so that a
// reader of a stream refused with ErrFull still reads an ending.
const EndAllowance = 1 << 10

// NewMemoryStreams returns an empty store that keeps each stream for ttl
// after its last event, with no bound on the bytes of all streams.
func NewMemoryStreams(ttl time.Duration) *MemoryStreams { return NewBoundedMemoryStreams(ttl, 0) }

// NewBoundedMemoryStreams returns an empty store that keeps each stream
// for ttl after its last event, and the events of all streams up to
// maxBytes (0: no bound).
func NewBoundedMemoryStreams(ttl time.Duration, maxBytes int64) *MemoryStreams {
	return &MemoryStreams{ttl: ttl, maxBytes: maxBytes, streams: map[string]*memStream{}}
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
				m.forget(k, s)
			}
		}
	}
	if s, ok := m.streams[id]; ok && now.Before(s.expires) {
		return ErrExists
	} else if ok {
		m.forget(id, s)
	}
	if m.maxBytes > 0 && !m.makeRoom(nil, 1) {
		return ErrFull
	}
	m.streams[id] = &memStream{info: StreamInfo{Owner: owner, Phases: map[int]int{}}, expires: now.Add(m.ttl), changed: make(chan struct{})}
	return nil
}

// forget drops stream id; m.mu is held.
func (m *MemoryStreams) forget(id string, s *memStream) {
	m.bytes -= s.bytes
	delete(m.streams, id)
}

// makeRoom reports whether n more bytes fit under maxBytes, forgetting
// the streams that ended (earliest first, never keep) until they do;
// m.mu is held.
func (m *MemoryStreams) makeRoom(keep *memStream, n int64) bool {
	if m.bytes+n <= m.maxBytes {
		return true
	}
	type ended struct {
		id string
		s  *memStream
	}
	var evictable []ended
	for id, s := range m.streams {
		if s.info.Ended && s != keep {
			evictable = append(evictable, ended{id, s})
		}
	}
	sort.Slice(evictable, func(i, j int) bool { return evictable[i].s.expires.Before(evictable[j].s.expires) })
	for _, e := range evictable {
		if m.bytes+n <= m.maxBytes {
			break
		}
		m.forget(e.id, e.s)
	}
	return m.bytes+n <= m.maxBytes
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
// an ended stream takes nothing more, so a batch may be sent again. A
// batch past the memory's bound is refused whole (ErrFull), unless it
// ends the stream within EndAllowance. An empty batch keeps the stream
// for another ttl.
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
	var size int64
	for _, ev := range events {
		size += int64(len(ev.Data))
	}
	if m.maxBytes > 0 && size > 0 && !m.makeRoom(s, size) && !(end && size <= EndAllowance) {
		s.expires = time.Now().Add(m.ttl)
		return ErrFull
	}
	for _, ev := range events {
		if n := len(s.events); n > 0 && ev.N <= s.events[n-1].N {
			continue // stored already
		}
		ev.Data = append([]byte(nil), ev.Data...)
		s.events = append(s.events, ev)
		s.bytes += int64(len(ev.Data))
		m.bytes += int64(len(ev.Data))
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
		m.bytes += int64(len(body)) - s.bytes
		s.bytes = int64(len(body))
		s.info.Ended, s.info.Status = true, status
	}
	s.expires = time.Now().Add(m.ttl)
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

// Read returns the events of stream id after position after, waiting up
// to wait for one when there is none yet, and whether the stream has
// ended (with no event after those returned). Positions may skip
// numbers: the events returned are those numbered past after.
func (m *MemoryStreams) Read(ctx context.Context, id string, after int, wait time.Duration) ([]Event, bool, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		evs, ended, changed, err := m.next(id, after)
		if err != nil || len(evs) > 0 || ended {
			return evs, ended, err
		}
		// A change may be a cancel or an empty append: read again, until
		// an event comes, the stream ends, or the wait is over.
		select {
		case <-changed:
		case <-t.C:
			return nil, false, nil
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// next returns the events of stream id numbered past after, whether it
// ended, and the channel its next change closes.
func (m *MemoryStreams) next(id string, after int) ([]Event, bool, <-chan struct{}, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.get(id)
	if err != nil {
		return nil, false, nil, err
	}
	i := sort.Search(len(s.events), func(i int) bool { return s.events[i].N > after })
	var evs []Event
	if i < len(s.events) {
		evs = append(evs, s.events[i:]...)
	}
	return evs, s.info.Ended, s.changed, nil
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

// Cancel marks stream id cancelled, unless it ended already: a stream
// that finished stays whole for its replays. The proxy stops its
// upstream itself: in one process there is no other replica to tell.
func (m *MemoryStreams) Cancel(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.get(id)
	if err != nil {
		return err
	}
	if s.info.Ended {
		return nil
	}
	s.info.Cancelled = true
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}
