package tokens

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Limits are the token limits of one model.
type Limits struct {
	// ContextWindow is the number of tokens, prompt and completion
	// together, the model accepts.
	ContextWindow int
	// CompletionReserve is kept free for the completion when the request
	// sets neither max_tokens nor max_completion_tokens. At most half of the
	// window is reserved this way, so a small ContextWindow override still
	// leaves room for a prompt.
	CompletionReserve int
	// SafetyMargin is the fraction added to every estimate before it is
	// compared with the window (0.1: 10 %), for the tokenizer mismatch
	// the learned ratio has not absorbed. In [0, 1).
	SafetyMargin float64
	// Encoding is the tiktoken encoding: EncodingO200K or EncodingCL100K.
	Encoding string
}

// Config configures a Counter. Start from DefaultConfig and override.
type Config struct {
	// Models holds the limits by model name. A request's model takes the
	// entry of the same name, else the entry with the longest name that is
	// a prefix of it ("gpt-4o" covers "gpt-4o-2024-08-06"), else Default. A
	// zero field of an entry takes Default's value.
	Models map[string]Limits
	// Default is for names Models does not match; its zero fields take
	// the values of DefaultConfig().Default.
	Default Limits
	// ContextWindow, when positive, replaces the window of every model:
	// for small deployments and tests (env CONTEXT_WINDOW).
	ContextWindow int
	// ToolResultMaxTokens: when a prompt does not fit, tool results longer
	// than this are first shortened in the middle to at most about this
	// many tokens. 0: never shorten; DefaultConfig sets 16384.
	ToolResultMaxTokens int
	// HistoryWindow, when positive, keeps at most the last N non-system
	// messages (whole units, and always the last user message). 0: off.
	HistoryWindow int
	// CacheBytes bounds the memory of the caches: three quarters for
	// counts, a quarter for shortened tool results. 0: DefaultCacheBytes.
	CacheBytes int64
	// EncodingLoaded, when set, is called once an encoding's tables were
	// built, by the Counter whose count needed them first (once per
	// encoding and process): loading makes about as much garbage as it
	// keeps, and the program may hand it back to the system then.
	EncodingLoaded func(encoding string)
}

// DefaultCacheBytes bounds the caches when Config.CacheBytes is 0: about
// 260,000 counted messages and tool definitions (some 1,200 agent
// histories of 100k tokens), and 8 MiB of shortened tool results.
const DefaultCacheBytes = 32 << 20

// minToolResultMaxTokens leaves room in a shortened tool result for more
// than the marker.
const minToolResultMaxTokens = 64

// defaultLimits are the limits of a model the configuration does not name:
// a 128k window, which most current chat models offer or exceed, counted
// with cl100k_base and a 10 % margin since its tokenizer is unknown.
var defaultLimits = Limits{
	ContextWindow:     128_000,
	CompletionReserve: 4096,
	SafetyMargin:      0.10,
	Encoding:          EncodingCL100K,
}

// DefaultConfig returns the built-in limits of current DeepSeek and OpenAI
// models. Windows as the providers publish them (DeepSeek retired
// deepseek-chat and deepseek-reasoner in July 2026 for the v4 models, 1M
// context). Reserves: the models' usual output sizes; 25,000 for the o
// series, the room OpenAI's reasoning guide recommends for reasoning and
// output; 128,000 for gpt-5, which accepts at most 272,000 input tokens of
// its 400,000. Margins: 2 % where tiktoken is the model's own tokenizer
// (only message and tool framing is estimated), 10 % for DeepSeek.
func DefaultConfig() Config {
	deepseek := Limits{ContextWindow: 1_000_000, CompletionReserve: 32_768, SafetyMargin: 0.10, Encoding: EncodingO200K}
	openai := func(window, reserve int) Limits {
		return Limits{ContextWindow: window, CompletionReserve: reserve, SafetyMargin: 0.02, Encoding: EncodingO200K}
	}
	return Config{
		Models: map[string]Limits{
			"deepseek-v4-flash": deepseek,
			"deepseek-v4-pro":   deepseek,
			"gpt-4o":            openai(128_000, 16_384),
			"gpt-4o-mini":       openai(128_000, 16_384),
			"gpt-4.1":           openai(1_047_576, 32_768), // and -mini, -nano
			"o3":                openai(200_000, 25_000),
			"o4-mini":           openai(200_000, 25_000),
			"gpt-5":             openai(400_000, 128_000), // and -mini, -nano
		},
		Default:             defaultLimits,
		ToolResultMaxTokens: 16_384,
		CacheBytes:          DefaultCacheBytes,
	}
}

