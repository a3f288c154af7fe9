package tokens

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/chat"
)

// history builds a chat history whose messages carry their position in
// "x_seq", a field the counting ignores and the gateway passes through.
type history struct {
	tb    testing.TB
	msgs  []chat.Message
	names []string
}

func (h *history) add(name string, fields map[string]any) *history {
	h.tb.Helper()
	fields["x_seq"] = len(h.msgs)
	h.msgs = append(h.msgs, msg(h.tb, fields))
	h.names = append(h.names, name)
	return h
}

func (h *history) text(name, role string, words int) *history {
	return h.add(name, map[string]any{"role": role, "content": name + ": " + filler(words)})
}

// call adds an assistant message calling one tool per id.
func (h *history) call(name string, ids ...string) *history {
	var calls []any
	for _, id := range ids {
		calls = append(calls, map[string]any{"id": id, "type": "function", "function": map[string]any{"name": "read_file", "arguments": `{"path":"` + id + `.go"}`}})
	}
	return h.add(name, map[string]any{"role": "assistant", "content": nil, "tool_calls": calls})
}

func (h *history) result(name, id string, words int) *history {
	return h.add(name, map[string]any{"role": "tool", "tool_call_id": id, "content": name + ": " + filler(words)})
}

// seqs returns the x_seq of each message.
func seqs(tb testing.TB, msgs []chat.Message) []int {
	tb.Helper()
	out := make([]int, len(msgs))
	for i, m := range msgs {
		var v struct {
			Seq *int `json:"x_seq"`
		}
		if err := json.Unmarshal(m.Raw, &v); err != nil || v.Seq == nil {
			tb.Fatalf("message %d has no x_seq: %s", i, m.Raw)
		}
		out[i] = *v.Seq
	}
	return out
}

func (h *history) namesOf(msgs []chat.Message) []string {
	var out []string
	for _, s := range seqs(h.tb, msgs) {
		out = append(out, h.names[s])
	}
	return out
}

var fillerWords = strings.Fields(englishText)

func filler(words int) string {
	var b strings.Builder
	for i := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(fillerWords[i%len(fillerWords)])
	}
	return b.String()
}

// capFor returns the smallest prompt cap under which model's budget holds
// raw tiktoken tokens.
func capFor(tb testing.TB, c *Counter, model string, raw int) int {
	tb.Helper()
	m := c.models.resolve(model)
	r := c.Ratio(model)
	cp := int(float64(raw) * r * (1 + m.limits.SafetyMargin))
	for {
		b, err := newBudget(m.limits, 0, r, 0, cp)
		if err == nil && b.raw >= raw {
			return cp
		}
		cp++
	}
}

// sum counts messages as Fit does: framing, tools, priming.
func sum(c *Counter, model string, msgs []chat.Message, tools []chat.Tool) int {
	e := c.models.resolve(model).enc
	n := replyPriming
	if len(tools) > 0 {
		n += funcEnd
		for i := range tools {
			n += c.toolTokens(e, &tools[i])
		}
	}
	for i := range msgs {
		n += c.messageTokens(e, &msgs[i])
	}
	return n
}

func pick(msgs []chat.Message, idx ...int) []chat.Message {
	var out []chat.Message
	for _, i := range idx {
		out = append(out, msgs[i])
	}
	return out
}

