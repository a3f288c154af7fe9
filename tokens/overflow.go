package tokens

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"github.com/phasegate/phasegate/chat"
)

// Overflow is what an upstream's context-length error says about a
// request it rejected, in the upstream's own tokens.
type Overflow struct {
	// Limit is the most tokens the upstream accepts: of the prompt and the
	// completion together (the model's maximum context length), or of the
	// prompt alone when Input is set.
	Limit int
	// Input says that Limit bounds the prompt alone, as OpenAI's "Input
	// tokens exceed the configured limit of N tokens" does.
	Input bool
	// Requested is the count the upstream compared with Limit: "you
	// requested N tokens", or "your messages resulted in N tokens" when
	// the message names no completion.
	Requested int
	// Prompt is the upstream's count of the prompt: the messages, plus the
	// functions when the message names them apart. 0 when the message
	// gives only a total.
	Prompt int
	// Completion is the completion part of Requested ("N in the
	// completion"); 0 when the message names none.
	Completion int
}

// maxFigure bounds the figures ParseOverflow accepts, far above any
// window, so that sums of them cannot overflow.
const maxFigure = 1 << 40

// The phrasings of context-length errors. A figure may group its
// thousands with commas. The requested total may be followed by its parts
// in parentheses:
//
//	DeepSeek, OpenAI: "This model's maximum context length is 131072 tokens. However, you requested 140012 tokens (135012 in the messages, 5000 in the completion). ..."
//	OpenAI, with tools: "... you requested 8213 tokens (6683 in the messages, 730 in the functions, and 800 in the completion). ..."
//	OpenAI, no max_tokens: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130500 tokens. ..."
//	OpenAI, newer models: "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in 300123 tokens. ..."
const figure = `(\d{1,3}(?:,\d{3})+|\d+)`

var (
	contextLimitRE = regexp.MustCompile(`(?i)\bmaximum context length is ` + figure + ` tokens\b`)
	inputLimitRE   = regexp.MustCompile(`(?i)\binput tokens exceed the configured limit of ` + figure + ` tokens\b`)
	requestedRE    = regexp.MustCompile(`(?i)\byou requested ` + figure + ` tokens\b(?: \(([^()]*)\))?`)
	resultedRE     = regexp.MustCompile(`(?i)\bmessages resulted in ` + figure + ` tokens\b`)
	// partRE reads one part of the requested total: "135012 in the
	// messages", "730 in the functions", "1000 for the completion".
	partRE = regexp.MustCompile(`(?i)(?:^|[\s,;])` + figure + ` (?:in|for) (?:the |your )?([a-z]+)`)
)

