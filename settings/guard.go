package settings

import (
	"encoding/json"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/phasegate/phasegate/envelope"
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

// UnmarshalYAML reads guard: a mapping with models (model name or prefix*
// to a guard profile, in the order written), modes (model name or prefix*
// to a guard mode) and projects (project to a guard mode).
func (g *fileGuard) UnmarshalYAML(n *yaml.Node) error {
	var p problems
	err := eachField(n, "guard", "a mapping with keys models, modes, projects", []string{"models", "modes", "projects"}, func(k, v *yaml.Node) {
		switch k.Value {
		case "models":
			var rules ordered[profile]
			p.addDecode(v.Line, "", decodeOrdered(v, "guard: models", "a mapping of model names (or prefixes ending in *) to strict or agent", &rules))
			for _, e := range rules {
				g.profiles = append(g.profiles, proxy.ProfileRule{Pattern: e.name, Profile: protocol.Profile(e.value)})
			}
		case "modes":
			var rules ordered[mode]
			p.addDecode(v.Line, "", decodeOrdered(v, "guard: modes", "a mapping of model names (or prefixes ending in *) to enforce or observe", &rules))
			for _, e := range rules {
				g.modes = append(g.modes, proxy.ModeRule{Pattern: e.name, Mode: protocol.Mode(e.value)})
			}
		case "projects":
			var rules ordered[mode]
			p.addDecode(v.Line, "", decodeOrdered(v, "guard: projects", "a mapping of project names to enforce or observe", &rules))
			g.projects = map[string]protocol.Mode{}
			for _, e := range rules {
				g.projects[e.name] = protocol.Mode(e.value)
			}
		}
	})
	p.addDecode(n.Line, "", err)
	return p.err()
}

// named is one entry of a mapping of names to values, such as guard:
// modes or envelopes: models.
type named[T any] struct {
	name  string
	value T
	line  int
}

// ordered is a mapping of names to values in the order written, where
// the first rule that matches wins.
type ordered[T any] []named[T]

// decodeOrdered reads a mapping of names to values of T, each decoded by
// the YAML library into T, in the order written. A name given twice, or
// a value T refuses, is reported at its line under section ("guard:
// modes") and left out; a node that is not a mapping is reported with
// mustBe.
func decodeOrdered[T any](n *yaml.Node, section, mustBe string, out *ordered[T]) error {
	var p problems
	if n.Kind != yaml.MappingNode {
		p.add(n.Line, "%s must be %s", section, mustBe)
		return p.err()
	}
	err := eachField(n, section, mustBe, nil, func(k, v *yaml.Node) {
		var x T
		if err := present(v).Decode(&x); err != nil {
			p.addDecode(v.Line, section+": "+k.Value+": "+echo(v), err)
			return
		}
		*out = append(*out, named[T]{name: k.Value, value: x, line: v.Line})
	})
	p.addDecode(n.Line, "", err)
	return p.err()
}

// word reads n, a scalar, with parse; anything else, or what parse
// refuses, must be rule.
func word[T any](n *yaml.Node, parse func(string) (T, error), rule string) (T, error) {
	v, err := parse(n.Value)
	if err != nil || n.Kind != yaml.ScalarNode {
		var zero T
		return zero, mustBe(n, rule)
	}
	return v, nil
}

// profile is a guard profile: strict or agent.
type profile protocol.Profile

// UnmarshalYAML reads strict or agent.
func (x *profile) UnmarshalYAML(n *yaml.Node) error {
	p, err := word(n, protocol.ParseProfile, "strict or agent")
	if err == nil {
		*x = profile(p)
	}
	return err
}

// mode is a guard mode: enforce or observe.
type mode protocol.Mode

// UnmarshalYAML reads enforce or observe.
func (x *mode) UnmarshalYAML(n *yaml.Node) error {
	m, err := word(n, protocol.ParseMode, "enforce or observe")
	if err == nil {
		*x = mode(m)
	}
	return err
}

// envelopeMode is an envelope rule: optional, required or off.
type envelopeMode protocol.EnvelopeMode

// UnmarshalYAML reads optional, required or off; unlike the header, the
// file takes no empty value.
func (x *envelopeMode) UnmarshalYAML(n *yaml.Node) error {
	if n.Value == "" {
		return mustBe(n, "optional, required or off")
	}
	m, err := word(n, protocol.ParseEnvelopeMode, "optional, required or off")
	if err == nil {
		*x = envelopeMode(m)
	}
	return err
}

// fileEnvelopes is the envelopes section of the config file.
type fileEnvelopes struct {
	rules  []proxy.EnvelopeRule
	phases map[envelope.Phase][]byte // JSON Schema of each added phase
}

// UnmarshalYAML reads envelopes: a mapping with models (model name or
// prefix* to optional, required or off, in the order written) and phases
// (phase name to the JSON Schema of its data, written in YAML).
func (fe *fileEnvelopes) UnmarshalYAML(n *yaml.Node) error {
	var p problems
	err := eachField(n, "envelopes", "a mapping with keys models and phases", []string{"models", "phases"}, func(k, v *yaml.Node) {
		switch k.Value {
		case "models":
			var rules ordered[envelopeMode]
			p.addDecode(v.Line, "", decodeOrdered(v, "envelopes: models", "a mapping", &rules))
			for _, e := range rules {
				fe.rules = append(fe.rules, proxy.EnvelopeRule{Pattern: e.name, Mode: protocol.EnvelopeMode(e.value)})
			}
		case "phases":
			var phases ordered[phaseSchema]
			p.addDecode(v.Line, "", decodeOrdered(v, "envelopes: phases", "a mapping", &phases))
			fe.phases = map[envelope.Phase][]byte{}
			for _, e := range phases {
				if _, err := envelope.NewSet(map[envelope.Phase][]byte{envelope.Phase(e.name): e.value}); err != nil {
					p.add(e.line, "envelopes: phases: %s: %v", e.name, err)
					continue
				}
				fe.phases[envelope.Phase(e.name)] = e.value
			}
		}
	})
	p.addDecode(n.Line, "", err)
	return p.err()
}

// phaseSchema is the JSON Schema of an added phase's data, written in
// YAML; fileEnvelopes compiles it.
type phaseSchema []byte

// UnmarshalYAML reads a schema as the JSON it spells.
func (s *phaseSchema) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return mustBe(n, "a JSON Schema (a mapping) for the phase's data")
	}
	b, err := json.Marshal(yamlJSON(n))
	if err != nil {
		var p problems
		p.add(n.Line, "%v", err)
		return p.err()
	}
	*s = b
	return nil
}

