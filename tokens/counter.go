package tokens

import (
	"fmt"
	"hash/maphash"
	"sync/atomic"
)

// Counter counts and fits chat requests. Build one with New; it is safe
// for concurrent use.
type Counter struct {
	models    *models
	toolMax   int
	history   int
	cache     *cache
	shortened *shortCache
	seed      maphash.Seed
	unknown   unknownModels
	loaded    func(encoding string) // Config.EncodingLoaded

	// encodes counts the calls into tiktoken, for tests of the cache.
	encodes atomic.Int64
}

// New validates cfg and returns a Counter. It loads every encoding cfg
// names, from the BPE files compiled into the binary, so that the first
// request does not pay for it: about 85 ms for cl100k_base and 210 ms for
// o200k_base, once per process.
func New(cfg Config) (*Counter, error) {
	if err := validate(cfg); err != nil {
		return nil, fmt.Errorf("tokens config: %w", err)
	}
	ms, err := newModels(cfg)
	if err != nil {
		return nil, fmt.Errorf("tokens config: %w", err)
	}
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = DefaultCacheBytes
	}
	return &Counter{
		models:    ms,
		toolMax:   cfg.ToolResultMaxTokens,
		history:   cfg.HistoryWindow,
		cache:     newCache(cfg.CacheBytes - cfg.CacheBytes/shortenedShare),
		shortened: newShortCache(cfg.CacheBytes / shortenedShare),
		seed:      maphash.MakeSeed(),
		loaded:    cfg.EncodingLoaded,
	}, nil
}

// Limits returns the limits that apply to a model name, the window
// override included: as configured, without what LearnOverflow learned.
func (c *Counter) Limits(model string) Limits {
	return c.models.resolve(model).limits
}
