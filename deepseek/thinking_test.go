package deepseek

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/phasegate/phasegate/chat"
)

func parse(t *testing.T, body string) *chat.Request {
	t.Helper()
	req, err := chat.ParseRequest([]byte(body))
	if err != nil {
		t.Fatalf("ParseRequest: %v", err)
	}
	return req
}

func reasoningOf(t *testing.T, m chat.Message) *string {
	t.Helper()
	var v struct {
		ReasoningContent *string `json:"reasoning_content"`
	}
	if err := json.Unmarshal(m.Raw, &v); err != nil {
		t.Fatalf("decode message: %v", err)
	}
	return v.ReasoningContent
}

const loop = `{"model":"deepseek-v4-pro","messages":[
 {"role":"user","content":"fix it"},
 {"role":"assistant","content":null,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"read","arguments":"{}"}}],"x_vendor":1},
 {"role":"tool","tool_call_id":"call_a","content":"file"},
 {"role":"assistant","content":"","reasoning_content":"kept","tool_calls":[{"id":"call_b","type":"function","function":{"name":"read","arguments":"{}"}}]},
 {"role":"tool","tool_call_id":"call_b","content":"file"},
 {"role":"assistant","content":null,"tool_calls":[{"id":"call_c","type":"function","function":{"name":"read","arguments":"{}"}}]},
 {"role":"tool","tool_call_id":"call_c","content":"file"}
]%s}`

func TestRepair(t *testing.T) {
	mem := NewReasoningMemory(1<<20, time.Hour)
	mem.Remember([]string{"call_a"}, "I should read the file.")
	tests := []struct {
		name       string
		extra      string
		want       []*string // reasoning of messages 1, 3, 5
		wantRep    ThinkingRepairs
		toolChoice string
	}{
		{
			name:    "restored from memory, kept, emptied when never seen",
			want:    []*string{ptr("I should read the file."), ptr("kept"), ptr("")},
			wantRep: ThinkingRepairs{Restored: 1, Emptied: 1},
		},
		{
			name:       "required tool_choice downgraded",
			extra:      `,"tool_choice":"required"`,
			want:       []*string{ptr("I should read the file."), ptr("kept"), ptr("")},
			wantRep:    ThinkingRepairs{Restored: 1, Emptied: 1, ToolChoice: `"required"`},
			toolChoice: `"auto"`,
		},
		{
			name:       "named tool_choice downgraded",
			extra:      `,"tool_choice":{"type":"function","function":{"name":"read"}}`,
			want:       []*string{ptr("I should read the file."), ptr("kept"), ptr("")},
			wantRep:    ThinkingRepairs{Restored: 1, Emptied: 1, ToolChoice: `{"type":"function","function":{"name":"read"}}`},
			toolChoice: `"auto"`,
		},
		{
			name:       "auto and none are left alone",
			extra:      `,"tool_choice":"none"`,
			want:       []*string{ptr("I should read the file."), ptr("kept"), ptr("")},
			wantRep:    ThinkingRepairs{Restored: 1, Emptied: 1},
			toolChoice: `"none"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := parse(t, fmt.Sprintf(loop, tt.extra))
			rep, err := RepairThinking(req, mem)
			if err != nil {
				t.Fatalf("Repair: %v", err)
			}
			if rep != tt.wantRep {
				t.Errorf("repairs: got %+v, want %+v", rep, tt.wantRep)
			}
			// The request as it goes upstream, parsed anew.
			sent := parse(t, string(req.Encode()))
			for i, idx := range []int{1, 3, 5} {
				got := reasoningOf(t, sent.Messages[idx])
				if got == nil || *got != *tt.want[i] {
					t.Errorf("message %d reasoning_content: got %v, want %q", idx, deref(got), *tt.want[i])
				}
			}
			var vendor struct {
				X int `json:"x_vendor"`
			}
			if err := json.Unmarshal(sent.Messages[1].Raw, &vendor); err != nil || vendor.X != 1 {
				t.Errorf("unknown field of a repaired message lost: %s", sent.Messages[1].Raw)
			}
			if tt.toolChoice != "" {
				got, _ := sent.Field("tool_choice")
				if string(got) != tt.toolChoice {
					t.Errorf("tool_choice: got %s, want %s", got, tt.toolChoice)
				}
			}
		})
	}
}

func TestRepairLeavesCompleteRequestsAlone(t *testing.T) {
	body := `{"model":"deepseek-v4-pro","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}`
	req := parse(t, body)
	rep, err := RepairThinking(req, nil)
	if err != nil {
		t.Fatalf("Repair: %v", err)
	}
	if rep.Any() {
		t.Errorf("repairs: got %+v, want none", rep)
	}
	if got := string(req.Encode()); got != body {
		t.Errorf("request changed:\ngot  %s\nwant %s", got, body)
	}
}

func TestDisabled(t *testing.T) {
	tests := []struct {
		name string
		body string
		want bool
	}{
		{"absent", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, false},
		{"enabled", `{"model":"m","thinking":{"type":"enabled"},"messages":[{"role":"user","content":"x"}]}`, false},
		{"disabled", `{"model":"m","thinking":{"type":"disabled"},"messages":[{"role":"user","content":"x"}]}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ThinkingDisabled(parse(t, tt.body)); got != tt.want {
				t.Errorf("Disabled: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMemoryBounds(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const reasoning = "0123456789"
	entry := newReasoningMemory(1, 0, nil).byID.Cost("a", reasoning)
	max := 3*entry + entry/2 // room for three
	m := newReasoningMemory(max, time.Minute, func() time.Time { return now })
	m.Remember([]string{"a"}, reasoning)
	m.Remember([]string{"b"}, reasoning)
	m.Remember([]string{"c"}, reasoning)
	if _, ok := m.Recall("a"); !ok {
		t.Fatalf("a forgotten while the memory had room")
	}
	m.Remember([]string{"d"}, reasoning) // evicts the least recently used, b
	if _, ok := m.Recall("b"); ok {
		t.Errorf("b remembered past the byte bound")
	}
	for _, id := range []string{"a", "c", "d"} {
		if _, ok := m.Recall(id); !ok {
			t.Errorf("%s forgotten, want remembered", id)
		}
	}
	now = now.Add(2 * time.Minute)
	if _, ok := m.Recall("a"); ok {
		t.Errorf("a remembered past its time")
	}
	m.Remember([]string{"big"}, string(make([]byte, max)))
	if _, ok := m.Recall("big"); ok {
		t.Errorf("an entry larger than the memory was stored")
	}
	if held := m.byID.Bytes(); held < 0 || held > max {
		t.Errorf("bytes held: got %d, want within [0, %d]", held, max)
	}
}

func ptr(s string) *string { return &s }

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}
