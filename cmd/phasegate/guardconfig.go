package main

import (
	"gopkg.in/yaml.v3"

	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
)

// fileGuard is the guard section of the config file.
type fileGuard struct {
	// profiles are the guard profile per model, in the order written.
	profiles []proxy.ProfileRule
	// modes are the guard mode per model, in the order written.
	modes []proxy.ModeRule
	// projects are the guard mode per project.
	projects map[string]protocol.Mode
}

// guardKeys are the keys of the guard section.
var guardKeys = []string{"models", "modes", "projects"}

// readGuard reads guard: a mapping with models (model name or prefix* to
// a guard profile, in the order written), modes (model name or prefix* to
// a guard mode) and projects (project to a guard mode).
func readGuard(n *yaml.Node, bad func(int, string, ...any)) fileGuard {
	var fg fileGuard
	if n.Kind != yaml.MappingNode {
		bad(n.Line, "guard must be a mapping with keys models, modes, projects")
		return fg
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.Value == "models" && v.Kind == yaml.MappingNode:
			fg.profiles = readProfileRules(v, bad)
		case k.Value == "models":
			bad(v.Line, "guard: models must be a mapping of model names (or prefixes ending in *) to strict or agent")
		case k.Value == "modes" && v.Kind == yaml.MappingNode:
			for _, e := range readModes("modes", v, bad) {
				fg.modes = append(fg.modes, proxy.ModeRule{Pattern: e.name, Mode: e.mode})
			}
		case k.Value == "modes":
			bad(v.Line, "guard: modes must be a mapping of model names (or prefixes ending in *) to enforce or observe")
		case k.Value == "projects" && v.Kind == yaml.MappingNode:
			fg.projects = map[string]protocol.Mode{}
			for _, e := range readModes("projects", v, bad) {
				fg.projects[e.name] = e.mode
			}
		case k.Value == "projects":
			bad(v.Line, "guard: projects must be a mapping of project names to enforce or observe")
		default:
			bad(k.Line, "guard: unknown key %s%s", k.Value, didYouMean(k.Value, guardKeys, ""))
		}
	}
	return fg
}

// namedMode is one entry of guard: modes or guard: projects.
type namedMode struct {
	name string
	mode protocol.Mode
}

// readModes reads a mapping of names to guard modes, in the order written.
func readModes(key string, n *yaml.Node, bad func(int, string, ...any)) []namedMode {
	var out []namedMode
	seen := map[string]int{}
	for j := 0; j+1 < len(n.Content); j += 2 {
		name, v := n.Content[j], n.Content[j+1]
		if first, dup := seen[name.Value]; dup {
			bad(name.Line, "guard: %s: %s is set twice (first on line %d)", key, name.Value, first)
			continue
		}
		seen[name.Value] = name.Line
		m, err := protocol.ParseMode(v.Value)
		if err != nil || v.Kind != yaml.ScalarNode || name.Value == "" {
			bad(v.Line, "guard: %s: %q: must be enforce or observe", key, name.Value)
			continue
		}
		out = append(out, namedMode{name: name.Value, mode: m})
	}
	return out
}

// readProfileRules reads guard: models, in the order written.
func readProfileRules(n *yaml.Node, bad func(int, string, ...any)) []proxy.ProfileRule {
	var out []proxy.ProfileRule
	seen := map[string]int{}
	for j := 0; j+1 < len(n.Content); j += 2 {
		name, v := n.Content[j], n.Content[j+1]
		if first, dup := seen[name.Value]; dup {
			bad(name.Line, "guard: models: %s is set twice (first on line %d)", name.Value, first)
			continue
		}
		seen[name.Value] = name.Line
		p, err := protocol.ParseProfile(v.Value)
		if err != nil || v.Kind != yaml.ScalarNode {
			bad(v.Line, "guard: models: %s: must be strict or agent", name.Value)
			continue
		}
		out = append(out, proxy.ProfileRule{Pattern: name.Value, Profile: p})
	}
	return out
}
