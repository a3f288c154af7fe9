package main

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLinksNoTestPackages checks the gateway binary links neither testing
// nor net/http/httptest: test doubles (proxy/proxytest) stay in tests, and
// the simulated model the binary serves comes from the product package sim.
// A failure names each package that imports one of them.
func TestLinksNoTestPackages(t *testing.T) {
	t.Parallel()
	// go test puts the go command it runs under first on PATH.
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{} // every linked package, with what it imports
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		imports[fields[0]] = fields[1:]
	}
	if _, ok := imports["github.com/phasegate/phasegate/proxy"]; !ok {
		t.Fatalf("go list does not list the gateway's own packages:\n%s", out)
	}
	for _, bad := range []string{"testing", "net/http/httptest"} {
		if _, linked := imports[bad]; !linked {
			continue
		}
		var by []string
		for pkg, imps := range imports {
			for _, imp := range imps {
				if imp == bad {
					by = append(by, pkg)
				}
			}
		}
		slices.Sort(by)
		t.Errorf("phasegate links %s, imported by %s", bad, strings.Join(by, ", "))
	}
}
