package proxy

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/deepseek"
	"github.com/phasegate/phasegate/internal/jsonscan"
	"github.com/phasegate/phasegate/metrics"
)

// thinkingProvider is the provider whose thinking mode the gateway repairs
// requests for.
const thinkingProvider = "deepseek"

// repairThinking restores what DeepSeek's thinking mode needs and clients
// drop, and says so in the response headers. It reports whether the
// request goes to thinking mode, so its answer's reasoning is remembered.
// A store that fails degrades to what a gateway that never saw the
// reasoning does: it is emptied, and the failure logged and counted.
func (h *Handler) repairThinking(ctx context.Context, w http.ResponseWriter, log *slog.Logger, provider *Provider, req *chat.Request) bool {
	if h.thinking == nil || provider.Name != thinkingProvider || deepseek.ThinkingDisabled(req) {
		return false
	}
	found, err := h.thinking.Recall(ctx, deepseek.ToolCallsLacking(req))
	if err != nil {
		h.metrics.StoreFailed(metrics.StoreReasoning)
		log.Warn("shared store failed; reasoning of earlier tool calls emptied", "error", err)
	}
	rep, err := deepseek.RepairThinking(req, recalled(found))
	if err != nil {
		// A message that does not re-encode is sent as it came: the
		// upstream's own answer is the clearer error.
		log.Warn("thinking-mode repair failed; request sent as it came", "error", err)
		return true
	}
	if rep.Restored+rep.Emptied > 0 {
		w.Header().Set("X-Phasegate-Reasoning-Restored", strconv.Itoa(rep.Restored))
		w.Header().Set("X-Phasegate-Reasoning-Emptied", strconv.Itoa(rep.Emptied))
	}
	if rep.ToolChoice != "" {
		w.Header().Add("X-Phasegate-Warning", "tool_choice downgraded to auto: DeepSeek's thinking mode rejects a forced tool_choice")
	}
	if rep.Any() {
		h.metrics.Repaired(rep.Restored, rep.Emptied, rep.ToolChoice != "")
		log.Info("repaired for thinking mode", "reasoning_restored", rep.Restored, "reasoning_emptied", rep.Emptied, "tool_choice_downgraded", rep.ToolChoice != "")
	}
	return true
}

// reasoningRecorder remembers the reasoning_content of the tool calls a
// response holds, for the requests that come back without it (DeepSeek's
// thinking mode). Chunks are only kept (not copied, not decoded) until the
// response ends. A nil *reasoningRecorder records nothing. It is owned by
// one request.
type reasoningRecorder struct {
	ctx   context.Context
	mem   ReasoningStore
	fail  func(error)
	keep  [][]byte
	tools bool
}

// chunk records one chunk written to the client.
func (r *reasoningRecorder) chunk(data []byte) {
	if r == nil {
		return
	}
	r.keep = append(r.keep, data)
	r.tools = r.tools || jsonscan.FindKey(data, "tool_calls", 0) >= 0
}

// remember ends a streamed response: the reasoning of its tool calls, if
// it had any, is remembered.
func (r *reasoningRecorder) remember() {
	if r == nil {
		return
	}
	if r.tools {
		var a chat.Assembler
		for _, data := range r.keep {
			_ = a.Add(data) // the client got it as it was; nothing to learn from a bad chunk
		}
		if body, err := a.Completion(); err == nil {
			r.whole(body)
		}
	}
	r.keep, r.tools = nil, false
}

// whole remembers the reasoning of a chat.completion's tool calls.
func (r *reasoningRecorder) whole(body []byte) {
	if r == nil {
		return
	}
	var c struct {
		Choices []struct {
			Message struct {
				ReasoningContent string          `json:"reasoning_content"`
				ToolCalls        []chat.ToolCall `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(body, &c) != nil || len(c.Choices) == 0 {
		return
	}
	m := c.Choices[0].Message
	ids := make([]string, 0, len(m.ToolCalls))
	for _, tc := range m.ToolCalls {
		ids = append(ids, tc.ID)
	}
	if err := r.mem.Remember(r.ctx, ids, m.ReasoningContent); err != nil {
		r.fail(err)
	}
}
