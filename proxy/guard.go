package proxy

import (
	"net/http"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/protocol/chat"
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
		return "", chat.InvalidRequest("", "header %s %s", ProfileHeader, err)
	}
	if !base.Tightens(p) {
		return "", chat.InvalidRequest("", "header %s: %s may only tighten this model's guard profile, %s (to %s)", ProfileHeader, p, base, protocol.ProfileStrict)
	}
	return p, nil
}
