package tokens

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/phasegate/phasegate/chat"
)

func repeatTo(s string, n int) string {
	return strings.Repeat(s, n/len(s)+1)[:n]
}

// BenchmarkCount measures tiktoken throughput through the splitter,
// without the cache.
func BenchmarkCount(b *testing.B) {
	texts := []struct {
		name string
		text string
	}{
		{"english", repeatTo(englishText, 64<<10)},
		{"code", repeatTo(codeText(b), 64<<10)},
		{"chinese", repeatTo(chineseText, 64<<10)},
	}
	for _, enc := range []string{EncodingO200K, EncodingCL100K} {
		e, err := loadEncoding(enc)
		if err != nil {
			b.Fatal(err)
		}
		for _, tt := range texts {
			b.Run(tt.name+"/"+enc, func(b *testing.B) {
				c := &Counter{}
				b.SetBytes(int64(len(tt.text)))
				n := 0
				for b.Loop() {
					n = c.countText(e, tt.text)
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
				b.ReportMetric(float64(len(tt.text))/float64(n), "bytes/token")
			})
		}
	}
}

// agentHistory returns an agent's history of about tokens tokens: a system
// prompt, then turns of a user message, tool calls with results (code and
// prose) and an answer.
func agentHistory(tb testing.TB, c *Counter, model string, tokens int) *history {
	code := codeText(tb)
	h := &history{tb: tb}
	h.text("sys", "system", 600)
	for turn := 0; sum(c, model, h.msgs, nil) < tokens; turn++ {
		h.text(fmt.Sprintf("u%d", turn), "user", 40+turn%50)
		for step := range 3 {
			id := fmt.Sprintf("call_%d_%d", turn, step)
			h.call(fmt.Sprintf("call%d.%d", turn, step), id)
			off := (turn*7919 + step*4099) % (len(code) - 6000)
			h.add("r"+id, map[string]any{"role": "tool", "tool_call_id": id, "content": code[off : off+2000+step*1500]})
		}
		h.text(fmt.Sprintf("a%d", turn), "assistant", 150)
	}
	return h
}

// BenchmarkFit100k measures Fit on a 100k-token agent history: cold (empty
// cache), and warm with one new message appended each time, fitting as it
// is, truncated to a 64k window, and truncated with a 30k-token tool
// result shortened.
func BenchmarkFit100k(b *testing.B) {
	const model = "deepseek-v4-flash"
	base := newCounter(b, DefaultConfig())
	h := agentHistory(b, base, model, 100_000)
	b.Logf("history: %d messages, %d tokens, %d bytes", len(h.msgs), sum(base, model, h.msgs, nil), len(mustJSON(b, h.msgs)))

	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			c := newCounter(b, DefaultConfig())
			b.StartTimer()
			if _, err := c.Fit(model, h.msgs, nil, 0, 0); err != nil {
				b.Fatal(err)
			}
		}
	})

	big := &history{tb: b, msgs: append([]chat.Message(nil), h.msgs...), names: append([]string(nil), h.names...)}
	big.msgs = big.msgs[:len(big.msgs)-1]
	big.add("huge", map[string]any{"role": "tool", "tool_call_id": "call_huge", "content": repeatTo(codeText(b), 120_000)})
	withHuge := append(big.msgs[:len(big.msgs)-1:len(big.msgs)-1], msg(b, map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{
		map[string]any{"id": "call_huge", "type": "function", "function": map[string]any{"name": "read_file", "arguments": `{"path":"all.go"}`}},
	}}), big.msgs[len(big.msgs)-1])

	warm := []struct {
		name string
		cfg  func(*Config)
		msgs []chat.Message
	}{
		{"warm/fits", func(*Config) {}, h.msgs},
		{"warm/truncates", func(c *Config) { c.ContextWindow = 64_000 }, h.msgs},
		{"warm/shortens", func(c *Config) { c.ContextWindow = 64_000; c.ToolResultMaxTokens = 4096 }, withHuge},
	}
	for _, tt := range warm {
		b.Run(tt.name, func(b *testing.B) {
			cfg := DefaultConfig()
			tt.cfg(&cfg)
			c := newCounter(b, cfg)
			msgs := append(tt.msgs[:len(tt.msgs):len(tt.msgs)], chat.Message{})
			if _, err := c.Fit(model, msgs[:len(msgs)-1], nil, 0, 0); err != nil {
				b.Fatal(err)
			}
			news := make([]chat.Message, 256)
			for i := range news {
				news[i] = msg(b, map[string]any{"role": "user", "content": fmt.Sprintf("New question %d: %s", i, filler(30))})
			}
			i := 0
			var f Fit
			for b.Loop() {
				msgs[len(msgs)-1] = news[i%len(news)]
				i++
				var err error
				if f, err = c.Fit(model, msgs, nil, 0, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(f.DroppedMessages), "dropped")
			b.ReportMetric(float64(f.Shortened), "shortened")
		})
	}
}

