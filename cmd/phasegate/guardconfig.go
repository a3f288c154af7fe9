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
}

// readGuard reads guard: a mapping with models (model name or prefix* to
// a guard profile, in the order written).
func readGuard(n *yaml.Node, bad func(int, string, ...any)) fileGuard {
	var fg fileGuard
	if n.Kind != yaml.MappingNode {
		bad(n.Line, "guard must be a mapping with key models")
		return fg
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.Value == "models" && v.Kind == yaml.MappingNode:
			fg.profiles = readProfileRules(v, bad)
		case k.Value == "models":
			bad(v.Line, "guard: models must be a mapping of model names (or prefixes ending in *) to strict or agent")
		default:
			bad(k.Line, "guard: unknown key %s%s", k.Value, didYouMean(k.Value, []string{"models"}, ""))
		}
	}
	return fg
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
