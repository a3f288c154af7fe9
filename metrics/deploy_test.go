package metrics_test

// The Prometheus rules and the Grafana dashboard under deploy/ name the
// gateway's metrics by hand; these tests hold them to what the collectors
// expose, so a renamed metric, label or label value, or a label added that
// a rule, a rule test or a panel does not follow, fails here and not on an
// operator's empty or wrongly summed panel.

import (
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"gopkg.in/yaml.v3"

	"github.com/phasegate/phasegate/metrics"
)

const (
	rulesFile     = "../deploy/prometheus/rules.yml"
	rulesTestFile = "../deploy/prometheus/rules_test.yml"
	dashboardFile = "../deploy/grafana/phasegate-dashboard.json"
)

var (
	// A name that is one of ours: a metric (phasegate_…) or a recording
	// rule (level:phasegate_…:operations).
	nameRE = regexp.MustCompile(`[a-z_]*:?phasegate_[a-z0-9_]+(?::[a-z0-9_]+)?`)
	// level:metric:operations (prometheus.io/docs/practices/rules).
	recordRE = regexp.MustCompile(`^job(_[a-z]+)*:phasegate_[a-z0-9_]+:[a-z0-9_]+$`)
	// A label matcher on one of the gateway's bounded labels.
	matcherRE = regexp.MustCompile(`\b(door|protocol|outcome|verdict|budget|kind|source)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	// A matcher value that is a plain alternation of label values.
	alternationRE = regexp.MustCompile(`^[a-z0-9_-]+(\|[a-z0-9_-]+)*$`)
	// A selector with matchers: one of our names and what is in its braces.
	selectorRE = regexp.MustCompile(`([a-z_]*:?phasegate_[a-z0-9_]+(?::[a-z0-9_]+)?)\s*\{([^}]*)\}`)
	// The label of any matcher, or of a label pair in a test's series.
	labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"`)
	// A grouping or matching clause: by (…), without (…), on (…),
	// ignoring (…).
	groupingRE = regexp.MustCompile(`\b(by|without|on|ignoring)\s*\(([^)]*)\)`)
	// A Grafana variable query: label_values(selector, label).
	labelValuesRE = regexp.MustCompile(`label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)`)
	// A label in a legend: {{label}}.
	legendRE = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
)

// scrapeLabels are the labels Prometheus adds to every series it scrapes.
var scrapeLabels = []string{"job", "instance"}

// exposedSeries maps the name of each series the collectors expose to its
// label names: each counter and gauge by its name, each histogram by its
// _bucket (with le), _sum and _count series (a classic histogram has no
// series of its bare name).
func exposedSeries(t *testing.T) map[string][]string {
	t.Helper()
	reg := prometheus.NewRegistry()
	metrics.New(reg, providers)
	metrics.RegisterTokenRatios(reg, []string{"deepseek-v4-flash"}, func(string) float64 { return 1 })
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	series := map[string][]string{}
	for _, mf := range mfs {
		// Every label combination is initialised, so the first series
		// has every label of its family.
		var labels []string
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			series[mf.GetName()+"_bucket"] = append(slices.Clone(labels), "le")
			series[mf.GetName()+"_sum"] = labels
			series[mf.GetName()+"_count"] = labels
		default:
			series[mf.GetName()] = labels
		}
	}
	return series
}

// recordLabels are the labels a recording rule keeps, as its level names
// them: job_provider_kind:… keeps job, provider and kind.
func recordLabels(record string) []string {
	level, _, _ := strings.Cut(record, ":")
	return strings.Split(level, "_")
}

// labelValues are the values each bounded label may take in a matcher.
func labelValues() map[string][]string {
	outcomes := make([]string, 0, len(metrics.Outcomes))
	for _, o := range metrics.Outcomes {
		outcomes = append(outcomes, string(o))
	}
	return map[string][]string{
		"door":     metrics.Doors,
		"protocol": metrics.Protocols,
		"outcome":  slices.Concat(outcomes, metrics.TransientOutcomes, metrics.LeakOutcomes, metrics.EnvelopeOutcomes, metrics.RateLimitOutcomes, metrics.DegenerateOutcomes),
		"verdict":  metrics.Verdicts,
		"budget":   metrics.Budgets,
		"kind":     slices.Concat(metrics.UpstreamErrorKinds, metrics.TokenKinds, metrics.TruncationKinds, metrics.RepairKinds, metrics.RefusalKinds()),
		"source":   metrics.TokenSources,
	}
}