// BenchmarkCacheMemory measures the heap the count cache holds for a
// 100k-token history, and what the caches allocate when built at their
// default bound, before they hold anything.
func BenchmarkCacheMemory(b *testing.B) {
	const model = "deepseek-v4-flash"
	h := agentHistory(b, newCounter(b, DefaultConfig()), model, 100_000)
	var perHistory, perEntry float64
	for b.Loop() {
		b.StopTimer()
		c := newCounter(b, DefaultConfig())
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		f, err := c.Fit(model, h.msgs, nil, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		grown := float64(after.HeapAlloc) - float64(before.HeapAlloc)
		perHistory = grown * 100_000 / float64(f.PromptTokens)
		perEntry = grown / float64(c.cache.len())
		runtime.KeepAlive(c)
		b.StartTimer()
	}
	b.ReportMetric(perHistory, "cache-B/100k-tokens")
	b.ReportMetric(perEntry, "B/entry")

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	idle := []any{newCache(DefaultCacheBytes - DefaultCacheBytes/shortenedShare), newShortCache(DefaultCacheBytes / shortenedShare)}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(idle)
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc), "idle-B")
}

// hostile are inputs a client can send to make tokenizing slow.
var hostile = []struct {
	name string
	unit string
}{
	{"letter", "a"},
	{"mixed-case", "aB"},
	{"space", " "},
	{"newline", "\n"},
	{"space-newline", " \n"},
	{"tab-space", "\t "},
	{"digits", "1234567890"},
	{"punctuation", "!"},
	{"brackets", "{["},
	{"chinese", "中"},
	{"combining", "e\u0301"},
	{"apostrophes", "'s"},
	{"invalid-utf8", "\xff"},
}

// BenchmarkHostile measures counting time per byte at two sizes: a linear
// counter shows the same MB/s at both.
func BenchmarkHostile(b *testing.B) {
	e, err := loadEncoding(EncodingO200K)
	if err != nil {
		b.Fatal(err)
	}
	for _, tt := range hostile {
		for _, size := range []int{64 << 10, 1 << 20} {
			text := repeatTo(tt.unit, size)
			b.Run(fmt.Sprintf("%s/%dKiB", tt.name, size>>10), func(b *testing.B) {
				c := &Counter{}
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					c.countText(e, text)
				}
			})
		}
	}
}

// BenchmarkHostileUnsplit is tiktoken-go without the splitter, for
// comparison: the time per byte grows with the size on the runs that make
// one long piece.
func BenchmarkHostileUnsplit(b *testing.B) {
	count := reference(b, EncodingO200K)
	for _, tt := range hostile {
		for _, size := range []int{4 << 10, 16 << 10} {
			text := repeatTo(tt.unit, size)
			b.Run(fmt.Sprintf("%s/%dKiB", tt.name, size>>10), func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					count(text)
				}
			})
		}
	}
}

// BenchmarkFitNewToolResult is an agent's next request: a 20k-token
// history it sent before (cached), and a new tool result of about 2,000
// tokens, fitted by Fit, which counts the new result, and by FitBounded,
// which sees by its size that the prompt cannot reach gpt-4o's window.
//
//	go test ./tokens -run '^$' -bench BenchmarkFitNewToolResult -benchmem
func BenchmarkFitNewToolResult(b *testing.B) {
	const model = "gpt-4o"
	code := codeText(b)
	for _, name := range []string{"Fit", "FitBounded"} {
		b.Run(name, func(b *testing.B) {
			c := newCounter(b, DefaultConfig())
			h := agentHistory(b, c, model, 20_000)
			h.call("next", "call_next")
			n := len(h.msgs)
			fit := c.Fit
			if name == "FitBounded" {
				fit = c.FitBounded
			}
			i := 0
			for b.Loop() {
				b.StopTimer()
				i++
				off := (i * 7919) % (len(code) - 9000)
				h.msgs = h.msgs[:n]
				h.add("result", map[string]any{"role": "tool", "tool_call_id": "call_next", "content": code[off : off+8000]})
				b.StartTimer()
				if _, err := fit(model, h.msgs, nil, 0, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodingMemory measures the heap one encoding holds once built
// as the gateway builds it (tiktoken-go's BPE from the ranks compiled into
// tiktoken-go-loader), and the part of it that is the ranks alone: the
// rest is what tiktoken-go builds beside them (a decoder map and a sorted
// copy of every token), which counting never reads.
//
//	go test ./tokens -run '^$' -bench '^BenchmarkEncodingMemory$' -benchtime 1x
func BenchmarkEncodingMemory(b *testing.B) {
	offlineLoader.Do(func() { tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader()) })
	files := map[string]string{
		EncodingO200K:  "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
		EncodingCL100K: "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	for _, name := range []string{EncodingO200K, EncodingCL100K} {
		b.Run(name, func(b *testing.B) {
			var whole, ranks float64
			for b.Loop() {
				h0 := heap()
				tk, err := tiktoken.GetEncoding(name)
				if err != nil {
					b.Fatal(err)
				}
				h1 := heap()
				r, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(files[name])
				if err != nil {
					b.Fatal(err)
				}
				h2 := heap()
				if len(tk.EncodeOrdinary("hello world")) != 2 || len(r) < 100_000 {
					b.Fatalf("%s: not the encoding expected", name)
				}
				whole, ranks = float64(h1-h0)/(1<<20), float64(h2-h1)/(1<<20)
				runtime.KeepAlive(tk)
				runtime.KeepAlive(r)
			}
			b.ReportMetric(whole, "heap-MiB")
			b.ReportMetric(ranks, "ranks-MiB")
		})
	}
}
