// Package protocol holds the strategies that serve one chat completion
// request: Standard, a lossless pass-through, and TwoStage, the tool-loop
// guard. A strategy drives one or more upstream calls through Upstream and
// yields the Events the proxy writes to the client.
package protocol

import (
	"context"
	"iter"
	"net/http"
	"time"

	"github.com/phasegate/phasegate/chat"
)

// Upstream sends one chat completion request to the model provider.
// The proxy implements it; a test implements it with a script.
type Upstream interface {
	// Send sends req. A non-2xx answer is returned as *UpstreamError. For a
	// streaming request the returned Response is open: the caller must call
	// Close once done with it, which also stops the upstream generating.
	Send(ctx context.Context, req *chat.Request) (*Response, error)
}

// Response is an upstream answer with status 2xx.
type Response struct {
	Status int
	Header http.Header
	// Body is the whole body of a non-streaming response.
	Body []byte
	// Events yields the data of each SSE event of a streaming response, in
	// order, including the final "[DONE]". It ends with a nil error at the
	// end of the body (whether or not [DONE] came) and with a non-nil one
	// when reading failed. It may be ranged over once.
	//
	// Each yielded slice belongs to the receiver: the Response never reads
	// or writes it again, so the receiver may keep it, and strings made
	// from it without a copy, past the next event (the guard's reader
	// keeps the chunks that said text, the leak scan the text it holds
	// back, the session the opening chunk). No receiver writes to it. An
	// implementation yields new memory for each event; the proxy's
	// transport yields the bytes of the string its SSE reader made for the
	// event's data, without a copy.
	Events iter.Seq2[[]byte, error]
	// Close releases the response; nil for a non-streaming one.
	Close func()
}

// Kind is what an Event carries.
type Kind string

const (
	// KindStart opens the response: Header holds the headers to pass on.
	// It comes first, once, and writes nothing by itself: the headers are
	// committed with the first chunk, so a failure before that still gets
	// a real status.
	KindStart Kind = "start"
	// KindChunk carries Data, one chat.completion.chunk to write as it is.
	KindChunk Kind = "chunk"
	// KindDone is the "[DONE]" event.
	KindDone Kind = "done"
	// KindResponse carries a whole non-streaming answer: Status, Header
	// and Data, the body.
	KindResponse Kind = "response"
)

// Event is one thing a strategy yields to the proxy.
type Event struct {
	Kind Kind
	Data []byte
	// Ext, on a KindChunk, is a JSON value the proxy adds to Data as the
	// top-level field ExtensionKey when it writes the chunk.
	Ext []byte
	// Opening, on a KindChunk, is that Data is an answer's opening chunk:
	// the role, nothing said.
	Opening bool
	// Again, on a KindChunk, is that Data comes from an upstream answer
	// asked again after the client got the opening chunk of an earlier
	// one: its id, created time and model are to be the earlier one's.
	Again  bool
	Status int
	Header http.Header
}

// Exchange is one client request as a strategy sees it. It is owned by
// one request and not safe for concurrent use.
type Exchange struct {
	Request   *chat.Request
	RequestID string
	ProjectID string
	Upstream  Upstream
	Limits    Limits
	// History is the client's history as it came, before truncation fit
	// Request.Messages to the context window: the turn ledger derives from
	// it, so a call dropped to save tokens is still known as executed. Nil
	// means Request.Messages.
	History []chat.Message
	// Prompt is the count of Request's prompt as the proxy fitted it.
	Prompt Prompt
	// Tokens fits the upstream requests a strategy builds and counts what
	// an answer generated; nil sends requests as they are and estimates
	// usage at four bytes a token.
	Tokens Tokens
	// Meter is told the usage and the failures of every upstream call;
	// nil tells nobody.
	Meter Meter
	// Retry bounds the new attempts of an upstream call that failed in a
	// way the failure table calls safe to retry, before any byte reached
	// the client; the zero value retries nothing.
	Retry Retry
	// Fallback, when set, takes over once the retries of a failure safe
	// to retry are spent, while nothing reached the client: the request
	// is sent again with the fallback's model (fitted to its window) to
	// its upstream, with retries of its own. Nil has none.
	Fallback *Fallback
	// FirstByteBy, when set, is when the client must have had its first
	// byte (the request's start plus UPSTREAM_FIRST_BYTE_TIMEOUT): one
	// deadline for every attempt, retry and fallback before it, so a
	// retry or a fallback starts only while time remains, and a dead
	// upstream holds the client for one first-byte bound, not one per
	// attempt. The Upstream bounds each call's wait by it too.
	FirstByteBy time.Time
	// Opened is that the client has an opening chunk already, from a
	// strategy that failed after it (the guard, taken over by the standard
	// protocol): the strategy writes no opening of its own and marks its
	// chunks Again.
	Opened bool
}

