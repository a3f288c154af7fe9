package proxy

import (
	"context"
	"net/http"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/protocol"
)

// ProfileHeader names the guard profile of one request; it may only
// tighten the configured one (agent to strict).
const ProfileHeader = "X-Phasegate-Guard-Profile"

// ProfileRule sets the guard profile of the models that match Pattern (a
// name, or a prefix ending in "*").
type ProfileRule struct {
	Pattern string
	Profile protocol.Profile
}

// guardProfile is the profile configured for model, tightened by the
// request's ProfileHeader.
func (h *Handler) guardProfile(hdr http.Header, model string) (protocol.Profile, error) {
	base := h.cfg.GuardProfile
	for _, r := range h.cfg.GuardProfiles {
		if match(r.Pattern, model) {
			base = r.Profile
			break
		}
	}
	if base == "" {
		base = protocol.ProfileStrict
	}
	v := hdr.Get(ProfileHeader)
	if v == "" {
		return base, nil
	}
	p, err := protocol.ParseProfile(v)
	if err != nil {
		return "", chat.InvalidRequest(ProfileHeader, "%s %s", ProfileHeader, err)
	}
	if !base.Tightens(p) {
		return "", chat.InvalidRequest(ProfileHeader, "%s: %s would loosen the guard of model %s, which runs under the %s profile; "+
			"a request may only tighten its guard: send %s, or leave the header out", ProfileHeader, p, model, base, protocol.ProfileStrict)
	}
	return p, nil
}

// ModeRule sets the guard mode of the models that match Pattern (a name,
// or a prefix ending in "*").
type ModeRule struct {
	Pattern string
	Mode    protocol.Mode
}

// guardMode is the mode of a request of project to model: the project's
// rule, else the first model rule that matches, else GuardMode.
func (h *Handler) guardMode(project, model string) protocol.Mode {
	if m, ok := h.cfg.GuardProjectModes[project]; ok && project != "" {
		return m
	}
	for _, r := range h.cfg.GuardModes {
		if match(r.Pattern, model) {
			return r.Mode
		}
	}
	if h.cfg.GuardMode == "" {
		return protocol.ModeEnforce
	}
	return h.cfg.GuardMode
}

// observer is a guard that can judge a request without acting on it.
type observer interface {
	Observe(ctx context.Context, x *protocol.Exchange) []protocol.Observed
}

// observe has the guard judge, in observe mode, the calls the client of
// a request executed; the standard protocol serves the request and its
// answer unchanged (see decide).
func (c *chatRequest) observe() {
	if o, ok := c.h.twoStage.(observer); ok {
		o.Observe(c.r.Context(), c.x)
	}
}

// ModeHeader tells the client the guard observed its request and forwarded
// it unchanged.
const ModeHeader = "X-Phasegate-Guard-Mode"
