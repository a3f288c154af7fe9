package tokens

import (
	"math"
	"sync"
	"sync/atomic"
)

// Learning from the upstream. The rule: learning only makes the fit more
// careful. It may raise a count freely (up to maxRatio), lower it only a
// little (minRatio), and lower a window, never raise one.
const (
	// maxRatio bounds the ratio above: a tokenizer that counts twice
	// tiktoken's tokens is far outside anything measured, so a higher
	// reading is a broken upstream, not a tokenizer.
	maxRatio = 2.0
	// minRatio bounds the ratio below: learning may lower a count by 5 %
	// at most. The measured gap where tiktoken overcounts (DeepSeek on
	// Chinese, 9–27 %) is larger, but a ratio below 1 is just what an
	// upstream that under-reports prompt_tokens (cached tokens left out)
	// teaches, and a low ratio is the one mistake that sends a prompt the
	// upstream rejects. ratioFloor raises it further for small margins.
	minRatio = 0.95
	// ratioHorizon is the size, in counted tokens, of the memory of the
	// ratio: an observation of n tokens moves it the share
	// 1-exp(-n/ratioHorizon) of the way to its own ratio. So observations
	// weigh by their size and compose: k prompts of n tokens at one ratio
	// move it exactly as far as one prompt of k·n tokens. 2^18 is about
	// two 128k windows: a history filling a 128k window moves the ratio
	// 39 % of the way, a 1,000-token tool-call prompt 0.4 %, and a prompt
	// under 100 tokens, whose ratio the upstream's fixed framing decides
	// rather than the tokenizer, less than 0.04 %.
	ratioHorizon = 1 << 18
	// maxUnknownModels bounds the names outside Config.Models that learn
	// of their own, since the names come from clients.
	maxUnknownModels = 64
)

// learned is what a model's upstream taught the Counter: the ratio of its
// prompt_tokens to the tiktoken count, and the limits it reported in
// context-length errors. Safe for concurrent use; the zero value has
// learned nothing, and so has a nil *learned.
type learned struct {
	ratio  atomic.Uint64 // math.Float64bits; 0 for the ratio 1
	window atomic.Int64  // context window the upstream reported; 0: none
	input  atomic.Int64  // limit of the prompt alone it reported; 0: none
}

func (l *learned) loadRatio() float64 {
	if l == nil {
		return 1
	}
	if b := l.ratio.Load(); b != 0 {
		return math.Float64frombits(b)
	}
	return 1
}

// updateRatio replaces the ratio with next(current) until no concurrent
// update intervenes.
func (l *learned) updateRatio(next func(float64) float64) {
	for {
		old := l.ratio.Load()
		cur := 1.0
		if old != 0 {
			cur = math.Float64frombits(old)
		}
		v := next(cur)
		if v == cur || l.ratio.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}

// lower sets *v to n when n is positive and below both the configured
// value and what *v already holds (0: nothing yet).
func lower(v *atomic.Int64, n, configured int) {
	if n <= 0 || n >= configured {
		return
	}
	for {
		old := v.Load()
		if old != 0 && old <= int64(n) {
			return
		}
		if v.CompareAndSwap(old, int64(n)) {
			return
		}
	}
}

// limits returns base with the window lowered to what the upstream
// reported, and the limit of the prompt alone it reported (0: none).
func (l *learned) limits(base Limits) (Limits, int) {
	if l == nil {
		return base, 0
	}
	if w := int(l.window.Load()); w > 0 && w < base.ContextWindow {
		base.ContextWindow = w
	}
	return base, int(l.input.Load())
}

// ratioFloor is the lowest ratio a model with limits l learns: minRatio,
// or more when the margin is under 1/minRatio-1 (5.3 %), so that the
// ratio and the margin together never judge a prompt smaller than its
// tiktoken count. With the 2 % margin of OpenAI models, whose tokenizer
// tiktoken is, a ratio below 1 can only come from under-reporting.
func ratioFloor(l Limits) float64 {
	return max(minRatio, 1/(1+l.SafetyMargin))
}

// Observe learns from one upstream answer: counted is the PromptTokens of
// the Fit that was sent, reported the prompt_tokens the upstream billed for
// it. The model's ratio moves towards reported/counted by the share
// 1-exp(-counted/262144): a prompt weighs by its size, so short prompts,
// however many, teach a long history only as much as the same number of
// tokens in one long prompt would. The observed ratio is first bounded to
// [0.95, 2] (the lower bound is higher for margins under 5.3 %, see
// Limits.SafetyMargin), so an upstream that under-reports can lower counts
// by 5 % at most. Answers without usage (reported <= 0) teach nothing.
// Names Config.Models does not match learn one ratio each, up to 64 names;
// later ones do not learn.
func (c *Counter) Observe(model string, counted, reported int) {
	if counted <= 0 || reported <= 0 {
		return
	}
	m := c.models.resolve(model)
	l := c.learnedOf(m, model, true)
	if l == nil {
		return
	}
	x := min(max(float64(reported)/float64(counted), ratioFloor(m.limits)), maxRatio)
	w := -math.Expm1(-float64(counted) / ratioHorizon)
	l.updateRatio(func(cur float64) float64 { return cur + w*(x-cur) })
}

// Ratio returns the learned ratio of model's prompt_tokens to the tiktoken
// count: 1 until Observe or LearnOverflow has seen the model, then in
// [0.95, 2]. Names that share a Models entry share a ratio.
func (c *Counter) Ratio(model string) float64 {
	return c.learnedOf(c.models.resolve(model), model, false).loadRatio()
}

// learnedOf returns what m learned, or the unknown name when m is the
// default; nil when there is none and create is false or the unknown names
// are at their bound.
func (c *Counter) learnedOf(m *model, name string, create bool) *learned {
	if m.learned != nil {
		return m.learned
	}
	return c.unknown.get(name, create)
}

// unknownModels holds what names outside Config.Models learned, up to
// maxUnknownModels names.
type unknownModels struct {
	mu sync.RWMutex
	m  map[string]*learned
}

func (u *unknownModels) get(name string, create bool) *learned {
	u.mu.RLock()
	l := u.m[name]
	u.mu.RUnlock()
	if l != nil || !create {
		return l
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if l := u.m[name]; l != nil {
		return l
	}
	if len(u.m) >= maxUnknownModels {
		return nil
	}
	if u.m == nil {
		u.m = make(map[string]*learned)
	}
	l = new(learned)
	u.m[name] = l
	return l
}
