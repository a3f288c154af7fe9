package deploy_test

import (
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const composeFile = "compose.yaml"

// composeDoc is the part of the compose file the stack's test reads.
type composeDoc struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       map[string]any    `yaml:"build"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		Ports       []string          `yaml:"ports"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// mounted returns the path in the container that src (relative to this
// directory) is mounted at by service's volumes, "" when it is not.
func mounted(volumes []string, src string) string {
	for _, v := range volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && filepath.Clean(parts[0]) == filepath.Clean(src) {
			return parts[1]
		}
	}
	return ""
}

// TestStack checks what can be checked of the stack without a container
// engine (CI validates the compose file with docker-compose and the scrape
// config with promtool): every service has a health check, every image
// is pinned to a version, every port is published on loopback unless
// PUBLISH_ADDR says otherwise, Prometheus gets the shipped scrape config
// and rules and scrapes the gateway service at its admin port, and Grafana's
// provisioning names that Prometheus and loads the shipped dashboard.
func TestStack(t *testing.T) {
	var c composeDoc
	readYAML(t, composeFile, &c)
	for _, name := range []string{"gateway", "redis", "prometheus", "grafana"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("%s: no service %s", composeFile, name)
		}
	}
	pinned := regexp.MustCompile(`:v?\d+\.\d+\.\d+[\w.-]*(@sha256:[0-9a-f]{64})?$`)
	for name, s := range c.Services {
		if len(s.Healthcheck.Test) < 2 || s.Healthcheck.Test[0] != "CMD" {
			t.Errorf("service %s: health check %v, want a CMD", name, s.Healthcheck.Test)
		}
		if s.Build == nil && !pinned.MatchString(s.Image) {
			t.Errorf("service %s: image %q is not pinned to a version", name, s.Image)
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "${PUBLISH_ADDR:-127.0.0.1}:") {
				t.Errorf("service %s: port %q is not published on loopback by default", name, p)
			}
		}
	}

	gw := c.Services["gateway"]
	if !slices.Equal(gw.Healthcheck.Test, []string{"CMD", "/phasegate", "healthcheck"}) {
		t.Errorf("gateway health check %v, want the binary's own", gw.Healthcheck.Test)
	}
	dockerfile, err := os.ReadFile(filepath.Join(gw.Build["context"].(string), "Dockerfile"))
	if err != nil {
		t.Fatalf("the gateway's build context: %v", err)
	}
	if !strings.Contains(string(dockerfile), `CMD ["/phasegate", "healthcheck"]`) {
		t.Errorf("the Dockerfile has no HEALTHCHECK running phasegate healthcheck")
	}
	// Prometheus scrapes the admin listener, which serves /metrics
	// whether client keys are set or not (TestStackMetricsWithClientKeys).
	_, gwPort, err := net.SplitHostPort(gw.Environment["ADMIN_LISTEN_ADDR"])
	if err != nil {
		t.Fatalf("gateway ADMIN_LISTEN_ADDR %q: %v", gw.Environment["ADMIN_LISTEN_ADDR"], err)
	}

	prom := c.Services["prometheus"]
	var configPath, promAddr string
	for _, arg := range prom.Command {
		if v, ok := strings.CutPrefix(arg, "--config.file="); ok {
			configPath = v
		}
		if v, ok := strings.CutPrefix(arg, "--web.listen-address="); ok {
			promAddr = v
		}
	}
	if got := mounted(prom.Volumes, scrapeFile); got == "" || got != configPath {
		t.Errorf("prometheus: %s is mounted at %q, its --config.file is %q", scrapeFile, got, configPath)
	}
	if got, want := mounted(prom.Volumes, rulesFile), path.Join(path.Dir(configPath), "rules.yml"); got != want {
		t.Errorf("prometheus: %s is mounted at %q, want %q beside the config", rulesFile, got, want)
	}
	var scrape struct {
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, scrapeFile, &scrape)
	if want := "gateway:" + gwPort; len(scrape.ScrapeConfigs) != 1 || len(scrape.ScrapeConfigs[0].StaticConfigs) != 1 ||
		!slices.Equal(scrape.ScrapeConfigs[0].StaticConfigs[0].Targets, []string{want}) {
		t.Errorf("%s scrapes %+v, want the gateway service's admin listener at %s", scrapeFile, scrape.ScrapeConfigs, want)
	}

	checkGrafana(t, c.Services["grafana"].Volumes, promAddr)
}

// checkGrafana checks Grafana's provisioning: the data source is the
// compose file's Prometheus, and the dashboard provider's path holds the
// shipped dashboard.
func checkGrafana(t *testing.T, volumes []string, promAddr string) {
	t.Helper()
	const provisioning = "grafana/provisioning"
	if got := mounted(volumes, provisioning); got != "/etc/grafana/provisioning" {
		t.Errorf("grafana: %s is mounted at %q, want /etc/grafana/provisioning", provisioning, got)
	}
	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name, Type, URL, UID string
			IsDefault            bool `yaml:"isDefault"`
		} `yaml:"datasources"`
	}
	readYAML(t, provisioning+"/datasources/prometheus.yaml", &ds)
	_, promPort, _ := net.SplitHostPort(promAddr)
	if len(ds.Datasources) != 1 || ds.APIVersion != 1 {
		t.Fatalf("grafana data sources %+v, want one, apiVersion 1", ds)
	}
	u, err := url.Parse(ds.Datasources[0].URL)
	if d := ds.Datasources[0]; err != nil || d.Type != "prometheus" || !d.IsDefault || u.Host != "prometheus:"+promPort {
		t.Errorf("grafana data source %+v, want the default, of type prometheus, at prometheus:%s", d, promPort)
	}
	var dash struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Type    string
			Options struct{ Path string }
		} `yaml:"providers"`
	}
	readYAML(t, provisioning+"/dashboards/phasegate.yaml", &dash)
	if len(dash.Providers) != 1 || dash.APIVersion != 1 || dash.Providers[0].Type != "file" {
		t.Fatalf("grafana dashboard providers %+v, want one of type file, apiVersion 1", dash)
	}
	at := mounted(volumes, dashboardFile)
	if dir := dash.Providers[0].Options.Path; at == "" || path.Dir(at) != dir {
		t.Errorf("grafana: %s is mounted at %q, not in the provider's path %q", dashboardFile, at, dir)
	}
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var board struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct{ Name, Type, Query any } `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &board); err != nil || board.UID != "phasegate" {
		t.Fatalf("%s: uid %q, %v", dashboardFile, board.UID, err)
	}
	if i := slices.IndexFunc(board.Templating.List, func(v struct{ Name, Type, Query any }) bool { return v.Name == "datasource" }); i < 0 ||
		board.Templating.List[i].Query != ds.Datasources[0].Type {
		t.Errorf("%s: its datasource variable does not choose among %s data sources", dashboardFile, ds.Datasources[0].Type)
	}
}
