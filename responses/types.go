package responses

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
)

// Item types, as the wire spells them.
const (
	TypeMessage            = "message"
	TypeFunctionCall       = "function_call"
	TypeFunctionCallOutput = "function_call_output"
	TypeReasoning          = "reasoning"
	TypeItemReference      = "item_reference"
)

// Statuses of a response and of its items.
const (
	StatusCompleted  = "completed"
	StatusIncomplete = "incomplete"
	StatusFailed     = "failed"
	StatusInProgress = "in_progress"
)

// Item is one input or output item. Only the fields of its Type are set;
// Content, Output and Summary keep the raw JSON the client or the
// translator wrote.
type Item struct {
	Type             string          `json:"type"`
	ID               string          `json:"id,omitempty"`
	Status           string          `json:"status,omitempty"`
	Role             string          `json:"role,omitempty"`
	Content          json.RawMessage `json:"content,omitempty"`
	CallID           string          `json:"call_id,omitempty"`
	Name             string          `json:"name,omitempty"`
	Namespace        string          `json:"namespace,omitempty"`
	Arguments        *string         `json:"arguments,omitempty"`
	Output           json.RawMessage `json:"output,omitempty"`
	Summary          json.RawMessage `json:"summary,omitempty"`
	EncryptedContent *string         `json:"encrypted_content,omitempty"`
}

// Part is one content part of a message or reasoning item.
type Part struct {
	Type     string  `json:"type"`
	Text     *string `json:"text,omitempty"`
	ImageURL *string `json:"image_url,omitempty"`
	FileID   *string `json:"file_id,omitempty"`
	Detail   string  `json:"detail,omitempty"`
	Refusal  *string `json:"refusal,omitempty"`
}

// NewID returns a fresh id with prefix: "resp_", "msg_", "fc_", "rs_".
func NewID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Usage is the usage object of a response.
type Usage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens     int `json:"cached_tokens"`
		CacheWriteTokens int `json:"cache_write_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// chatUsage is the part of a chat completion's usage a response reports:
// OpenAI's details, and DeepSeek's cache hits where OpenAI's are absent.
type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
	PromptCacheHitTokens *int `json:"prompt_cache_hit_tokens"`
}

// UsageOf translates the usage object of a chat completion; nil when raw
// holds none.
func UsageOf(raw json.RawMessage) *Usage {
	var c chatUsage
	if len(raw) == 0 || json.Unmarshal(raw, &c) != nil || string(raw) == "null" {
		return nil
	}
	u := &Usage{InputTokens: c.PromptTokens, OutputTokens: c.CompletionTokens, TotalTokens: c.TotalTokens}
	if u.TotalTokens == 0 {
		u.TotalTokens = u.InputTokens + u.OutputTokens
	}
	switch {
	case c.PromptTokensDetails != nil:
		u.InputTokensDetails.CachedTokens = c.PromptTokensDetails.CachedTokens
	case c.PromptCacheHitTokens != nil:
		u.InputTokensDetails.CachedTokens = *c.PromptCacheHitTokens
	}
	if c.CompletionTokensDetails != nil {
		u.OutputTokensDetails.ReasoningTokens = c.CompletionTokensDetails.ReasoningTokens
	}
	return u
}
