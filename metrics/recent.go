package metrics

import (
	"context"
	"sync"
	"time"
)

// Recent keeps the trace events of the latest requests, so that an
// operator can read why one request was refused without a log search. It
// is bounded: events of at most the last Requests request ids, and at
// most Events events of each (later ones are counted, not kept). It is a
// tracer; chain it with the others (Tracers). It is safe for concurrent
// use.
type Recent struct {
	requests, events int

	mu    sync.Mutex
	byID  map[string]*RecentRequest
	order []string // ring of ids, oldest at next
	next  int
}

// RecentRequest is what Recent kept of one request.
type RecentRequest struct {
	RequestID string        `json:"request_id"`
	Events    []RecentEvent `json:"events"`
	// Dropped counts the events past the bound that were not kept.
	Dropped int `json:"dropped_events,omitempty"`
}

// RecentEvent is one trace event as Recent keeps it: what a trace log
// line holds, credentials redacted from its reason.
type RecentEvent struct {
	Time       time.Time `json:"time"`
	Event      TraceKind `json:"event"`
	ProjectID  string    `json:"project_id,omitempty"`
	Phase      string    `json:"phase,omitempty"`
	PhaseIndex int       `json:"phase_index,omitempty"`
	CycleIndex int       `json:"cycle_index"`
	Tool       string    `json:"tool,omitempty"`
	ToolCallID string    `json:"tool_call_id,omitempty"`
	Verdict    string    `json:"verdict,omitempty"`
	Reason     string    `json:"reason,omitempty"`
}

// NewRecent returns a Recent that keeps the events of the last requests
// request ids, at most events of each; both must be at least 1.
func NewRecent(requests, events int) *Recent {
	return &Recent{requests: max(requests, 1), events: max(events, 1), byID: map[string]*RecentRequest{},
		order: make([]string, max(requests, 1))}
}

// Trace keeps ev under its request id; events without one are dropped.
func (r *Recent) Trace(_ context.Context, ev Trace) {
	if ev.RequestID == "" {
		return
	}
	e := RecentEvent{Time: time.Now().UTC(), Event: ev.Kind, ProjectID: ev.ProjectID, Phase: ev.Phase, PhaseIndex: ev.PhaseIndex,
		CycleIndex: ev.CycleIndex, Tool: ev.Tool, ToolCallID: ev.ToolCallID, Verdict: ev.Verdict, Reason: Redact(ev.Reason)}
	r.mu.Lock()
	defer r.mu.Unlock()
	req := r.byID[ev.RequestID]
	if req == nil {
		// The oldest request gives up its place.
		if old := r.order[r.next]; old != "" {
			delete(r.byID, old)
		}
		req = &RecentRequest{RequestID: ev.RequestID}
		r.byID[ev.RequestID] = req
		r.order[r.next] = ev.RequestID
		r.next = (r.next + 1) % len(r.order)
	}
	if len(req.Events) >= r.events {
		req.Dropped++
		return
	}
	req.Events = append(req.Events, e)
}

// Request returns a copy of what was kept of the request with id.
func (r *Recent) Request(id string) (RecentRequest, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	req, ok := r.byID[id]
	if !ok {
		return RecentRequest{}, false
	}
	out := *req
	out.Events = append([]RecentEvent(nil), req.Events...)
	return out, true
}
