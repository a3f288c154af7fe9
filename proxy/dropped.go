package proxy

import (
	"log/slog"
	"net/http"
	"strings"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/responses"
)

// droppedHeader names, on the response, what of the request the gateway
// accepted and did not send upstream: a comma-separated list of request
// parameters, each with the value that decided it after "=" where one
// did (tools[8].type=web_search, include[1]=file_search_call.results,
// prompt_cache_key).
const droppedHeader = "X-Phasegate-Dropped"

// reportDropped names what the request of door r lost on its way
// upstream: in the response's header, in the metrics, and in one log
// line.
func (h *Handler) reportDropped(w http.ResponseWriter, r *http.Request, door string, dropped []chat.Drop) {
	if len(dropped) == 0 {
		return
	}
	params := make([]string, len(dropped))
	for i, d := range dropped {
		params[i] = d.Param
		h.metrics.Dropped(door, d.Field)
	}
	list := strings.Join(params, ", ")
	w.Header().Set(droppedHeader, list)
	h.log.Info("request parts dropped: the upstream cannot use them", "request_id", r.Header.Get("X-Request-Id"), "door", door, "dropped", list)
}

// responsesTarget is what the Responses door's translation needs to know
// of provider p and of the gateway.
func (h *Handler) responsesTarget(p *Provider) responses.Target {
	return responses.Target{
		DeepSeek:     p.Name == thinkingProvider || p.Simulated,
		OpenAI:       p.Name == "openai" && !p.Simulated,
		RefuseHosted: h.cfg.HostedTools == HostedRefuse,
		Sealer:       h.sealer,
	}
}

// newSealer is the sealer of key, or of a key made now when key is
// empty: then only this process can open what it seals, which is logged
// once.
func newSealer(key Secret, log *slog.Logger) (*responses.Sealer, error) {
	if key == "" {
		log.Info("REASONING_KEY is not set: reasoning items are sealed with a key made at start, which only this process can open; set one REASONING_KEY on every replica")
		return responses.NewSealer(responses.NewKey())
	}
	raw, err := responses.ParseKey(key.Reveal())
	if err != nil {
		return nil, &FieldError{Field: "ReasoningKey", Problem: err.Error()}
	}
	return responses.NewSealer(raw)
}