func TestFitTruncates(t *testing.T) {
	const model = "test-model"
	c := newCounter(t, Config{ToolResultMaxTokens: 0})
	tests := []struct {
		name    string
		history func(h *history)
		// fit names the messages whose tokens make the budget.
		fit  []int
		want []string
	}{
		{
			name: "drops oldest first",
			history: func(h *history) {
				h.text("sys", "system", 10).text("u1", "user", 50).text("a1", "assistant", 50).
					text("u2", "user", 50).text("a2", "assistant", 50).text("u3", "user", 50)
			},
			fit:  []int{0, 4, 5},
			want: []string{"sys", "a2", "u3"},
		},
		{
			name: "budget between units keeps the newer unit whole",
			history: func(h *history) {
				h.text("sys", "system", 10).text("u1", "user", 50).text("a1", "assistant", 50).
					text("u2", "user", 50).text("a2", "assistant", 50).text("u3", "user", 50)
			},
			fit:  []int{0, 3, 4, 5, 2}, // a1 fits only if u1 went too
			want: []string{"sys", "a1", "u2", "a2", "u3"},
		},
		{
			name: "tool call goes with all of its results",
			history: func(h *history) {
				h.text("sys", "system", 10).text("u1", "user", 20).call("call", "c1", "c2").
					result("r1", "c1", 40).result("r2", "c2", 40).text("a1", "assistant", 20).text("u2", "user", 20)
			},
			fit:  []int{0, 2, 3, 5, 6}, // room for the call and one result only
			want: []string{"sys", "a1", "u2"},
		},
		{
			name: "last user stays while the turn after it is trimmed",
			history: func(h *history) {
				h.text("sys", "system", 10).text("u1", "user", 40).text("a1", "assistant", 40).text("u2", "user", 20).
					call("call1", "c1").result("r1", "c1", 60).call("call2", "c2").result("r2", "c2", 60)
			},
			fit:  []int{0, 3, 6, 7},
			want: []string{"sys", "u2", "call2", "r2"},
		},
		{
			name: "system and developer messages stay wherever they are",
			history: func(h *history) {
				h.text("dev", "developer", 10).text("u1", "user", 40).text("sys", "system", 10).
					text("a1", "assistant", 40).text("u2", "user", 20)
			},
			fit:  []int{0, 2, 4},
			want: []string{"dev", "sys", "u2"},
		},
		{
			name: "orphaned tool result in the input is its own unit",
			history: func(h *history) {
				h.text("sys", "system", 10).result("orphan", "gone", 40).text("u1", "user", 20).text("a1", "assistant", 20).text("u2", "user", 20)
			},
			fit:  []int{0, 2, 3, 4},
			want: []string{"sys", "u1", "a1", "u2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &history{tb: t}
			tt.history(h)
			cp := capFor(t, c, model, sum(c, model, pick(h.msgs, tt.fit...), nil))
			f, err := c.Fit(model, h.msgs, nil, 0, cp)
			if err != nil {
				t.Fatal(err)
			}
			if got := h.namesOf(f.Messages); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if got, want := f.PromptTokens, sum(c, model, f.Messages, nil); got != want {
				t.Errorf("got PromptTokens %d, want %d", got, want)
			}
			if got, want := f.DroppedMessages, len(h.msgs)-len(tt.want); got != want {
				t.Errorf("got DroppedMessages %d, want %d", got, want)
			}
			if got, want := f.DroppedTokens, sum(c, model, h.msgs, nil)-f.PromptTokens; got != want {
				t.Errorf("got DroppedTokens %d, want %d", got, want)
			}
		})
	}
}