// Fallback is the model a request falls back to, and the upstream that
// serves it.
type Fallback struct {
	Model    string
	Upstream Upstream
}

// Retry is the retry policy of upstream calls: up to Attempts new calls
// after a failure Classify marks RetrySafe (a connect failure, a reset or
// first-byte timeout before the response, 429, 5xx), while nothing reached
// the client. The wait before attempt n is the upstream's Retry-After when
// it sent one, else a random duration up to Base·2ⁿ (full jitter), and
// never more than MaxWait: a Retry-After longer than MaxWait is not waited
// for, the failure stands.
type Retry struct {
	Attempts int
	Base     time.Duration
	MaxWait  time.Duration
}

// Prompt is the gateway's count of one upstream request's prompt. The
// zero Prompt is a prompt not counted: its size showed that it fits, and
// Tokens.Prompt counts it where a count is needed after all.
type Prompt struct {
	// Counted is the tokenizer's count, framing included; 0 when the
	// prompt was not counted.
	Counted int
	// Estimate is Counted corrected by what the gateway learned of the
	// model: the prompt_tokens the upstream is expected to report.
	Estimate int
}

// Tokens fits requests to their model's context window and counts text.
// The proxy implements it with tokens.Counter.
type Tokens interface {
	// Fit makes req fit its model's context window, in place, and returns
	// its count, or the zero Prompt when it did not need to count it. An
	// error is the client's (a *chat.Error).
	Fit(req *chat.Request) (Prompt, error)
	// Prompt counts req's prompt, as Fit would.
	Prompt(req *chat.Request) Prompt
	// Learn reads an upstream's context-length error (its body) on req,
	// whose count was p, and learns the model's real limits from it. It
	// reports whether fitting req again is worth a new call.
	Learn(req *chat.Request, p Prompt, body []byte) bool
	// Count returns the tokens of text generated by model.
	Count(model, text string) int
}

// Usage is the usage of one upstream call.
type Usage struct {
	// Prompt is the gateway's count of the call's prompt.
	Prompt Prompt
	// PromptTokens and CompletionTokens are what the upstream reported,
	// or the gateway's estimate when Estimated.
	PromptTokens, CompletionTokens int
	// CacheHitTokens is the part of PromptTokens the upstream read from
	// its cache (DeepSeek's prompt_cache_hit_tokens, OpenAI's
	// prompt_tokens_details.cached_tokens); 0 when it reported none.
	CacheHitTokens int
	Estimated      bool
}

// Meter is told what each upstream call of a request cost and how it
// failed. It is owned by one request.
type Meter interface {
	// Usage is called once per upstream call that reported usage (its last
	// usage object) or whose usage was estimated.
	Usage(u Usage)
	// Failed is called once per upstream call that failed; Classify tells
	// the kind.
	Failed(err error)
}

// RefusalMeter is a Meter that is also told of each tool call the guard
// did not forward, by its verdict ("dropped" for a call of a forced final
// answer).
type RefusalMeter interface {
	Refused(verdict string)
}

// Strategy serves a request. Run yields the events to write, in order;
// an error ends the sequence. A consumer that stops ranging early makes Run
// release every upstream response it holds.
type Strategy interface {
	Name() string
	Run(ctx context.Context, x *Exchange) iter.Seq2[Event, error]
}

// Limits are the budgets of one request. A zero field means the
// strategy's configured value; the proxy only ever lowers them (from the
// request's headers).
type Limits struct {
	MaxPhaseCycles       int
	MaxDuplicateAttempts int
	// Plan selects plan mode: only the configured read-only tools are
	// shown to the model and may be called.
	Plan bool
	// Envelope is the orchestrator envelope rule of the request's answers.
	Envelope EnvelopeMode
	// Profile is the guard's rules for this request; "" is the configured
	// profile. The proxy only ever tightens it.
	Profile Profile
	// RulesNotice turns the rules notice on for this request, whatever
	// the configuration says (it cannot turn it off).
	RulesNotice bool
	// Spent, when set, is a budget beyond the turn's that is spent (the
	// request's session's): the guard makes the request its forced final
	// answer at once, as for a spent cycle budget.
	Spent *Spent
}

// Spent is a spent budget and what the guard says of it.
type Spent struct {
	// Budget names it, as the budget label of the budget exhaustions
	// spells it.
	Budget string
	// Notice is the final instruction the model gets; Shown the line the
	// client is shown ("" shows none).
	Notice, Shown string
}