// labelsOf are the labels of the series name: those the collectors expose
// it with and the scrape's, or those a recording rule's level names.
func labelsOf(series map[string][]string, name string) []string {
	if strings.Contains(name, ":") {
		return recordLabels(name)
	}
	return slices.Concat(series[name], scrapeLabels)
}

// checkNames reports every name in expr that is neither an exposed series
// nor one of records, and whatever checkValues and checkLabels report.
func checkNames(t *testing.T, where, expr, legend string, series map[string][]string, records map[string]bool) {
	t.Helper()
	names := nameRE.FindAllString(expr, -1)
	if len(names) == 0 {
		t.Errorf("%s: %q names no phasegate metric", where, expr)
	}
	for _, name := range names {
		if strings.Contains(name, ":") {
			if !records[name] {
				t.Errorf("%s: %s is not a recording rule in %s", where, name, rulesFile)
			}
		} else if _, ok := series[name]; !ok {
			t.Errorf("%s: %s is not a series the collectors expose", where, name)
		}
	}
	checkValues(t, where, expr)
	checkLabels(t, where, expr, legend, names, series)
}

// checkValues reports every matcher on a bounded label whose value the
// gateway never sets.
func checkValues(t *testing.T, where, expr string) {
	t.Helper()
	values := labelValues()
	for _, m := range matcherRE.FindAllStringSubmatch(expr, -1) {
		label, op, value := m[1], m[2], m[3]
		alts := []string{value}
		if op == "=~" || op == "!~" {
			if !alternationRE.MatchString(value) {
				continue // a real regular expression; not checked
			}
			alts = strings.Split(value, "|")
		}
		for _, v := range alts {
			if !slices.Contains(values[label], v) {
				t.Errorf("%s: %s%s%q: %s never takes the value %q (it takes %v)", where, label, op, value, label, v, values[label])
			}
		}
	}
}

// checkLabels reports every label a selector, a grouping clause or a
// label_values query names that the series in expr (names) do not have,
// and every label of legend (a Grafana legend format, or "") that the
// expression's by (…) clauses drop.
func checkLabels(t *testing.T, where, expr, legend string, names []string, series map[string][]string) {
	t.Helper()
	named := slices.Clone(scrapeLabels) // every label of the series expr names
	for _, name := range names {
		named = append(named, labelsOf(series, name)...)
	}
	for _, sel := range selectorRE.FindAllStringSubmatch(expr, -1) {
		for _, m := range labelRE.FindAllStringSubmatch(sel[2], -1) {
			if has := labelsOf(series, sel[1]); !slices.Contains(has, m[1]) {
				t.Errorf("%s: %s has no label %s (it has %v)", where, sel[1], m[1], has)
			}
		}
	}
	var kept []string // the labels by (…) clauses keep
	for _, g := range groupingRE.FindAllStringSubmatch(expr, -1) {
		for l := range strings.SplitSeq(g[2], ",") {
			if l = strings.TrimSpace(l); l == "" {
				continue
			}
			if !slices.Contains(named, l) {
				t.Errorf("%s: %s (%s): no series in the expression has the label %s", where, g[1], g[2], l)
			}
			if g[1] == "by" {
				kept = append(kept, l)
			}
		}
	}
	for _, m := range labelValuesRE.FindAllStringSubmatch(expr, -1) {
		if !slices.Contains(named, m[2]) {
			t.Errorf("%s: label_values of %s: no such label", where, m[2])
		}
	}
	if kept == nil {
		return // no grouping: the legend shows the series' own labels
	}
	for _, m := range legendRE.FindAllStringSubmatch(legend, -1) {
		if !slices.Contains(kept, m[1]) {
			t.Errorf("%s: the legend %q shows %s, which the expression's by (…) drops", where, legend, m[1])
		}
	}
}

