package main

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/phasegate/phasegate/protocol"
)

// guardInForce is the guard as a request meets it: the mode and profile
// where no rule says otherwise, then the rules of the config file in the
// order they are tried (a project's mode first, then a model's).
type guardInForce struct {
	on            bool // TWO_STAGE_ENABLED
	mode          protocol.Mode
	profile       protocol.Profile
	projectModes  []string // "project=mode", by project name
	modelModes    []string // "pattern=mode", first match wins
	modelProfiles []string // "pattern=profile", first match wins
}

// effectiveGuard reads the guard in force from o, the defaults spelt out.
func effectiveGuard(o options) guardInForce {
	g := guardInForce{on: o.TwoStage, mode: o.Proxy.GuardMode, profile: o.Proxy.GuardProfile}
	if g.mode == "" {
		g.mode = protocol.ModeEnforce
	}
	if g.profile == "" {
		g.profile = protocol.ProfileStrict
	}
	for project, mode := range o.Proxy.GuardProjectModes {
		g.projectModes = append(g.projectModes, project+"="+string(mode))
	}
	slices.Sort(g.projectModes)
	for _, r := range o.Proxy.GuardModes {
		g.modelModes = append(g.modelModes, r.Pattern+"="+string(r.Mode))
	}
	for _, r := range o.Proxy.GuardProfiles {
		g.modelProfiles = append(g.modelProfiles, r.Pattern+"="+string(r.Profile))
	}
	return g
}

// log writes the guard in force as one line at start.
func (g guardInForce) log(log *slog.Logger) {
	log.Info("guard in force", "two_stage", g.on, "guard_mode", string(g.mode), "guard_profile", string(g.profile),
		"project_modes", orNone(g.projectModes), "model_modes", orNone(g.modelModes), "model_profiles", orNone(g.modelProfiles))
}

// text is the guard in force for a person to read, one rule a line, each
// line indented by indent.
func (g guardInForce) text(indent string) string {
	var b strings.Builder
	line := func(format string, a ...any) { fmt.Fprintf(&b, indent+format+"\n", a...) }
	if !g.on {
		line("TWO_STAGE_ENABLED=false: no request is guarded")
	}
	line("guard_mode=%s (a request no rule below names)", g.mode)
	line("guard_profile=%s (a model no rule below names)", g.profile)
	line("per project, mode: %s", strings.Join(orNone(g.projectModes), ", "))
	line("per model, mode: %s", strings.Join(orNone(g.modelModes), ", "))
	line("per model, profile: %s", strings.Join(orNone(g.modelProfiles), ", "))
	return b.String()
}

// orNone is rules, or ["none"] when there are none: an empty list reads
// as nothing configured rather than as a missing field.
func orNone(rules []string) []string {
	if len(rules) == 0 {
		return []string{"none"}
	}
	return rules
}