func TestFitHistoryWindow(t *testing.T) {
	tests := []struct {
		name    string
		window  int
		history func(h *history)
		want    []string
	}{
		{
			name:   "keeps the last N non-system messages",
			window: 2,
			history: func(h *history) {
				h.text("sys", "system", 5).text("u1", "user", 5).text("a1", "assistant", 5).
					text("u2", "user", 5).text("a2", "assistant", 5).text("u3", "user", 5)
			},
			want: []string{"sys", "a2", "u3"},
		},
		{
			name:   "drops a unit whole rather than split it",
			window: 2,
			history: func(h *history) {
				h.text("sys", "system", 5).text("u1", "user", 5).call("call", "c1").result("r1", "c1", 5).text("u2", "user", 5)
			},
			want: []string{"sys", "u2"},
		},
		{
			name:   "keeps the last user message, which counts towards N",
			window: 1,
			history: func(h *history) {
				h.text("u1", "user", 5).call("call", "c1").result("r1", "c1", 5).text("a1", "assistant", 5)
			},
			want: []string{"u1"},
		},
		{
			name:   "within the window nothing changes",
			window: 10,
			history: func(h *history) {
				h.text("sys", "system", 5).text("u1", "user", 5).text("a1", "assistant", 5)
			},
			want: []string{"sys", "u1", "a1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCounter(t, Config{HistoryWindow: tt.window})
			h := &history{tb: t}
			tt.history(h)
			f, err := c.Fit("m", h.msgs, nil, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := h.namesOf(f.Messages); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFitUnchanged(t *testing.T) {
	c := newCounter(t, DefaultConfig())
	h := &history{tb: t}
	h.text("sys", "system", 20).text("u1", "user", 200).call("call", "c1").result("r1", "c1", 3000).text("u2", "user", 20)
	tools := decodeTools(t, cookbookTools)
	f, err := c.Fit("gpt-4o", h.msgs, tools, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if &f.Messages[0] != &h.msgs[0] || len(f.Messages) != len(h.msgs) {
		t.Errorf("got a new slice, want the input itself")
	}
	if f.DroppedMessages != 0 || f.DroppedTokens != 0 || f.Shortened != 0 {
		t.Errorf("got %+v dropped, want nothing", f)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := c.Fit("gpt-4o", h.msgs, tools, 0, 0); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("got %v allocations per warm Fit, want 0", allocs)
	}
}

func TestFitTooLong(t *testing.T) {
	c := newCounter(t, Config{ContextWindow: 1000, ToolResultMaxTokens: 64})
	h := &history{tb: t}
	h.text("sys", "system", 600).text("u1", "user", 10).text("a1", "assistant", 10).text("u2", "user", 300)
	small := &history{tb: t}
	small.text("u1", "user", 10)
	tests := []struct {
		name      string
		msgs      []chat.Message
		tools     []chat.Tool
		maxTokens int
		cap       int
	}{
		{name: "pinned messages exceed the window", msgs: h.msgs},
		{name: "max_tokens takes the whole window", msgs: small.msgs, maxTokens: 1000},
		{name: "max_tokens leaves too little", msgs: h.msgs[1:], maxTokens: 900},
		{name: "cap below the last user message", msgs: small.msgs, cap: 10},
		{name: "tools alone exceed the cap", msgs: small.msgs, tools: decodeTools(t, cookbookTools), cap: 60},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Fit("m", tt.msgs, tt.tools, tt.maxTokens, tt.cap)
			var ce *chat.Error
			if !errors.As(err, &ce) {
				t.Fatalf("got error %v, want a *chat.Error", err)
			}
			got := [4]any{ce.Status, ce.Type, ce.Code, ce.Param}
			want := [4]any{http.StatusBadRequest, chat.TypeInvalidRequest, CodeContextLengthExceeded, "messages"}
			if got != want {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

var markerRE = regexp.MustCompile(`\n…\[phasegate: (\d+) tokens omitted\]…\n`)

func TestFitShortensToolResult(t *testing.T) {
	const model = "gpt-4o"
	cfg := DefaultConfig()
	cfg.ToolResultMaxTokens = 300
	c := newCounter(t, cfg)
	e := c.models.resolve(model).enc
	h := &history{tb: t}
	h.text("sys", "system", 10).text("u1", "user", 10).call("call", "c1").result("r1", "c1", 5000).text("u2", "user", 10)
	before := sum(c, model, h.msgs, nil)

	t.Run("not when it fits", func(t *testing.T) {
		f, err := c.Fit(model, h.msgs, nil, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if f.Shortened != 0 || &f.Messages[0] != &h.msgs[0] {
			t.Errorf("got %d shortened, a new slice; want the input unchanged", f.Shortened)
		}
	})

	t.Run("in the middle when it does not", func(t *testing.T) {
		f, err := c.Fit(model, h.msgs, nil, 0, capFor(t, c, model, 1000))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := h.namesOf(f.Messages), h.names; !slices.Equal(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
		if f.Shortened != 1 || f.DroppedMessages != 0 {
			t.Errorf("got %d shortened, %d dropped; want 1, 0", f.Shortened, f.DroppedMessages)
		}
		if got, want := f.DroppedTokens, before-f.PromptTokens; got != want {
			t.Errorf("got DroppedTokens %d, want %d", got, want)
		}
		orig, short := h.msgs[3], f.Messages[3]
		if got := c.messageTokens(e, &short); got > cfg.ToolResultMaxTokens {
			t.Errorf("shortened result has %d tokens, want at most %d", got, cfg.ToolResultMaxTokens)
		}
		if short.ToolCallID != "c1" || !strings.Contains(string(short.Raw), `"x_seq":3`) {
			t.Errorf("shortened result lost its other fields: %s", short.Raw)
		}
		text, full := short.Text(), orig.Text()
		loc := markerRE.FindStringSubmatchIndex(text)
		if loc == nil {
			t.Fatalf("no marker in %q", text)
		}
		head, tail := text[:loc[0]], text[loc[1]:]
		if !strings.HasPrefix(full, head) || !strings.HasSuffix(full, tail) || len(head) == 0 || len(tail) == 0 {
			t.Fatalf("got head %q and tail %q, want a prefix and a suffix of the original", head, tail)
		}
		omitted, _ := strconv.Atoi(text[loc[2]:loc[3]])
		if want := reference(t, e.name)(full[len(head) : len(full)-len(tail)]); omitted != want {
			t.Errorf("marker says %d tokens omitted, want %d", omitted, want)
		}
	})

	t.Run("once for a re-sent history", func(t *testing.T) {
		cp := capFor(t, c, model, 1000)
		first, err := c.Fit(model, h.msgs, nil, 0, cp)
		if err != nil {
			t.Fatal(err)
		}
		before := c.encodes.Load()
		again, err := c.Fit(model, decodeMessages(t, string(mustJSON(t, h.msgs))), nil, 0, cp)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.encodes.Load() - before; got != 0 {
			t.Errorf("got %d tiktoken calls, want 0", got)
		}
		if got, want := string(again.Messages[3].Raw), string(first.Messages[3].Raw); got != want {
			t.Errorf("got %s, want the same shortening %s", got, want)
		}
	})
}

func TestFitUsesRatio(t *testing.T) {
	const model = "deepseek-v4-flash"
	c := newCounter(t, DefaultConfig())
	h := &history{tb: t}
	h.text("sys", "system", 10).text("u1", "user", 400).text("a1", "assistant", 400).text("u2", "user", 10)
	cp := capFor(t, c, model, sum(c, model, h.msgs, nil))
	if f, err := c.Fit(model, h.msgs, nil, 0, cp); err != nil || f.DroppedMessages != 0 {
		t.Fatalf("got %+v, %v; want it to fit", f, err)
	}
	for range 50 {
		c.Observe(model, 1000, 1500) // the upstream counts half again as many
	}
	f, err := c.Fit(model, h.msgs, nil, 0, cp)
	if err != nil {
		t.Fatal(err)
	}
	if f.DroppedMessages == 0 {
		t.Errorf("got nothing dropped with ratio %v, want truncation", c.Ratio(model))
	}
	if got, want := f.Estimate, estimate(f.PromptTokens, c.Ratio(model)); got != want {
		t.Errorf("got Estimate %d, want %d", got, want)
	}
}

func TestLimits(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Models["custom"] = Limits{ContextWindow: 50_000}
	c := newCounter(t, cfg)
	override := cfg
	override.ContextWindow = 4096
	small := newCounter(t, override)
	tests := []struct {
		name    string
		c       *Counter
		model   string
		want    Limits
		reserve int
	}{
		{"exact", c, "gpt-4o", cfg.Models["gpt-4o"], 16_384},
		{"longest prefix", c, "gpt-4o-mini-2024-07-18", cfg.Models["gpt-4o-mini"], 16_384},
		{"prefix family", c, "gpt-4.1-nano", cfg.Models["gpt-4.1"], 32_768},
		{"deepseek", c, "deepseek-v4-pro", cfg.Models["deepseek-v4-pro"], 32_768},
		{"unknown", c, "llama-3-70b", DefaultConfig().Default, 4096},
		{"zero fields inherit the default", c, "custom", Limits{ContextWindow: 50_000, CompletionReserve: 4096, SafetyMargin: 0.10, Encoding: EncodingCL100K}, 4096},
		{"window override", small, "deepseek-v4-flash", Limits{ContextWindow: 4096, CompletionReserve: 32_768, SafetyMargin: 0.10, Encoding: EncodingO200K}, 2048},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.c.Limits(tt.model)
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			b, err := newBudget(got, 0, 1, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if b.reserve != tt.reserve {
				t.Errorf("got reserve %d, want %d", b.reserve, tt.reserve)
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	tests := []struct {
		name string
		cfg  func(*Config)
	}{
		{"unknown encoding", func(c *Config) { c.Default.Encoding = "p50k_base" }},
		{"model encoding", func(c *Config) { c.Models["x"] = Limits{Encoding: "gpt2"} }},
		{"negative window", func(c *Config) { c.Models["x"] = Limits{ContextWindow: -1} }},
		{"margin of 1", func(c *Config) { c.Default.SafetyMargin = 1 }},
		{"negative override", func(c *Config) { c.ContextWindow = -5 }},
		{"tiny tool cap", func(c *Config) { c.ToolResultMaxTokens = 10 }},
		{"negative history", func(c *Config) { c.HistoryWindow = -1 }},
		{"negative cache", func(c *Config) { c.CacheBytes = -1 }},
		{"empty model name", func(c *Config) { c.Models[""] = Limits{} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.cfg(&cfg)
			if _, err := New(cfg); err == nil {
				t.Errorf("got no error, want one")
			}
		})
	}
}

func ExampleCounter_Fit() {
	c, err := New(DefaultConfig())
	if err != nil {
		panic(err)
	}
	var msgs []chat.Message
	_ = json.Unmarshal([]byte(cookbookMessages), &msgs)
	f, err := c.Fit("gpt-4o", msgs, nil, 0, 0)
	fmt.Println(f.PromptTokens, f.DroppedMessages, err)
	// Output: 124 0 <nil>
}
