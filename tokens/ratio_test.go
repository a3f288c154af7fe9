package tokens

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/phasegate/phasegate/metrics"
)

// share is the way an observation of n counted tokens moves the ratio.
func share(n int) float64 { return 1 - math.Exp(-float64(n)/ratioHorizon) }

func TestObserve(t *testing.T) {
	tests := []struct {
		name    string
		observe func(c *Counter)
		model   string
		want    float64
	}{
		{"unseen", func(c *Counter) {}, "gpt-4o", 1},
		{"converges", func(c *Counter) {
			for range 100 {
				c.Observe("deepseek-v4-flash", 100_000, 110_000)
			}
		}, "deepseek-v4-flash", 1.1},
		{"one prompt moves it by its size", func(c *Counter) { c.Observe("gpt-4o", ratioHorizon, ratioHorizon*3/2) }, "gpt-4o", 1 + 0.5*share(ratioHorizon)},
		{"bounded above", func(c *Counter) {
			for range 100 {
				c.Observe("gpt-4o", 100_000, 1_000_000)
			}
		}, "gpt-4o", 2},
		{"an under-reporting upstream lowers it by 5 % at most", func(c *Counter) {
			for range 100 {
				c.Observe("deepseek-v4-flash", 100_000, 50_000)
			}
		}, "deepseek-v4-flash", 0.95},
		{"and, under a 2 % margin, never below the tiktoken count", func(c *Counter) {
			for range 100 {
				c.Observe("gpt-4o", 100_000, 50_000)
			}
		}, "gpt-4o", 1 / 1.02},
		{"missing usage teaches nothing", func(c *Counter) { c.Observe("gpt-4o", 1000, 0) }, "gpt-4o", 1},
		{"an empty prompt teaches nothing", func(c *Counter) { c.Observe("gpt-4o", 0, 1000) }, "gpt-4o", 1},
		{"names of one entry share it", func(c *Counter) { c.Observe("gpt-4o-2024-08-06", ratioHorizon, ratioHorizon*3/2) }, "gpt-4o", 1 + 0.5*share(ratioHorizon)},
		{"entries do not share", func(c *Counter) { c.Observe("gpt-4o-mini", ratioHorizon, ratioHorizon*3/2) }, "gpt-4o", 1},
		{"unknown names learn apart", func(c *Counter) {
			c.Observe("llama-a", ratioHorizon, ratioHorizon*3/2)
			c.Observe("llama-b", ratioHorizon, ratioHorizon/2)
		}, "llama-a", 1 + 0.5*share(ratioHorizon)},
		{"unknown names are bounded", func(c *Counter) {
			for i := range maxUnknownModels {
				c.Observe(fmt.Sprintf("junk-%d", i), 1000, 1500)
			}
			c.Observe("late", 1000, 1500)
		}, "late", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCounter(t, DefaultConfig())
			tt.observe(c)
			if got := c.Ratio(tt.model); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("got ratio %v, want %v", got, tt.want)
			}
		})
	}
}

// TestObserveWeighsBySize: one observation at the ratio 1.5 moves the ratio
// by the share of its size, more for a larger prompt.
func TestObserveWeighsBySize(t *testing.T) {
	const model = "gpt-4o"
	tests := []struct {
		name    string
		counted int
		// atMost and atLeast bound the move, as a share of the way.
		atLeast, atMost float64
	}{
		{"a 20-token prompt", 20, 0, 0.0001},
		{"a 1,000-token tool-call prompt", 1000, 0.003, 0.004},
		{"a 10,000-token prompt", 10_000, 0.03, 0.04},
		{"a history filling a 128k window", 128_000, 0.38, 0.39},
		{"a 1M-token history", 1_000_000, 0.97, 0.98},
	}
	prev := 0.0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCounter(t, DefaultConfig())
			c.Observe(model, tt.counted, tt.counted*3/2)
			got := (c.Ratio(model) - 1) / 0.5
			if got < tt.atLeast || got > tt.atMost {
				t.Errorf("moved %.5f of the way, want within [%v, %v]", got, tt.atLeast, tt.atMost)
			}
			if got <= prev {
				t.Errorf("moved %.5f of the way, want more than the smaller prompt's %.5f", got, prev)
			}
			prev = got
		})
	}
}