// ParseOverflow reads an upstream's error body, OpenAI-style
// ({"error":{"message":…,"type":…,"code":…}}), as a context-length error.
// It is one when the code is context_length_exceeded (OpenAI) or the type
// or code is invalid_request_error (DeepSeek sends that as both), and the
// message gives both the limit and the requested count in one of the
// phrasings of DeepSeek and OpenAI. Anything else, including the same
// figures under another code, is not: ok is false. Pure; never panics.
func ParseOverflow(body []byte) (Overflow, bool) {
	var e struct {
		Error struct {
			Message string          `json:"message"`
			Type    json.RawMessage `json:"type"`
			Code    json.RawMessage `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		return Overflow{}, false
	}
	if !isString(e.Error.Code, CodeContextLengthExceeded) &&
		!isString(e.Error.Code, chat.TypeInvalidRequest) && !isString(e.Error.Type, chat.TypeInvalidRequest) {
		return Overflow{}, false
	}
	return parseOverflowMessage(e.Error.Message)
}

// isString reports whether raw is the JSON string want.
func isString(raw json.RawMessage, want string) bool {
	var s string
	return json.Unmarshal(raw, &s) == nil && s == want
}

func parseOverflowMessage(msg string) (Overflow, bool) {
	var o Overflow
	var ok bool
	if m := contextLimitRE.FindStringSubmatch(msg); m != nil {
		o.Limit, ok = parseFigure(m[1])
	} else if m := inputLimitRE.FindStringSubmatch(msg); m != nil {
		o.Limit, ok = parseFigure(m[1])
		o.Input = true
	}
	if !ok || o.Limit == 0 {
		return Overflow{}, false
	}
	if m := requestedRE.FindStringSubmatch(msg); m != nil {
		if o.Requested, ok = parseFigure(m[1]); !ok {
			return Overflow{}, false
		}
		if o.Prompt, o.Completion, ok = parseParts(m[2]); !ok {
			return Overflow{}, false
		}
	} else if m := resultedRE.FindStringSubmatch(msg); m != nil {
		if o.Requested, ok = parseFigure(m[1]); !ok {
			return Overflow{}, false
		}
		o.Prompt = o.Requested
	}
	if o.Requested == 0 {
		return Overflow{}, false
	}
	return o, true
}

// parseParts reads the parts of a requested total, "135012 in the
// messages, 5000 in the completion": the completion apart, every other
// part as the prompt. No parts: 0, 0, true.
func parseParts(s string) (prompt, completion int, ok bool) {
	for _, m := range partRE.FindAllStringSubmatch(s, -1) {
		n, valid := parseFigure(m[1])
		if !valid {
			return 0, 0, false
		}
		if strings.EqualFold(m[2], "completion") {
			completion += n
		} else {
			prompt += n
		}
	}
	return prompt, completion, true
}

// parseFigure reads a count of tokens, with or without commas between its
// thousands.
func parseFigure(s string) (int, bool) {
	n, err := strconv.Atoi(strings.ReplaceAll(s, ",", ""))
	if err != nil || n < 0 || n > maxFigure {
		return 0, false
	}
	return n, true
}

// LearnOverflow learns from a context-length error of the upstream, read
// by ParseOverflow, so that fitting the same request again makes it fit by
// the upstream's own figures. model, counted and maxTokens are those of
// the rejected request: counted the PromptTokens of the Fit that was sent,
// maxTokens what was passed to Fit.
//
// It learns two things, both of which only make fits more careful:
//
//   - The ratio rises at once to the upstream's count of the prompt over
//     counted (at most 2), when that is above the learned ratio. The
//     upstream's count is o.Prompt when the message gives it, else
//     o.Requested less the completion: o.Completion when given, else
//     maxTokens, since DeepSeek and OpenAI count the request's max_tokens
//     as the completion and nothing when it is absent.
//   - A limit below the configured window lowers the model's window
//     (o.Input unset) or caps its prompts (o.Input set). A larger one is
//     ignored: windows are never raised.
//
// What it learns lasts for the life of the Counter, for every name that
// shares the model's Config.Models entry. It is safe for concurrent use.
//
// The caller, having had such an error before any byte reached its
// client, fits the original request again and retries once when the new
// Fit's PromptTokens is below counted; when Fit now fails, its error is the
// answer, and when nothing could be cut, the upstream's own error is:
//
//	if o, ok := tokens.ParseOverflow(body); ok {
//		c.LearnOverflow(model, f.PromptTokens, maxTokens, o)
//		g, err := c.Fit(model, msgs, tools, maxTokens, capTokens)
//		// err != nil: answer err; g.PromptTokens < f.PromptTokens: send g
//	}
func (c *Counter) LearnOverflow(model string, counted, maxTokens int, o Overflow) {
	if counted <= 0 {
		return
	}
	m := c.models.resolve(model)
	l := c.learnedOf(m, model, true)
	if l == nil {
		return
	}
	prompt := o.Prompt
	if prompt <= 0 {
		completion := o.Completion
		if completion <= 0 {
			completion = max(maxTokens, 0)
		}
		prompt = o.Requested - completion
	}
	if prompt > 0 {
		x := min(float64(prompt)/float64(counted), maxRatio)
		l.updateRatio(func(cur float64) float64 { return max(cur, x) })
	}
	if o.Input {
		lower(&l.input, o.Limit, m.limits.ContextWindow)
	} else {
		lower(&l.window, o.Limit, m.limits.ContextWindow)
	}
}
