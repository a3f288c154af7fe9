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
				fg.modes = append(fg.modes, proxy.ModeRule{Pattern: e.name, Mode: e.value})
			}
		case k.Value == "modes":
			bad(v.Line, "guard: modes must be a mapping of model names (or prefixes ending in *) to enforce or observe")
		case k.Value == "projects" && v.Kind == yaml.MappingNode:
			fg.projects = map[string]protocol.Mode{}
			for _, e := range readModes("projects", v, bad) {
				fg.projects[e.name] = e.value
			}
		case k.Value == "projects":
			bad(v.Line, "guard: projects must be a mapping of project names to enforce or observe")
		default:
			bad(k.Line, "guard: unknown key %s%s", k.Value, didYouMean(k.Value, guardKeys, ""))
		}
	}
	return fg
}

// named is one entry of a mapping of names to values, such as guard:
// modes or envelopes: models.
type named[T any] struct {
	name  string
	value T
}

// readNamed reads a mapping of names to values, in the order written. A
// name given twice, or a value parse refuses, is reported at its line
// under section ("guard: modes") with what the value must be, and left
// out.
func readNamed[T any](section, must string, n *yaml.Node, bad func(int, string, ...any), parse func(name, v *yaml.Node) (T, bool)) []named[T] {
	var out []named[T]
	seen := map[string]int{}
	for j := 0; j+1 < len(n.Content); j += 2 {
		name, v := n.Content[j], n.Content[j+1]
		if first, dup := seen[name.Value]; dup {
			bad(name.Line, "%s: %s is set twice (first on line %d)", section, name.Value, first)
			continue
		}
		seen[name.Value] = name.Line
		x, ok := parse(name, v)
		if !ok {
			bad(v.Line, "%s: %s: must be %s", section, name.Value, must)
			continue
		}
		out = append(out, named[T]{name: name.Value, value: x})
	}
	return out
}

// readModes reads a mapping of names to guard modes (guard: modes, guard:
// projects).
func readModes(key string, n *yaml.Node, bad func(int, string, ...any)) []named[protocol.Mode] {
	return readNamed("guard: "+key, "enforce or observe", n, bad, func(name, v *yaml.Node) (protocol.Mode, bool) {
		m, err := protocol.ParseMode(v.Value)
		return m, err == nil && v.Kind == yaml.ScalarNode && name.Value != ""
	})
}

// readProfileRules reads guard: models, in the order written.
func readProfileRules(n *yaml.Node, bad func(int, string, ...any)) []proxy.ProfileRule {
	var out []proxy.ProfileRule
	for _, e := range readNamed("guard: models", "strict or agent", n, bad, func(_, v *yaml.Node) (protocol.Profile, bool) {
		p, err := protocol.ParseProfile(v.Value)
		return p, err == nil && v.Kind == yaml.ScalarNode
	}) {
		out = append(out, proxy.ProfileRule{Pattern: e.name, Profile: e.value})
	}
	return out
}