// model is a resolved Models entry, or the default.
type model struct {
	name    string // the Models key; "" for the default
	limits  Limits
	enc     *encoding
	learned *learned // nil for the default: unknown names learn apart
}

// models resolves request model names to their limits. Read-only after
// newModels.
type models struct {
	exact    map[string]*model
	prefixes []*model // longest name first
	def      *model
}

func newModels(cfg Config) (*models, error) {
	def, err := fill(cfg.Default, defaultLimits, cfg.ContextWindow)
	if err != nil {
		return nil, fmt.Errorf("default limits: %w", err)
	}
	ms := &models{exact: make(map[string]*model, len(cfg.Models))}
	if ms.def, err = newModel("", def); err != nil {
		return nil, err
	}
	for name, l := range cfg.Models {
		if name == "" {
			return nil, errors.New("model limits with an empty name")
		}
		l, err := fill(l, def, cfg.ContextWindow)
		if err != nil {
			return nil, fmt.Errorf("limits of model %q: %w", name, err)
		}
		m, err := newModel(name, l)
		if err != nil {
			return nil, err
		}
		m.learned = new(learned)
		ms.exact[name] = m
		ms.prefixes = append(ms.prefixes, m)
	}
	sort.Slice(ms.prefixes, func(i, j int) bool {
		a, b := ms.prefixes[i].name, ms.prefixes[j].name
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return a < b
	})
	return ms, nil
}

func newModel(name string, l Limits) (*model, error) {
	e, err := loadEncoding(l.Encoding)
	if err != nil {
		if name == "" {
			return nil, fmt.Errorf("default limits: %w", err)
		}
		return nil, fmt.Errorf("model %q: %w", name, err)
	}
	return &model{name: name, limits: l, enc: e}, nil
}

// fill gives the zero fields of l the values of def, applies the window
// override and validates the result.
func fill(l, def Limits, window int) (Limits, error) {
	if l.ContextWindow == 0 {
		l.ContextWindow = def.ContextWindow
	}
	if window > 0 {
		l.ContextWindow = window
	}
	if l.CompletionReserve == 0 {
		l.CompletionReserve = def.CompletionReserve
	}
	if l.SafetyMargin == 0 {
		l.SafetyMargin = def.SafetyMargin
	}
	if l.Encoding == "" {
		l.Encoding = def.Encoding
	}
	switch {
	case l.ContextWindow <= 0:
		return l, fmt.Errorf("context window %d: want > 0", l.ContextWindow)
	case l.CompletionReserve < 0:
		return l, fmt.Errorf("completion reserve %d: want >= 0", l.CompletionReserve)
	case l.SafetyMargin < 0 || l.SafetyMargin >= 1:
		return l, fmt.Errorf("safety margin %v: want in [0, 1)", l.SafetyMargin)
	}
	return l, nil
}

// resolve returns the entry for a request's model name.
func (ms *models) resolve(name string) *model {
	if m, ok := ms.exact[name]; ok {
		return m
	}
	for _, m := range ms.prefixes {
		if strings.HasPrefix(name, m.name) {
			return m
		}
	}
	return ms.def
}

func validate(cfg Config) error {
	switch {
	case cfg.ContextWindow < 0:
		return fmt.Errorf("context window override %d: want >= 0", cfg.ContextWindow)
	case cfg.ToolResultMaxTokens < 0 || (cfg.ToolResultMaxTokens > 0 && cfg.ToolResultMaxTokens < minToolResultMaxTokens):
		return fmt.Errorf("tool result max tokens %d: want 0 or >= %d", cfg.ToolResultMaxTokens, minToolResultMaxTokens)
	case cfg.HistoryWindow < 0:
		return fmt.Errorf("history window %d: want >= 0", cfg.HistoryWindow)
	case cfg.CacheBytes < 0:
		return fmt.Errorf("cache bytes %d: want >= 0", cfg.CacheBytes)
	}
	return nil
}
