package deploy_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// boardPanel is the part of a dashboard panel the layout test reads.
type boardPanel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// boardRows reads the dashboard into its rows, in order, each with the
// panels under it.
func boardRows(t *testing.T) (titles []string, panels map[string][]boardPanel) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var board struct {
		Panels []boardPanel `json:"panels"`
	}
	if err := json.Unmarshal(b, &board); err != nil {
		t.Fatal(err)
	}
	panels = map[string][]boardPanel{}
	row := ""
	for _, p := range board.Panels {
		if p.Type == "row" {
			row = p.Title
			titles = append(titles, row)
			continue
		}
		if row == "" {
			t.Fatalf("%s: panel %q comes before the first row", dashboardFile, p.Title)
		}
		panels[row] = append(panels[row], p)
	}
	return titles, panels
}

// TestDashboardLayout: the dashboard reads as an operator rolls the guard
// out: observe mode and its targets first; the DeepSeek panels in a row
// of their own; a panel for the requests the gateway's bounds refused
// (503 and 408), the upstream retries, the model fallbacks and the rules
// notices; and no panel or alert title in words of our own making.
func TestDashboardLayout(t *testing.T) {
	titles, panels := boardRows(t)
	if len(titles) == 0 || !strings.Contains(strings.ToLower(titles[0]), "observe") {
		t.Fatalf("the first row is %q, want the observe-mode roll-out: rows %v", titles, titles)
	}
	for _, p := range panels[titles[0]] {
		if !strings.Contains(exprs(p), "phasegate_observed_tool_calls_total") && !strings.HasPrefix(p.Title, "Target: ") {
			t.Errorf("panel %q of the roll-out row is neither about observe mode nor a target", p.Title)
		}
	}
	deepseek := []string{"phasegate_leaked_tool_calls_total", "phasegate_thinking_repairs_total", "phasegate_transient_finishes_total"}
	for row, ps := range panels {
		for _, p := range ps {
			isDeepSeek := slices.ContainsFunc(deepseek, func(m string) bool { return strings.Contains(exprs(p), m) })
			if isDeepSeek != (row == "DeepSeek") {
				t.Errorf("panel %q is in row %q: the DeepSeek panels, and only they, belong in the DeepSeek row", p.Title, row)
			}
		}
	}
	for _, metric := range []string{"phasegate_requests_bounded_total", "phasegate_upstream_retries_total", "phasegate_model_fallbacks_total", "phasegate_rules_notices_total"} {
		found := false
		for _, ps := range panels {
			found = found || slices.ContainsFunc(ps, func(p boardPanel) bool { return strings.Contains(exprs(p), metric) })
		}
		if !found {
			t.Errorf("no panel shows %s", metric)
		}
	}
	var names []string
	names = append(names, titles...)
	for _, ps := range panels {
		for _, p := range ps {
			names = append(names, p.Title)
		}
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, rulesFile, &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert, r.Annotations["summary"])
		}
	}
	for _, name := range names {
		for _, own := range []string{"seed", "issue", "two-stage protocol"} {
			if strings.Contains(strings.ToLower(name), own) {
				t.Errorf("title %q uses our own word %q: name what the operator sees", name, own)
			}
		}
	}
}

// exprs are a panel's queries, joined.
func exprs(p boardPanel) string {
	var b strings.Builder
	for _, q := range p.Targets {
		b.WriteString(q.Expr)
		b.WriteByte('\n')
	}
	return b.String()
}
