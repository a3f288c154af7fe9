// Package schematest serves the tests of what compiles JSON Schemas: the
// external references a schema must not make the gateway follow.
package schematest

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// ExternalRefs returns "$ref" targets outside a schema's own document, by
// kind: a file:// URL and a bare path to a file holding doc (which would
// compile, were it read), and an http URL on a loopback server that
// answers doc. asked tells how many requests that server got; a schema
// compiled right never asks it. Both end with the test.
func ExternalRefs(tb testing.TB, doc string) (refs map[string]string, asked func() int) {
	tb.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		_, _ = w.Write([]byte(doc))
	}))
	tb.Cleanup(srv.Close)
	file := filepath.Join(tb.TempDir(), "schema.json")
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		tb.Fatal(err)
	}
	refs = map[string]string{"file": "file://" + file, "path": file, "http": srv.URL + "/schema.json"}
	return refs, func() int { return int(n.Load()) }
}
