package proxy

import (
	"net/http"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/protocol"
)

// reason is why a chat request is served by the protocol that serves it.
type reason string

const (
	// reasonRoute: the route names the protocol (/standard/v1 or
	// /two-stage/v1).
	reasonRoute reason = "route"
	// reasonDefault: /v1 serves the configured default, the standard
	// protocol (DEFAULT_PROTOCOL, or no guard on this gateway).
	reasonDefault reason = "default"
	// reasonJudged: /v1 guards by default, and the request has something
	// for the guard to judge (see needsGuard).
	reasonJudged reason = "judged"
	// reasonNothingToJudge: /v1 guards by default, but the request has
	// no tools and no envelope; it is passed through.
	reasonNothingToJudge reason = "nothing-to-judge"
	// reasonChoices: the request asks for n > 1 choices, and the guard
	// judges a single one.
	reasonChoices reason = "n>1"
	// reasonObserve: the guard's mode for the request is observe: it
	// judges the calls the client ran, and the request passes through.
	reasonObserve reason = "observe"
	// reasonFallback: the guard failed before the client saw a byte.
	reasonFallback reason = "fallback"
)

// decision is the protocol that serves one chat request, and why.
type decision struct {
	strategy protocol.Strategy
	reason   reason
	// judged: the request is the guard's to judge, whichever protocol
	// serves it: its per-request limits and envelope are read, and in
	// observe mode the guard observes it.
	judged bool
	// observe: the guard observes the request (mode observe) while the
	// standard protocol serves it.
	observe bool
}

// decide is the one place the protocol of a chat request is chosen, once
// the request is parsed: route is the protocol its route names
// (protocolDefault for /v1), project the request's project. A route to a
// guard this gateway does not have is answered before (twoStageOn).
func (h *Handler) decide(route string, hdr http.Header, req *chat.Request, project string) decision {
	d := decision{strategy: h.standard, reason: reasonRoute}
	switch {
	case route == ProtocolStandard:
		return d
	case route == protocolDefault && h.deflt != ProtocolTwoStage:
		d.reason = reasonDefault
		return d
	case route == protocolDefault && !h.needsGuard(hdr, req):
		d.reason = reasonNothingToJudge
		return d
	case route == protocolDefault:
		d.reason = reasonJudged
	}
	d.judged = true
	if _, ok := h.twoStage.(observer); ok && h.guardMode(project, req.Model) == protocol.ModeObserve {
		d.observe, d.reason = true, reasonObserve
	}
	if req.N > 1 {
		// The guard judges one choice; several cannot be served by it.
		d.reason = reasonChoices
		return d
	}
	if !d.observe {
		d.strategy = h.twoStage
	}
	return d
}

// fallback is the decision of a guarded request whose guard failed before
// the client saw a byte: the standard protocol serves it.
func (d decision) fallback(standard protocol.Strategy) decision {
	return decision{strategy: standard, reason: reasonFallback, judged: d.judged}
}

// setHeaders is the one writer of the headers that tell the client which
// protocol served its request and why it was not the one it asked for.
func (d decision) setHeaders(h http.Header) {
	h.Set("X-Phasegate-Protocol", d.strategy.Name())
	if d.observe {
		h.Set(ModeHeader, string(protocol.ModeObserve))
	}
	switch d.reason {
	case reasonChoices:
		h.Set("X-Phasegate-Warning", "n > 1 is served by the standard protocol: the guard judges a single choice")
	case reasonFallback:
		h.Set("X-Phasegate-Fallback", ProtocolTwoStage)
	}
}
