package tokens

import (
	"fmt"
	"math"
	"net/http"

	"github.com/phasegate/phasegate/chat"
)

// CodeContextLengthExceeded is the code of the error Fit returns when a
// request cannot be made to fit, as OpenAI spells it.
const CodeContextLengthExceeded = "context_length_exceeded"

// Fit is the outcome of fitting a request.
type Fit struct {
	// Messages is the history to send upstream: the input slice itself
	// when nothing was dropped or shortened, else a new slice whose
	// messages keep their raw form, but for shortened tool results.
	Messages []chat.Message
	// PromptTokens is the tiktoken count of Messages and the tools, with
	// the message framing: what Observe wants as counted.
	PromptTokens int
	// Estimate is PromptTokens corrected by the model's learned ratio: the
	// prompt_tokens the upstream is expected to report.
	Estimate int
	// DroppedMessages is the number of input messages left out.
	DroppedMessages int
	// DroppedTokens is the input's PromptTokens minus the result's: what
	// dropping and shortening saved, in tiktoken tokens.
	DroppedTokens int
	// Shortened is the number of tool results of Messages shortened in
	// the middle.
	Shortened int
	// Uncounted reports that FitBounded kept the request whole without
	// counting it: PromptTokens and Estimate are 0 (CountPrompt counts it).
	Uncounted bool
}

// Fit makes a chat request fit model's context window. maxTokens is the
// request's max_completion_tokens or max_tokens (0: absent), reserved for
// the completion instead of the model's CompletionReserve; capTokens, when
// positive, caps the prompt below what the window leaves. The prompt fits
// when its tiktoken count, times the learned ratio, plus the safety
// margin, is within the window less the reserve, and within the cap. What
// LearnOverflow learned applies too: the window is the smaller of the
// configured one and the one the upstream reported, and a limit of the
// prompt alone that the upstream reported caps the prompt.
//
// When it fits and HistoryWindow is not exceeded, Fit returns msgs itself
// and allocates nothing once the messages are cached. Otherwise it
// shortens oversized tool results and drops the oldest units, as the
// package documentation describes. When the system and developer messages,
// the last user message and the tools do not fit on their own, the error
// is a *chat.Error: 400, invalid_request_error, context_length_exceeded.
func (c *Counter) Fit(model string, msgs []chat.Message, tools []chat.Tool, maxTokens, capTokens int) (Fit, error) {
	m := c.models.resolve(model)
	e := m.enc
	l := c.learnedOf(m, model, false)
	limits, input := l.limits(m.limits)
	r := l.loadRatio()
	b, err := newBudget(limits, input, r, maxTokens, capTokens)
	if err != nil {
		return Fit{}, err
	}
	fixed := c.fixedTokens(e, tools)
	total, nonSystem := fixed, 0
	for i := range msgs {
		total += c.messageTokens(e, &msgs[i])
		if !systemRole(msgs[i].Role) {
			nonSystem++
		}
	}
	if total <= b.raw && (c.history == 0 || nonSystem <= c.history) {
		return Fit{Messages: msgs, PromptTokens: total, Estimate: estimate(total, r)}, nil
	}
	f, err := c.truncate(e, b, msgs, fixed)
	if err != nil {
		return Fit{}, err
	}
	f.Estimate = estimate(f.PromptTokens, r)
	f.DroppedTokens = total - f.PromptTokens
	return f, nil
}

// budget is the room for the prompt of one request.
type budget struct {
	limits  Limits
	reserve int
	avail   int     // model tokens for the prompt
	factor  float64 // ratio × (1 + margin): model tokens per tiktoken token
	raw     int     // tiktoken tokens for the prompt: avail / factor
	bound   bound   // what set avail
}

// bound says what limits the prompt of a request.
type bound int

const (
	boundWindow bound = iota // the context window less the reserve
	boundInput               // the upstream's limit of the prompt alone
	boundCap                 // the request's X-Phasegate-Max-Prompt-Tokens
)

// newBudget returns the room for a prompt under limits l. input, when
// positive, is the upstream's limit of the prompt alone (LearnOverflow);
// the other arguments are Fit's.
func newBudget(l Limits, input int, ratio float64, maxTokens, capTokens int) (budget, error) {
	b := budget{limits: l, reserve: maxTokens}
	if b.reserve <= 0 {
		b.reserve = min(l.CompletionReserve, l.ContextWindow/2)
	}
	b.avail = l.ContextWindow - b.reserve
	if input > 0 && input < b.avail {
		b.avail, b.bound = input, boundInput
	}
	if capTokens > 0 && capTokens < b.avail {
		b.avail, b.bound = capTokens, boundCap
	}
	if b.avail <= 0 {
		return b, tooLong("This model's maximum context length is %d tokens, and %d of them are requested for the completion: no room is left for the messages. Lower max_tokens.", l.ContextWindow, b.reserve)
	}
	b.factor = ratio * (1 + l.SafetyMargin)
	b.raw = int(float64(b.avail) / b.factor)
	return b, nil
}

// modelTokens converts a tiktoken count to the model tokens it is judged
// as, margin included.
func (b budget) modelTokens(n int) int {
	return int(math.Ceil(float64(n) * b.factor))
}

func estimate(n int, ratio float64) int {
	return int(math.Round(float64(n) * ratio))
}

func tooLong(format string, args ...any) *chat.Error {
	return &chat.Error{
		Status:  http.StatusBadRequest,
		Type:    chat.TypeInvalidRequest,
		Code:    CodeContextLengthExceeded,
		Param:   "messages",
		Message: fmt.Sprintf(format, args...),
	}
}

