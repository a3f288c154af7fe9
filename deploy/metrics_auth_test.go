package deploy_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/settings"
	"github.com/phasegate/phasegate/sim"
)

// TestStackMetricsWithClientKeys serves the gateway as deploy/compose.yaml
// configures it, with the shell's PHASEGATE_API_KEYS set and unset, and
// scrapes it as the shipped scrape config does: Prometheus's target is the
// gateway's admin listener, where /metrics answers without a key, so the
// dashboard fills whether client keys are set or not; the client port
// answers /metrics with 404 and asks clients for their key.
func TestStackMetricsWithClientKeys(t *testing.T) {
	var c composeDoc
	readYAML(t, composeFile, &c)
	target := scrapeTarget(t)
	for _, tc := range []struct {
		name string
		keys string
	}{
		{"client keys set", "sk-client-a,sk-client-b:team-b"},
		{"no client keys", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range c.Services["gateway"].Environment {
				env[k] = interpolate(v, map[string]string{"PHASEGATE_API_KEYS": tc.keys})
			}
			s, err := settings.Load(settings.Input{Getenv: func(k string) string { return env[k] }})
			if err != nil {
				t.Fatalf("the compose file's gateway settings: %v", err)
			}
			if want := strings.Count(tc.keys, ",") + 1; tc.keys != "" && len(s.Proxy.ClientKeys) != want {
				t.Fatalf("%d client keys, want %d", len(s.Proxy.ClientKeys), want)
			}
			_, adminPort, err := net.SplitHostPort(s.AdminAddr)
			if err != nil || target != "gateway:"+adminPort {
				t.Fatalf("Prometheus scrapes %s, the gateway's admin listener is %q (%v)", target, s.AdminAddr, err)
			}
			client, admin := serveAsCompose(t, s)
			status, body := get(t, admin+"/metrics")
			if status != http.StatusOK || !strings.Contains(body, "phasegate_requests_total") {
				t.Errorf("the scrape of the admin listener: %d, %.200s", status, body)
			}
			if status, _ := get(t, client+"/metrics"); status != http.StatusNotFound {
				t.Errorf("/metrics on the client port: %d, want 404", status)
			}
			wantModels := http.StatusOK
			if tc.keys != "" {
				wantModels = http.StatusUnauthorized
			}
			if status, body := get(t, client+"/v1/models"); status != wantModels {
				t.Errorf("/v1/models without a key: %d, want %d: %.200s", status, wantModels, body)
			}
		})
	}
}

// scrapeTarget is the one target of the shipped scrape config.
func scrapeTarget(t *testing.T) string {
	t.Helper()
	var scrape struct {
		ScrapeConfigs []struct {
			Authorization any `yaml:"authorization"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, scrapeFile, &scrape)
	if len(scrape.ScrapeConfigs) != 1 || len(scrape.ScrapeConfigs[0].StaticConfigs) != 1 || len(scrape.ScrapeConfigs[0].StaticConfigs[0].Targets) != 1 {
		t.Fatalf("%s: want one job with one target, got %+v", scrapeFile, scrape.ScrapeConfigs)
	}
	if scrape.ScrapeConfigs[0].Authorization != nil {
		t.Fatalf("%s: the job sends credentials, which the compose stack does not give Prometheus", scrapeFile)
	}
	return scrape.ScrapeConfigs[0].StaticConfigs[0].Targets[0]
}

// interpolate expands ${NAME} and ${NAME:-default} as Compose does, from
// shell.
func interpolate(v string, shell map[string]string) string {
	return regexp.MustCompile(`\$\{(\w+)(?::-([^}]*))?\}`).ReplaceAllStringFunc(v, func(ref string) string {
		m := regexp.MustCompile(`\$\{(\w+)(?::-([^}]*))?\}`).FindStringSubmatch(ref)
		if got := shell[m[1]]; got != "" {
			return got
		}
		return m[2]
	})
}

// serveAsCompose serves the gateway of s on two loopback listeners, the
// client routes and, as the binary does with ADMIN_LISTEN_ADDR, the admin
// routes; it returns their URLs. Redis is not opened (the metrics do not
// need it), and with no provider key the simulated model answers.
func serveAsCompose(t *testing.T, s settings.Settings) (client, admin string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, []string{"simulated"})
	opts := proxy.Options{Metrics: m, Gatherer: reg}
	if s.Simulated {
		opts.Transport = &sim.Transport{Handler: sim.Handler(), Next: http.DefaultTransport}
	}
	h, err := proxy.New(s.Proxy, opts)
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	t.Cleanup(h.Close)
	c, a := httptest.NewServer(h), httptest.NewServer(h.Admin())
	t.Cleanup(c.Close)
	t.Cleanup(a.Close)
	return c.URL, a.URL
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
