package tokens

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"

	"github.com/phasegate/phasegate/chat"
)

// randomHistory builds a valid history: tool results follow the assistant
// message that calls them, in any order.
func randomHistory(tb testing.TB, rng *rand.Rand) *history {
	h := &history{tb: tb}
	words := func() int {
		if rng.IntN(10) == 0 {
			return rng.IntN(3000)
		}
		return rng.IntN(120)
	}
	calls := 0
	for range 1 + rng.IntN(30) {
		switch k := rng.IntN(20); {
		case k < 2:
			h.text(fmt.Sprintf("sys%d", len(h.msgs)), chat.RoleSystem, words())
		case k < 3:
			h.text(fmt.Sprintf("dev%d", len(h.msgs)), chat.RoleDeveloper, words())
		case k < 9:
			h.text(fmt.Sprintf("u%d", len(h.msgs)), chat.RoleUser, words())
		case k < 13:
			h.text(fmt.Sprintf("a%d", len(h.msgs)), chat.RoleAssistant, words())
		default:
			var ids []string
			for range 1 + rng.IntN(3) {
				calls++
				ids = append(ids, fmt.Sprintf("call_%d", calls))
			}
			h.call(fmt.Sprintf("call%d", len(h.msgs)), ids...)
			rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			for _, id := range ids {
				h.result("r"+id, id, words())
			}
		}
	}
	return h
}

var (
	cookbookFuzzTools = func() (ts []chat.Tool) {
		if err := json.Unmarshal([]byte(cookbookTools), &ts); err != nil {
			panic(err)
		}
		return ts
	}()
	fuzzCache = newCache(DefaultCacheBytes)
	fuzzSeed  = maphash.MakeSeed()
)

// FuzzFit checks the truncation invariants for any history and budget: the
// result fits or is the 400; system and developer messages and the last
// user message stay; no tool result loses its call nor a call one of its
// results; order is kept; the history window holds.
func FuzzFit(f *testing.F) {
	f.Add(uint64(1), uint16(500), uint8(0), uint16(0))
	f.Add(uint64(2), uint16(2000), uint8(3), uint16(100))
	f.Add(uint64(3), uint16(0), uint8(5), uint16(0))
	f.Add(uint64(4), uint16(300), uint8(0), uint16(400))
	f.Fuzz(func(t *testing.T, seed uint64, capTokens uint16, window uint8, toolMax uint16) {
		rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
		h := randomHistory(t, rng)
		cfg := Config{HistoryWindow: int(window % 8)}
		if toolMax > 0 {
			cfg.ToolResultMaxTokens = minToolResultMaxTokens + int(toolMax%1000)
		}
		c := newCounter(t, cfg)
		// Counts depend on the content only: share them across runs.
		c.cache, c.seed = fuzzCache, fuzzSeed
		const model = "fuzz"
		in := h.msgs
		var tools []chat.Tool
		if seed%2 == 0 {
			tools = cookbookFuzzTools
		}
		got, err := c.Fit(model, in, tools, 0, int(capTokens))

		m := c.models.resolve(model)
		b, berr := newBudget(m.limits, 0, 1, 0, int(capTokens))
		pinned := map[int]bool{}
		lastUser := -1
		for i, msg := range in {
			if systemRole(msg.Role) {
				pinned[i] = true
			}
			if msg.Role == chat.RoleUser {
				lastUser = i
			}
		}
		if lastUser >= 0 {
			pinned[lastUser] = true
		}

		if err != nil {
			var ce *chat.Error
			if !errors.As(err, &ce) || ce.Status != 400 || ce.Code != CodeContextLengthExceeded {
				t.Fatalf("got error %v, want a 400 context_length_exceeded *chat.Error", err)
			}
			if berr != nil {
				return
			}
			var must []chat.Message
			for i := range in {
				if pinned[i] {
					must = append(must, in[i])
				}
			}
			if n := sum(c, model, must, tools); n <= b.raw {
				t.Fatalf("got the 400, but the messages that must stay count %d of a budget of %d", n, b.raw)
			}
			return
		}

		out := got.Messages
		if n := sum(c, model, out, tools); n != got.PromptTokens || n > b.raw {
			t.Fatalf("got PromptTokens %d, recounted %d, budget %d", got.PromptTokens, n, b.raw)
		}
		if got.DroppedMessages != len(in)-len(out) {
			t.Errorf("got DroppedMessages %d, want %d", got.DroppedMessages, len(in)-len(out))
		}
		if got.DroppedMessages == 0 && got.Shortened == 0 && len(in) > 0 && &out[0] != &in[0] {
			t.Errorf("nothing changed, yet got a new slice")
		}
		seq := seqs(t, out)
		kept := map[int]bool{}
		for i, s := range seq {
			if i > 0 && s <= seq[i-1] {
				t.Fatalf("order not kept: %v", seq)
			}
			kept[s] = true
		}
		for i := range pinned {
			if !kept[i] {
				t.Errorf("message %d (%s) was dropped", i, h.names[i])
			}
		}
		issued, answered := map[string]bool{}, map[string]bool{}
		nonSystem, shortened := 0, 0
		for i, msg := range out {
			if !systemRole(msg.Role) {
				nonSystem++
			}
			for _, tc := range msg.ToolCalls {
				issued[tc.ID] = true
			}
			if msg.Role == chat.RoleTool {
				if !issued[msg.ToolCallID] {
					t.Errorf("tool result %s lost its call", h.names[seq[i]])
				}
				answered[msg.ToolCallID] = true
			}
			if string(msg.Raw) != string(in[seq[i]].Raw) {
				if msg.Role != chat.RoleTool || !markerRE.MatchString(msg.Text()) {
					t.Errorf("message %s changed: %s", h.names[seq[i]], msg.Raw)
				}
				shortened++
			}
		}
		for id := range issued {
			if !answered[id] {
				t.Errorf("tool call %s lost its result", id)
			}
		}
		if shortened != got.Shortened {
			t.Errorf("got Shortened %d, want %d", got.Shortened, shortened)
		}
		if cfg.HistoryWindow > 0 && nonSystem > cfg.HistoryWindow {
			t.Errorf("got %d non-system messages, want at most %d", nonSystem, cfg.HistoryWindow)
		}
	})
}