func systemRole(role string) bool {
	return role == chat.RoleSystem || role == chat.RoleDeveloper
}

// truncate fits a request that does not fit as it is. fixed is the count
// of the tools and the reply priming.
func (c *Counter) truncate(e *encoding, b budget, msgs []chat.Message, fixed int) (Fit, error) {
	t := c.newTrim(e, msgs, fixed)
	if minimum := t.minimum(fixed); minimum > b.raw {
		return Fit{}, tooLongError(b, minimum)
	}
	if c.history > 0 {
		for u := 0; u < len(msgs) && t.kept > c.history; u++ {
			t.dropUnit(u)
		}
	}
	if t.total > b.raw && c.toolMax > 0 {
		if err := c.shortenResults(e, t); err != nil {
			return Fit{}, err
		}
	}
	for u := 0; u < len(msgs) && t.total > b.raw; u++ {
		t.dropUnit(u)
	}
	return t.fit(), nil
}

// trim is the state of one truncation: each message's count, whether it
// must stay, whether it is kept, and the units messages are dropped in.
type trim struct {
	msgs   []chat.Message
	counts []int
	pinned []bool
	keep   []bool
	// A unit is a message, or an assistant message with tool calls and
	// the tool results answering them; unit[i] is the index of its first
	// message, next[i] the next message of the same unit or -1.
	unit, next []int
	// total is the count of what is kept, fixed included; kept the number
	// of kept messages that are not system messages.
	total, kept int
	shortened   map[int]chat.Message
}

// newTrim counts every message and finds what must stay (system messages
// and the last user message) and the units; everything is kept.
func (c *Counter) newTrim(e *encoding, msgs []chat.Message, fixed int) *trim {
	n := len(msgs)
	t := &trim{msgs: msgs, counts: make([]int, n), pinned: make([]bool, n), keep: make([]bool, n),
		unit: make([]int, n), next: make([]int, n), total: fixed}
	lastUser := -1
	last := make([]int, n)
	calls := map[string]int{}
	for i := range msgs {
		m := &msgs[i]
		t.counts[i] = c.messageTokens(e, m)
		t.pinned[i] = systemRole(m.Role)
		t.keep[i] = true
		t.total += t.counts[i]
		if !systemRole(m.Role) {
			t.kept++
		}
		t.unit[i], t.next[i], last[i] = i, -1, i
		switch m.Role {
		case chat.RoleUser:
			lastUser = i
		case chat.RoleAssistant:
			for _, tc := range m.ToolCalls {
				calls[tc.ID] = i
			}
		case chat.RoleTool:
			if u, ok := calls[m.ToolCallID]; ok {
				t.unit[i] = u
				t.next[last[u]] = i
				last[u] = i
			}
		}
	}
	if lastUser >= 0 {
		t.pinned[lastUser] = true
	}
	return t
}

// minimum is the count of what must stay.
func (t *trim) minimum(fixed int) int {
	minimum := fixed
	for i, p := range t.pinned {
		if p {
			minimum += t.counts[i]
		}
	}
	return minimum
}

// dropUnit drops the unit that starts at u, when one does and it may go.
func (t *trim) dropUnit(u int) {
	if t.unit[u] != u || !t.keep[u] || t.pinned[u] {
		return
	}
	for j := u; j >= 0; j = t.next[j] {
		t.keep[j] = false
		t.total -= t.counts[j]
		t.kept--
	}
}

// shortenResults shortens the kept tool results over the tool result
// bound, oldest first.
func (c *Counter) shortenResults(e *encoding, t *trim) error {
	for i := range t.msgs {
		if !t.keep[i] || t.msgs[i].Role != chat.RoleTool || t.counts[i] <= c.toolMax {
			continue
		}
		s, sn, ok, err := c.shorten(e, t.msgs[i], t.counts[i])
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if t.shortened == nil {
			t.shortened = map[int]chat.Message{}
		}
		t.shortened[i] = s
		t.total -= t.counts[i] - sn
		t.counts[i] = sn
	}
	return nil
}

// fit is the request's messages as the truncation left them.
func (t *trim) fit() Fit {
	f := Fit{Messages: make([]chat.Message, 0, len(t.msgs)), PromptTokens: t.total}
	for i := range t.msgs {
		if !t.keep[i] {
			continue
		}
		if s, ok := t.shortened[i]; ok {
			f.Messages = append(f.Messages, s)
			f.Shortened++
			continue
		}
		f.Messages = append(f.Messages, t.msgs[i])
	}
	f.DroppedMessages = len(t.msgs) - len(f.Messages)
	return f
}

// tooLongError says why a request cannot fit; minimum is the count of what
// must stay.
func tooLongError(b budget, minimum int) *chat.Error {
	var limit string
	switch b.bound {
	case boundWindow:
		limit = fmt.Sprintf("This model's maximum context length is %d tokens, %d of them reserved for the completion", b.limits.ContextWindow, b.reserve)
	case boundInput:
		limit = fmt.Sprintf("This model accepts at most %d input tokens", b.avail)
	case boundCap:
		limit = fmt.Sprintf("This request's prompt is limited to %d tokens", b.avail)
	}
	return tooLong("%s. The system and developer messages, the last user message and the tool definitions alone need about %d tokens (estimated with a %.0f%% safety margin), so dropping older messages cannot make the request fit. Shorten them, or lower max_tokens.",
		limit, b.modelTokens(minimum), b.limits.SafetyMargin*100)
}