// checkRecordLevel reports a recording rule whose by (…) clauses keep
// other labels than its level names (le aside, which histogram_quantile
// consumes).
func checkRecordLevel(t *testing.T, record, expr string) {
	t.Helper()
	want := slices.Sorted(slices.Values(recordLabels(record)))
	found := false
	for _, g := range groupingRE.FindAllStringSubmatch(expr, -1) {
		if g[1] != "by" {
			continue
		}
		found = true
		var got []string
		for l := range strings.SplitSeq(g[2], ",") {
			if l = strings.TrimSpace(l); l != "" && l != "le" {
				got = append(got, l)
			}
		}
		if slices.Sort(got); !slices.Equal(got, want) {
			t.Errorf("recording rule %s: by (%s) keeps %v, its level names %v", record, g[2], got, want)
		}
	}
	if !found {
		t.Errorf("recording rule %s: no by (…) clause keeps the labels its level names", record)
	}
}

// splitSeries splits a series as tests spell it, name{label="value",…},
// into its name and sorted label names.
func splitSeries(s string) (name string, labels []string) {
	name, rest, _ := strings.Cut(s, "{")
	for _, m := range labelRE.FindAllStringSubmatch(rest, -1) {
		labels = append(labels, m[1])
	}
	slices.Sort(labels)
	return strings.TrimSpace(name), labels
}

// checkInputLabels reports an input series of a rule test whose labels are
// not those the gateway exposes it with, plus job and instance: a label
// the gateway added and the test lacks would leave the rules untested
// against it.
func checkInputLabels(t *testing.T, test, s string, series map[string][]string) {
	t.Helper()
	name, got := splitSeries(s)
	exposed, ok := series[name]
	if !ok {
		return // checkNames reports it
	}
	want := slices.Sorted(slices.Values(slices.Concat(exposed, scrapeLabels)))
	if !slices.Equal(got, want) {
		t.Errorf("%s: input %s has the labels %v, the gateway exposes it with %v", test, s, got, want)
	}
}

// checkSampleLabels reports an expected sample of a recording rule whose
// labels are not those the rule's level names.
func checkSampleLabels(t *testing.T, test, s string, records map[string]bool) {
	t.Helper()
	name, got := splitSeries(s)
	if !records[name] {
		t.Errorf("%s: expected sample %s is not of a recording rule in %s", test, s, rulesFile)
		return
	}
	if want := slices.Sorted(slices.Values(recordLabels(name))); !slices.Equal(got, want) {
		t.Errorf("%s: expected sample %s has the labels %v, %s keeps %v", test, s, got, name, want)
	}
}

type rulesDoc struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record      string            `yaml:"record"`
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// rules reads rules.yml and returns it with its recording rules' names
// and its alerts' names.
func rules(t *testing.T) (doc rulesDoc, records, alerts map[string]bool) {
	t.Helper()
	readYAML(t, rulesFile, &doc)
	records, alerts = map[string]bool{}, map[string]bool{}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				records[r.Record] = true
			}
			if r.Alert != "" {
				alerts[r.Alert] = true
			}
		}
	}
	return doc, records, alerts
}

func TestRulesNameMetricsThatExist(t *testing.T) {
	series := exposedSeries(t)
	doc, records, alerts := rules(t)
	if len(records) == 0 || len(alerts) == 0 {
		t.Fatalf("%s: %d recording rules, %d alerts; want some of each", rulesFile, len(records), len(alerts))
	}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			switch {
			case r.Record != "":
				if !recordRE.MatchString(r.Record) {
					t.Errorf("recording rule %s: want level:metric:operations with job in the level", r.Record)
				}
				checkNames(t, r.Record, r.Expr, "", series, records)
				checkRecordLevel(t, r.Record, r.Expr)
			case r.Alert != "":
				checkNames(t, r.Alert, r.Expr, "", series, records)
				if !strings.HasPrefix(r.Alert, "Phasegate") {
					t.Errorf("alert %s: want the Phasegate prefix", r.Alert)
				}
				if s := r.Labels["severity"]; s != "critical" && s != "warning" {
					t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
				}
				if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
					t.Errorf("alert %s: want a summary and a description", r.Alert)
				}
			default:
				t.Errorf("group %s: a rule with neither record nor alert", g.Name)
			}
		}
	}
}

