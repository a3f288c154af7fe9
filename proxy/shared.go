package proxy

import (
	"context"
	"time"

	"github.com/phasegate/phasegate/deepseek"
	"github.com/phasegate/phasegate/store"
)

// The state that outlives a request sits behind the three interfaces
// below, each with an in-memory form (the default of a single gateway)
// and a Redis form in package store (REDIS_URL, shared by replicas).

// ReasoningStore remembers the reasoning_content of the tool calls the
// gateway served, by tool call id (DeepSeek's thinking mode).
type ReasoningStore interface {
	Remember(ctx context.Context, callIDs []string, reasoning string) error
	// Recall returns the reasoning of each of callIDs that has one.
	Recall(ctx context.Context, callIDs []string) (map[string]string, error)
}

// Limiter keeps budgets per minute by key (see store.Decision).
type Limiter interface {
	// Allow spends n units if all are left; n = 0 only reads.
	Allow(ctx context.Context, key string, perMinute, n int) (store.Decision, error)
	// Charge spends n units even past what is left (the budget goes into
	// debt); n < 0 gives units back.
	Charge(ctx context.Context, key string, perMinute, n int) (store.Decision, error)
}

// EventLog keeps the events of resumable streams (see store.MemoryStreams
// for the contract of each method).
type EventLog interface {
	Start(ctx context.Context, id, owner string) error
	Append(ctx context.Context, id string, events []store.Event, end bool) error
	Read(ctx context.Context, id string, after int, wait time.Duration) ([]store.Event, bool, error)
	Info(ctx context.Context, id string) (store.StreamInfo, error)
	Cancel(ctx context.Context, id string) error
	Fail(ctx context.Context, id string, status int, body []byte) error
}

// followerCap is an EventLog that bounds how many reads may wait on it at
// once (a connection each): past it, a resume is answered 503.
type followerCap interface {
	MaxFollowers() int
}

// cancelWatcher is an EventLog shared with other replicas, which tells of
// the streams cancelled on any of them.
type cancelWatcher interface {
	Watch(ctx context.Context, cancelled func(id string), ready func())
}

// LocalReasoning is the ReasoningStore of one gateway: mem, in memory.
func LocalReasoning(mem *deepseek.ReasoningMemory) ReasoningStore { return localReasoning{mem} }

type localReasoning struct{ mem *deepseek.ReasoningMemory }

func (l localReasoning) Remember(_ context.Context, callIDs []string, reasoning string) error {
	l.mem.Remember(callIDs, reasoning)
	return nil
}

func (l localReasoning) Recall(_ context.Context, callIDs []string) (map[string]string, error) {
	found := map[string]string{}
	for _, id := range callIDs {
		if r, ok := l.mem.Recall(id); ok {
			found[id] = r
		}
	}
	return found, nil
}

// recalled is reasoning fetched before a repair, as deepseek.Recaller.
type recalled map[string]string

func (r recalled) Recall(callID string) (string, bool) {
	s, ok := r[callID]
	return s, ok
}