// TestObserveComposes: k prompts of n tokens teach what one prompt of k·n
// tokens teaches, so splitting traffic neither gains nor loses weight.
func TestObserveComposes(t *testing.T) {
	tests := []struct {
		name     string
		k, n     int
		reported float64 // per counted token
	}{
		{"100 tool-call prompts", 100, 1000, 1.3},
		{"10 histories", 10, 50_000, 1.1},
		{"1,000 prompts of 200 tokens", 1000, 200, 1.8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			many, one := newCounter(t, DefaultConfig()), newCounter(t, DefaultConfig())
			for range tt.k {
				many.Observe("gpt-4o", tt.n, int(float64(tt.n)*tt.reported))
			}
			one.Observe("gpt-4o", tt.k*tt.n, int(float64(tt.k*tt.n)*tt.reported))
			if got, want := many.Ratio("gpt-4o"), one.Ratio("gpt-4o"); math.Abs(got-want) > 1e-9 {
				t.Errorf("got ratio %v after %d prompts, want %v as after one", got, tt.k, want)
			}
		})
	}
}

// learnCfg has small windows, so that histories around them are quick to
// build: a DeepSeek-like entry (10 % margin), an OpenAI-like one (2 %), and
// the default for unknown names.
func learnCfg() Config {
	return Config{
		Models: map[string]Limits{
			"ds": {ContextWindow: 16_000, CompletionReserve: 2000, SafetyMargin: 0.10, Encoding: EncodingO200K},
			"oa": {ContextWindow: 12_000, CompletionReserve: 1000, SafetyMargin: 0.02, Encoding: EncodingO200K},
			"g5": {ContextWindow: 40_000, CompletionReserve: 12_800, SafetyMargin: 0.02, Encoding: EncodingO200K},
		},
		Default: Limits{ContextWindow: 8000, CompletionReserve: 1000},
	}
}

// sized returns a history of about target tiktoken tokens for model: a
// system message, then user and assistant messages of about 60 tokens
// each, ending with a user message.
func sized(tb testing.TB, c *Counter, model string, target int) *history {
	tb.Helper()
	e := c.models.resolve(model).enc
	h := &history{tb: tb}
	h.text("sys", "system", 20)
	n := replyPriming + c.messageTokens(e, &h.msgs[0])
	for i := 0; n < target || len(h.msgs)%2 == 1; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		h.text(fmt.Sprintf("m%d", i), role, 50)
		n += c.messageTokens(e, &h.msgs[len(h.msgs)-1])
	}
	return h
}

