package sim_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/sim"
)

// streamID returns the id of a stream's first chunk.
func streamID(t *testing.T, s *sim.Stream) string {
	t.Helper()
	c, err := chat.DecodeChunk([]byte(s.Events()[0].Data))
	if err != nil {
		t.Fatal(err)
	}
	return c.ID
}

// TestStreamBuilder checks the builders write valid chunks, as upstreams
// send them: one fresh id per stream, the role first, tool-call fragments with id, type and
// name on the first only, the finish reason, usage with no choices.
func TestStreamBuilder(t *testing.T) {
	t.Parallel()
	s := sim.NewStream("deepseek-v4-flash").Role().Reasoning("r1", "r2").Content("c").
		ToolCall(1, "call_x", "read", `{"p":`, `1}`).ToolCall(2, "call_y", "list").
		Finish("tool_calls").Usage(3, 4, map[string]any{"prompt_cache_hit_tokens": 2}).KeepAlive().Done()
	var got []string
	ids := map[string]int{} // chunks by id
	for _, ev := range s.Events() {
		switch {
		case ev.Comment != "":
			got = append(got, "comment "+ev.Comment)
		case ev.Data == chat.Done:
			got = append(got, "done")
		default:
			c, err := chat.DecodeChunk([]byte(ev.Data))
			if err != nil {
				t.Fatalf("chunk %s: %v", ev.Data, err)
			}
			if ids[c.ID]++; !strings.HasPrefix(c.ID, "chatcmpl-") || c.Object != "chat.completion.chunk" || c.Model != "deepseek-v4-flash" {
				t.Errorf("chunk header = %q %q %q", c.ID, c.Object, c.Model)
			}
			if c.HasUsage() {
				got = append(got, "usage "+string(c.Usage))
				if len(c.Choices) != 0 {
					t.Errorf("usage chunk has %d choices, want 0", len(c.Choices))
				}
				continue
			}
			d := c.Choices[0].Delta
			line := "delta"
			if d.Role != "" {
				line += " role=" + d.Role
			}
			if d.Content != nil {
				line += " content=" + *d.Content
			}
			if d.ReasoningContent != nil {
				line += " reasoning=" + *d.ReasoningContent
			}
			for _, tc := range d.ToolCalls {
				b, _ := json.Marshal(tc)
				line += " tool=" + string(b)
			}
			if f := c.FinishReason(); f != "" {
				line += " finish=" + f
			}
			got = append(got, line)
		}
	}
	want := []string{
		"delta role=assistant content=",
		"delta reasoning=r1",
		"delta reasoning=r2",
		"delta content=c",
		`delta tool={"index":1,"id":"call_x","type":"function","function":{"name":"read","arguments":"{\"p\":"}}`,
		`delta tool={"index":1,"function":{"arguments":"1}"}}`,
		`delta tool={"index":2,"id":"call_y","type":"function","function":{"name":"list","arguments":""}}`,
		"delta finish=tool_calls",
		`usage {"completion_tokens":4,"prompt_cache_hit_tokens":2,"prompt_tokens":3,"total_tokens":7}`,
		"comment : keep-alive",
		"done",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stream (-want +got):\n%s", diff)
	}
	if r := s.Reply(); len(r.Events) != len(want) || r.Cut || r.Hang {
		t.Errorf("Reply = %d events cut=%v hang=%v", len(r.Events), r.Cut, r.Hang)
	}
	if len(ids) != 1 {
		t.Errorf("chunk ids = %v, want one id for the whole stream", ids)
	}
	for id := range ids {
		if other := streamID(t, sim.NewStream("deepseek-v4-flash").Role()); other == id {
			t.Errorf("two streams share the id %q", id)
		}
	}
	delayed := sim.NewStream("m").Delay(time.Second).Events()
	if len(delayed) != 1 || delayed[0].Delay != time.Second {
		t.Errorf("Delay events = %+v", delayed)
	}
}
