// Package tokens counts the prompt tokens of a chat request and truncates
// its history so that it fits the model's context window without breaking
// the conversation.
//
// # Counting
//
// Counts come from tiktoken (github.com/pkoukk/tiktoken-go) with the BPE
// files compiled into the binary (tiktoken-go-loader): nothing touches the
// network or a cache directory, so the gateway starts offline. An encoding
// is loaded when it first counts, once per process, so a gateway whose
// requests need one encoding, or none, holds only that. Messages are
// framed as OpenAI's cookbook "How to count tokens with tiktoken" documents
// (https://cookbook.openai.com/examples/how_to_count_tokens_with_tiktoken):
// 3 tokens per message plus the tokens of each of its string fields, 1 more
// for a name, 3 to prime the reply. Tool definitions follow the same
// cookbook's num_tokens_for_tools, extended to nested schemas by counting
// their JSON text. Tool calls count their name and arguments plus
// perToolCall; reasoning_content counts with its message.
//
// tiktoken is not every upstream's tokenizer. DeepSeek's BPE is not
// published as a tiktoken file; o200k_base is the closest of the offline
// encodings. Against DeepSeek's tokenizer it reportedly undercounts
// English by about 1 % and code by about 7 % and overcounts Chinese by
// 9–27 %; on the Chinese sample in testdata it counts 0.76 tokens a Chinese
// character (punctuation included) where DeepSeek documents about 0.6,
// while cl100k_base counts 1.09 and would truncate Chinese histories for
// nothing. So every estimate is the tiktoken count times a per-model ratio
// learned from the prompt_tokens the upstream reports (Observe), plus a
// per-model safety margin.
//
// # Learning
//
// Learning only makes the fit more careful. The ratio may raise a count up
// to twice, but lower it by 5 % at most (and, where the margin is under
// 5.3 %, never below the tiktoken count itself): a low ratio is what an
// upstream that leaves cached tokens out of prompt_tokens teaches, and it
// is the one mistake that sends a prompt the upstream rejects. An
// observation weighs by the prompt's size (an EWMA whose weight is
// 1-exp(-counted/262144)), so a short tool-call prompt, whose framing makes
// its ratio, moves the ratio a long history is counted with only as much
// as its few tokens do, and no number of them lowers a count by over 5 %.
//
// When the upstream still rejects a prompt as too long, ParseOverflow
// reads its maximum and the tokens it counted from the error message, and
// LearnOverflow raises the ratio at once to what the upstream counted and
// lowers the model's window to the maximum it reported (a larger maximum
// raises nothing). Fitting the request again then gives a prompt that
// fits by the upstream's own figures, or a 400 when none can.
//
// # Cost
//
// Counts are cached by content: the key is a 64-bit hash/maphash of the raw
// message bytes (plus their length and the encoding), so an agent that
// re-sends its whole history pays tiktoken only for its new messages, and
// a re-sent oversized tool result is shortened once.
// maphash rather than sha256: it hashes at memory speed, which keeps a warm
// 100k-token history well under a millisecond; its seed is random per
// process, so clients cannot aim collisions, and a collision would only
// misjudge one count, never leak content. The cache is the gateway's LRU
// (internal/lru) bounded by Config.CacheBytes; it costs about 100 bytes a
// message, bookkeeping included, 21 KB for a 100k-token agent history
// (BenchmarkCacheMemory).
//
// tiktoken-go's byte-pair merge is quadratic in the length of a regex piece,
// and a piece can be as long as the input (a run of letters without spaces,
// of spaces, of punctuation, of Chinese without punctuation). Text is
// therefore split into pieces of at most maxChunk bytes before tiktoken sees
// it, which makes counting linear in the input for any input. Cuts are made
// where tiktoken's own pre-tokenizer would cut (for example before a space
// that follows a non-space, between a letter and a digit), where splitting
// changes nothing. Only a run of maxChunk bytes with no such place (which
// prose, code, JSON, base64 and Chinese with punctuation do not have) is
// cut hard: TestHardCutError measures 0 to 2 tokens more per cut, at most
// 3 % on runs of punctuation and under 1 % on other such runs.
//
// # Truncation
//
// Fit drops the oldest history first, in whole units: an assistant message
// with tool calls goes with all of its tool results, a tool result with its
// call. System and developer messages and the last user message are never
// dropped. When the prompt does not fit, a tool result longer than
// Config.ToolResultMaxTokens is first shortened in the middle with a marker
// that says how many tokens were left out. When even the messages that must
// stay do not fit, Fit returns a 400 context_length_exceeded *chat.Error
// before any upstream call.
//
// A Counter is safe for concurrent use.
package tokens