// yamlJSON turns a YAML node into the JSON value it spells. Scalars keep
// YAML's reading of numbers, booleans and null, and every other scalar is
// its text: an unquoted date stays the string it reads as, where decoding
// into any would make it a time. Aliases are followed.
func yamlJSON(n *yaml.Node) any {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) > 0 {
			return yamlJSON(n.Content[0])
		}
		return nil
	case yaml.AliasNode:
		return yamlJSON(n.Alias)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			m[n.Content[i].Value] = yamlJSON(n.Content[i+1])
		}
		return m
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, c := range n.Content {
			out[i] = yamlJSON(c)
		}
		return out
	}
	switch n.Tag {
	case "!!int", "!!float", "!!bool", "!!null":
		var v any
		if n.Decode(&v) == nil {
			return v
		}
	}
	return n.Value
}

// echo is the value of n as its error quotes it, with the ": " that
// follows: a scalar as written, an empty one as empty, a list where one
// value was wanted in YAML's flow style ([agent]) when that fits on a
// short line. A mapping is not quoted: its own errors name the entry at
// fault.
func echo(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.SequenceNode:
		return flowEcho(n)
	case n.Kind != yaml.ScalarNode:
		return ""
	case n.Value == "":
		return "empty: "
	}
	return n.Value + ": "
}

// flowEcho is the list n written in YAML's flow style with ": " after it,
// or "" when that takes more than one short line.
func flowEcho(n *yaml.Node) string {
	c := *n
	c.Style = yaml.FlowStyle
	b, err := yaml.Marshal(&c)
	s := strings.TrimSpace(string(b))
	if err != nil || len(s) > 60 || strings.Contains(s, "\n") {
		return ""
	}
	return s + ": "
}
