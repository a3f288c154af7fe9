package settings

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/phasegate/phasegate/pricing"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/session"
)

// sessionSources are the values SESSION_FROM takes.
func sessionSources() []string {
	out := make([]string, len(session.BodySources))
	for i, s := range session.BodySources {
		out[i] = string(s)
	}
	return out
}

// sessions reads the settings of sessions: the global budgets, the file's
// budgets per model and project, and how a spent session is answered.
func (r *resolver) sessions(f fileSessions) proxy.Sessions {
	s := proxy.Sessions{
		Rules: session.Rules{Global: session.Budget{ToolCalls: int64(r.num(SessionMaxToolCalls)), Tokens: int64(r.num(SessionMaxTokens)),
			USD: r.decimal(SessionMaxUSD), IdleTTL: r.positiveDur(SessionIdleTTL)}, Models: f.models, Projects: f.projects},
		Reject:   r.choice(SessionOnCap) == "reject",
		FailOpen: r.boolean(SessionFailOpen),
	}
	for _, name := range list(r.v[SessionFrom].Raw) {
		src, ok := session.ParseSource(name)
		if !ok {
			r.bad(SessionFrom, fmt.Sprintf("unknown field %q: the fields are %s", name, orList(sessionSources())))
			continue
		}
		s.From = append(s.From, src)
	}
	return s
}

// fileSessions is the sessions section of the config file.
type fileSessions struct {
	// models are the budgets per model, in the order written.
	models []session.ModelRule
	// projects are the budgets per project.
	projects map[string]session.Override
}

// budgetKeys are the keys of one budget rule.
var budgetKeys = []string{"max_tool_calls", "max_tokens", "max_usd", "idle_ttl"}

// UnmarshalYAML reads sessions: a mapping with models (model name or
// prefix* to a budget, in the order written) and projects (project to a
// budget); a budget is a mapping of budgetKeys, each optional.
func (fs *fileSessions) UnmarshalYAML(n *yaml.Node) error {
	var p problems
	mustBe := "a mapping of %s to budgets (" + strings.Join(budgetKeys, ", ") + ")"
	err := eachField(n, "sessions", "a mapping with keys models, projects", []string{"models", "projects"}, func(k, v *yaml.Node) {
		var rules ordered[budgetRule]
		switch k.Value {
		case "models":
			p.addDecode(v.Line, "", decodeOrdered(v, "sessions: models", fmt.Sprintf(mustBe, "model names (or prefixes ending in *)"), &rules))
			for _, e := range rules {
				fs.models = append(fs.models, session.ModelRule{Pattern: e.name, Override: session.Override(e.value)})
			}
		case "projects":
			p.addDecode(v.Line, "", decodeOrdered(v, "sessions: projects", fmt.Sprintf(mustBe, "project names"), &rules))
			fs.projects = map[string]session.Override{}
			for _, e := range rules {
				fs.projects[e.name] = session.Override(e.value)
			}
		}
	})
	p.addDecode(n.Line, "", err)
	return p.err()
}

// budgetRule is one budget of sessions: the budgets it sets.
type budgetRule session.Override

// UnmarshalYAML reads a mapping of budgetKeys.
func (b *budgetRule) UnmarshalYAML(n *yaml.Node) error {
	var p problems
	err := eachField(n, "", "a mapping with keys "+strings.Join(budgetKeys, ", "), budgetKeys, func(k, v *yaml.Node) {
		var err error
		switch k.Value {
		case "max_tool_calls", "max_tokens":
			var w wholeNumber
			if err = present(v).Decode(&w); err == nil {
				n := int64(w)
				*map[string]**int64{"max_tool_calls": &b.ToolCalls, "max_tokens": &b.Tokens}[k.Value] = &n
			}
		case "max_usd":
			var d amount
			if err = present(v).Decode(&d); err == nil {
				f := float64(d)
				b.USD = &f
			}
		case "idle_ttl":
			var d positiveDuration
			if err = present(v).Decode(&d); err == nil {
				t := time.Duration(d)
				b.IdleTTL = &t
			}
		}
		p.addDecode(v.Line, k.Value+": "+v.Value+": ", err)
	})
	p.addDecode(n.Line, "", err)
	return p.err()
}

// amount is a number of 0 or more: US dollars.
type amount float64

// UnmarshalYAML reads a number of 0 or more.
func (a *amount) UnmarshalYAML(n *yaml.Node) error {
	v, err := strconv.ParseFloat(n.Value, 64)
	if n.Kind != yaml.ScalarNode || err != nil || !(v >= 0) || math.IsInf(v, 0) {
		return mustBe(n, "a number of 0 or more, such as 2.50")
	}
	*a = amount(v)
	return nil
}

// positiveDuration is a duration of more than 0, with a unit.
type positiveDuration time.Duration

// UnmarshalYAML reads a duration such as 30m.
func (d *positiveDuration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil || v <= 0 {
		return mustBe(n, "a duration of more than 0, with a unit: 30m, 2h")
	}
	*d = positiveDuration(v)
	return nil
}

// filePrices is the prices section of the config file: model name (or
// prefix*) to its prices, in the order written, before the built-in ones.
type filePrices []pricing.Rule

// priceKeys are the keys of one model's prices.
var priceKeys = []string{"input_cache_miss", "input_cache_hit", "output", "off_peak"}

// UnmarshalYAML reads prices.
func (fp *filePrices) UnmarshalYAML(n *yaml.Node) error {
	var rules ordered[priceRule]
	err := decodeOrdered(n, "prices", "a mapping of model names (or prefixes ending in *) to prices ("+strings.Join(priceKeys, ", ")+")", &rules)
	for _, e := range rules {
		r := pricing.Rule(e.value)
		r.Pattern = e.name
		*fp = append(*fp, r)
	}
	return err
}

// priceRule is one model's prices, US dollars per million tokens: the
// three prices, each required, and off_peak (the three again) for the
// hours outside DeepSeek's peak.
type priceRule pricing.Rule

// UnmarshalYAML reads a mapping of priceKeys.
func (r *priceRule) UnmarshalYAML(n *yaml.Node) error {
	var p problems
	price, err := decodePrice(n, priceKeys, func(v *yaml.Node) {
		off, err := decodePrice(v, priceKeys[:3], nil)
		p.addDecode(v.Line, "off_peak: ", err)
		r.OffPeak = &off
	})
	p.addDecode(n.Line, "", err)
	r.Price = price
	return p.err()
}

// decodePrice reads a price of keys (the three prices, each required);
// offPeak, when not nil, reads the off_peak key.
func decodePrice(n *yaml.Node, keys []string, offPeak func(*yaml.Node)) (pricing.Price, error) {
	var p problems
	var pr pricing.Price
	seen := map[string]bool{}
	err := eachField(n, "", "a mapping with keys "+strings.Join(keys, ", "), keys, func(k, v *yaml.Node) {
		seen[k.Value] = true
		if k.Value == "off_peak" {
			offPeak(v)
			return
		}
		var a amount
		err := present(v).Decode(&a)
		*map[string]*float64{"input_cache_miss": &pr.InputCacheMiss, "input_cache_hit": &pr.InputCacheHit, "output": &pr.Output}[k.Value] = float64(a)
		p.addDecode(v.Line, k.Value+": "+v.Value+": ", err)
	})
	p.addDecode(n.Line, "", err)
	for _, k := range keys[:3] {
		if !seen[k] && err == nil {
			p.add(n.Line, "prices need %s (US dollars per million tokens)", k)
		}
	}
	return pr, p.err()
}
