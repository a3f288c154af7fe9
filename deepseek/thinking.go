package deepseek

// DeepSeek's thinking mode is on by default for its current models and
// strict about two things many clients get wrong:
//
//   - an assistant message with tool calls must carry its
//     reasoning_content back on later requests, or the API answers 400;
//     many clients drop the field, and their agents die on the next request;
//   - a named or "required" tool_choice is rejected.
//
// ReasoningMemory remembers the reasoning_content of the tool-call
// messages the gateway served, by tool call id, bounded in memory and
// time; RepairThinking puts it back where a request lacks it (an empty
// string when it was never seen) and downgrades a forced tool_choice to
// "auto".

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/lru"
)

// ReasoningMemory maps tool call ids to the reasoning_content of the assistant
// message that made the call. It is bounded by the bytes it holds and by
// the age of its entries, and safe for concurrent use.
type ReasoningMemory struct {
	byID *lru.Cache[string, string]
}

// NewReasoningMemory returns a memory holding at most maxBytes of reasoning (ids
// and about 115 bytes of bookkeeping each included) for at most ttl each
// (0: until evicted). The least recently remembered or recalled goes
// first.
func NewReasoningMemory(maxBytes int64, ttl time.Duration) *ReasoningMemory {
	return newReasoningMemory(maxBytes, ttl, nil)
}

// newReasoningMemory is NewReasoningMemory on the clock now (nil: time.Now).
func newReasoningMemory(maxBytes int64, ttl time.Duration, now func() time.Time) *ReasoningMemory {
	return &ReasoningMemory{byID: lru.New(lru.Options[string, string]{
		MaxBytes: maxBytes,
		Bytes:    func(id, reasoning string) int64 { return int64(len(id) + len(reasoning)) },
		TTL:      ttl,
		Now:      now,
	})}
}

// Remember stores reasoning for each call id. Empty ids and empty
// reasoning are not stored; a reasoning larger than the whole memory is
// not either. The ids of one message share one copy of the reasoning,
// but each is charged for it.
func (m *ReasoningMemory) Remember(callIDs []string, reasoning string) {
	if reasoning == "" {
		return
	}
	for _, id := range callIDs {
		if id != "" {
			m.byID.Put(id, reasoning)
		}
	}
}

// Recall returns the reasoning remembered for a call id.
func (m *ReasoningMemory) Recall(callID string) (string, bool) {
	return m.byID.Get(callID)
}

// Recaller looks up the reasoning remembered for a tool call id.
// *ReasoningMemory is one; the proxy's view of a shared store, fetched
// before the repair, is another.
type Recaller interface {
	Recall(callID string) (string, bool)
}

// ToolCallsLacking returns the ids of the tool calls of the assistant
// messages that lack reasoning_content: the ids RepairThinking will look
// up.
func ToolCallsLacking(req *chat.Request) []string {
	var ids []string
	for _, m := range req.Messages {
		if m.Role != chat.RoleAssistant || len(m.ToolCalls) == 0 || m.ReasoningContent != nil {
			continue
		}
		for _, tc := range m.ToolCalls {
			ids = append(ids, tc.ID)
		}
	}
	return ids
}

// ThinkingRepairs says what RepairThinking changed.
type ThinkingRepairs struct {
	// Restored counts tool-call messages given back their remembered
	// reasoning_content; Emptied those given "" because it was never seen.
	Restored, Emptied int
	// ToolChoice is the forced tool_choice that was downgraded to "auto",
	// or "".
	ToolChoice string
}

// Any reports whether anything was repaired.
func (r ThinkingRepairs) Any() bool { return r.Restored+r.Emptied > 0 || r.ToolChoice != "" }

// ThinkingDisabled reports whether the request turns thinking mode off
// ("thinking": {"type": "disabled"}), in which case nothing needs repair.
func ThinkingDisabled(req *chat.Request) bool {
	raw, ok := req.Field("thinking")
	if !ok {
		return false
	}
	var t struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(raw, &t) == nil && t.Type == "disabled"
}

// RepairThinking restores the reasoning_content of assistant tool-call messages
// that lack it, from mem (a nil interface: nothing remembered), and downgrades a named
// or "required" tool_choice to "auto". Messages are rewritten through
// their raw form, so every other field survives.
func RepairThinking(req *chat.Request, mem Recaller) (ThinkingRepairs, error) {
	var rep ThinkingRepairs
	var msgs []chat.Message // copied on the first change
	for i, m := range req.Messages {
		if m.Role != chat.RoleAssistant || len(m.ToolCalls) == 0 || m.ReasoningContent != nil {
			continue
		}
		reasoning, found := "", false
		if mem != nil {
			for _, tc := range m.ToolCalls {
				if reasoning, found = mem.Recall(tc.ID); found {
					break
				}
			}
		}
		fixed, err := m.With("reasoning_content", reasoning)
		if err != nil {
			return rep, fmt.Errorf("restore reasoning_content of message %d: %w", i, err)
		}
		if msgs == nil {
			msgs = append([]chat.Message(nil), req.Messages...)
		}
		msgs[i] = fixed
		if found {
			rep.Restored++
		} else {
			rep.Emptied++
		}
	}
	if msgs != nil {
		req.SetMessages(msgs)
	}
	if raw, ok := req.Field("tool_choice"); ok && forced(raw) {
		rep.ToolChoice = string(raw)
		if err := req.Set("tool_choice", "auto"); err != nil {
			return rep, fmt.Errorf("downgrade tool_choice: %w", err)
		}
	}
	return rep, nil
}

// forced reports whether a tool_choice forces a call: "required", or an
// object naming a function.
func forced(raw json.RawMessage) bool {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s == "required"
	}
	var o map[string]json.RawMessage
	return json.Unmarshal(raw, &o) == nil && len(o) > 0
}
