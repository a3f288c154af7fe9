package proxy

import (
	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/tokens"
)

// tokenFit is the protocol.Tokens of one request: the gateway's counter,
// with the prompt cap the request asked for.
type tokenFit struct {
	c         *tokens.Counter
	capTokens int
}

// fit fits req in place and returns what fitting did. A request whose
// size shows that it fits is not counted (tokens.Counter.FitBounded).
func (t *tokenFit) fit(req *chat.Request) (tokens.Fit, error) {
	f, err := t.c.FitBounded(req.Model, req.Messages, req.Tools, req.MaxTokens, t.capTokens)
	if err != nil {
		return f, err
	}
	if f.DroppedMessages > 0 || f.Shortened > 0 {
		req.SetMessages(f.Messages)
	}
	return f, nil
}

func (t *tokenFit) Fit(req *chat.Request) (protocol.Prompt, error) {
	f, err := t.fit(req)
	return protocol.Prompt{Counted: f.PromptTokens, Estimate: f.Estimate}, err
}

// Learn reads a context-length error (DeepSeek's and OpenAI's phrasings)
// and learns the model's real limits and ratio from its figures.
func (t *tokenFit) Learn(req *chat.Request, p protocol.Prompt, body []byte) bool {
	o, ok := tokens.ParseOverflow(body)
	if !ok {
		return false
	}
	t.c.LearnOverflow(req.Model, p.Counted, req.MaxTokens, o)
	return true
}

func (t *tokenFit) Prompt(req *chat.Request) protocol.Prompt {
	n, est := t.c.CountPrompt(req.Model, req.Messages, req.Tools)
	return protocol.Prompt{Counted: n, Estimate: est}
}

func (t *tokenFit) Count(model, text string) int { return t.c.Count(model, text) }