// TestUnderReportingUpstream: an upstream that reports half the prompt
// tokens, forever, never gets a prompt larger than the window leaves. Its
// real count is the tiktoken count, so that is the bound. The old rule
// (ratio floor 0.5) sent up to twice as much.
func TestUnderReportingUpstream(t *testing.T) {
	tests := []struct {
		name  string
		model string
		// sizes are the histories' counts, as shares of the prompt's room.
		sizes []float64
	}{
		{"10 % margin", "ds", []float64{0.9, 0.99, 1.01, 1.1, 2}},
		{"2 % margin", "oa", []float64{0.9, 0.99, 1.01, 1.1, 2}},
		{"unknown name", "llama", []float64{0.9, 1.01, 1.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCounter(t, learnCfg())
			for range 1000 {
				c.Observe(tt.model, 10_000, 5000)
			}
			l := c.Limits(tt.model)
			room := l.ContextWindow - l.CompletionReserve
			for _, size := range tt.sizes {
				h := sized(t, c, tt.model, int(size*float64(room)))
				total := sum(c, tt.model, h.msgs, nil)
				f, err := c.Fit(tt.model, h.msgs, nil, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				if f.PromptTokens > room {
					t.Errorf("history of %d tokens: sent %d, want at most %d (ratio %v)", total, f.PromptTokens, room, c.Ratio(tt.model))
				}
				if total > room && f.DroppedMessages == 0 {
					t.Errorf("history of %d tokens, over %d: nothing dropped", total, room)
				}
			}
		})
	}
}

// TestShortPromptsDoNotLowerLongHistories: however many small prompts
// report a low ratio (tool-heavy turns, whose framing tiktoken
// overcounts), a long prose history is counted at least 95 % of its
// tiktoken count, and one that does not fit then is truncated.
func TestShortPromptsDoNotLowerLongHistories(t *testing.T) {
	tests := []struct {
		name     string
		model    string
		prompts  int
		reported float64 // per counted token
	}{
		{"a few at half", "ds", 10, 0.5},
		{"ten thousand at half", "ds", 10_000, 0.5},
		{"ten thousand at 0.8, unknown name", "llama", 10_000, 0.8},
		{"ten thousand at 0.8, 2 % margin", "oa", 10_000, 0.8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCounter(t, learnCfg())
			for range tt.prompts {
				c.Observe(tt.model, 300, int(300*tt.reported))
			}
			l := c.Limits(tt.model)
			room := l.ContextWindow - l.CompletionReserve
			// 6 % over what the margin leaves: a ratio under 0.94 would let it
			// through whole.
			h := sized(t, c, tt.model, int(float64(room)/(1+l.SafetyMargin)*1.06))
			f, err := c.Fit(tt.model, h.msgs, nil, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := f.Estimate, int(math.Ceil(0.95*float64(f.PromptTokens))); got < want {
				t.Errorf("got Estimate %d for %d tokens, want at least %d", got, f.PromptTokens, want)
			}
			if f.DroppedMessages == 0 {
				t.Errorf("nothing dropped with ratio %v, want the history truncated", c.Ratio(tt.model))
			}
			if got, limit := float64(f.PromptTokens)*0.95*(1+l.SafetyMargin), float64(room); got > limit {
				t.Errorf("sent %d tokens, %v with 95 %% and the margin, over %v", f.PromptTokens, got, limit)
			}
		})
	}
}

// TestRatioGauge: the phasegate_token_estimate_ratio gauge reads the
// ratio the Counter learned, by Observe and by LearnOverflow.
func TestRatioGauge(t *testing.T) {
	c := newCounter(t, DefaultConfig())
	for range 100 {
		c.Observe("deepseek-v4-flash", 100_000, 50_000)
	}
	c.LearnOverflow("gpt-4o", 100_000, 0, Overflow{Limit: 128_000, Requested: 125_000, Prompt: 125_000})
	reg := prometheus.NewRegistry()
	models := []string{"deepseek-v4-flash", "gpt-4o", "o3"}
	metrics.RegisterTokenRatios(reg, models, c.Ratio)
	want := "# HELP phasegate_token_estimate_ratio Learned ratio of the prompt tokens upstreams report to the gateway's tiktoken estimate, by configured model.\n" +
		"# TYPE phasegate_token_estimate_ratio gauge\n"
	for _, m := range models {
		want += fmt.Sprintf("phasegate_token_estimate_ratio{model=%q} %s\n", m, strconv.FormatFloat(c.Ratio(m), 'g', -1, 64))
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "phasegate_token_estimate_ratio"); err != nil {
		t.Error(err)
	}
	for m, want := range map[string]float64{"deepseek-v4-flash": 0.95, "gpt-4o": 1.25, "o3": 1} {
		if got := c.Ratio(m); math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: got ratio %v, want %v", m, got, want)
		}
	}
}
