package metrics_test

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/phasegate/phasegate/metrics"
)

const metricsPage = "../docs/metrics.md"

// TestMetricsTableListsEveryFamily: the table of docs/metrics.md has one
// row for every family the gateway exports, and none for a family it does
// not, so an operator reading it finds every metric the dashboard and the
// rules use.
func TestMetricsTableListsEveryFamily(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg, providers)
	metrics.RegisterTokenRatios(reg, []string{"deepseek-v4-flash"}, func(string) float64 { return 1 })
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var exported []string
	for _, mf := range mfs {
		exported = append(exported, mf.GetName())
	}
	slices.Sort(exported)

	b, err := os.ReadFile(metricsPage)
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(phasegate_[a-z0-9_]+)(?:\\{[a-z_,]*\\})?` \\|")
	var documented []string
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		documented = append(documented, m[1])
	}
	if dup := duplicates(documented); len(dup) > 0 {
		t.Errorf("%s lists %v more than once", metricsPage, dup)
	}
	slices.Sort(documented)
	documented = slices.Compact(documented)
	for _, name := range exported {
		if !slices.Contains(documented, name) {
			t.Errorf("%s: no row for %s, which the gateway exports", metricsPage, name)
		}
	}
	for _, name := range documented {
		if !slices.Contains(exported, name) {
			t.Errorf("%s: a row for %s, which the gateway does not export", metricsPage, name)
		}
	}
	if len(documented) == 0 {
		t.Errorf("%s: no metrics table found (rows start | `phasegate_name{labels}` |)", metricsPage)
	}
}

// duplicates are the names listed more than once.
func duplicates(names []string) []string {
	seen := map[string]int{}
	var out []string
	for _, n := range names {
		if seen[n]++; seen[n] == 2 {
			out = append(out, n)
		}
	}
	return out
}