// Every alert has a test in which it fires and one in which it does not;
// every recording rule has its value checked.
func TestRulesAreTested(t *testing.T) {
	series := exposedSeries(t)
	_, records, alerts := rules(t)
	var doc struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			Name        string `yaml:"name"`
			InputSeries []struct {
				Series string `yaml:"series"`
			} `yaml:"input_series"`
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
			PromQLExprTest []struct {
				Expr       string `yaml:"expr"`
				ExpSamples []struct {
					Labels string `yaml:"labels"`
				} `yaml:"exp_samples"`
			} `yaml:"promql_expr_test"`
		} `yaml:"tests"`
	}
	readYAML(t, rulesTestFile, &doc)
	if !slices.Equal(doc.RuleFiles, []string{"rules.yml"}) {
		t.Errorf("rule_files = %v, want [rules.yml]", doc.RuleFiles)
	}
	fires, quiet, checked := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, tc := range doc.Tests {
		for _, in := range tc.InputSeries {
			checkNames(t, tc.Name+": input", in.Series, "", series, map[string]bool{})
			checkInputLabels(t, tc.Name, in.Series, series)
		}
		for _, a := range tc.AlertRuleTest {
			if !alerts[a.Alertname] {
				t.Errorf("%s: tests %s, which is not an alert in %s", tc.Name, a.Alertname, rulesFile)
			}
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
		for _, e := range tc.PromQLExprTest {
			checkNames(t, tc.Name+": expr", e.Expr, "", series, records)
			for _, sample := range e.ExpSamples {
				checkSampleLabels(t, tc.Name, sample.Labels, records)
			}
			for _, name := range nameRE.FindAllString(e.Expr, -1) {
				checked[name] = true
			}
		}
	}
	for _, a := range slices.Sorted(maps.Keys(alerts)) {
		if !fires[a] {
			t.Errorf("no test in which %s fires", a)
		}
		if !quiet[a] {
			t.Errorf("no test in which %s does not fire", a)
		}
	}
	for _, r := range slices.Sorted(maps.Keys(records)) {
		if !checked[r] {
			t.Errorf("no promql_expr_test checks %s", r)
		}
	}
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID        string `json:"refId"`
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func TestDashboardNamesMetricsThatExist(t *testing.T) {
	series := exposedSeries(t)
	_, records, _ := rules(t)
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID           string  `json:"uid"`
		SchemaVersion int     `json:"schemaVersion"`
		Panels        []panel `json:"panels"`
		Templating    struct {
			List []struct {
				Name       string          `json:"name"`
				Type       string          `json:"type"`
				Query      json.RawMessage `json:"query"`
				Definition string          `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dash.UID == "" || dash.SchemaVersion < 39 {
		t.Errorf("uid %q, schemaVersion %d; want a uid and schemaVersion 39 or later", dash.UID, dash.SchemaVersion)
	}

	vars := map[string]string{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "query" {
			checkNames(t, "variable "+v.Name, v.Definition, "", series, records)
			var q struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &q); err != nil || q.Query != v.Definition {
				t.Errorf("variable %s: query %s, want {\"query\": %q}", v.Name, v.Query, v.Definition)
			}
		}
	}
	if vars["datasource"] != "datasource" || vars["provider"] != "query" {
		t.Errorf("variables %v; want datasource (a data source) and provider (a query)", vars)
	}

	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			where := "panel " + p.Title
			if ids[p.ID] {
				t.Errorf("%s: id %d used twice", where, p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: datasource %+v, want the ${datasource} variable", where, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no queries", where)
			}
			for _, tg := range p.Targets {
				checkNames(t, where+" "+tg.RefID, tg.Expr, tg.LegendFormat, series, records)
			}
		}
	}
	walk(dash.Panels)
	if len(ids) < 12 {
		t.Errorf("%d panels, want the dozen the design asks for", len(ids))
	}
}
