package envelope

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// A phase schema is the one document it was given: a "$ref" to a file
// (which would compile, were it read) or to an http URL is refused, and
// the server the URL names is never asked.
func TestNewSetRefusesExternalRefs(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		_, _ = w.Write([]byte(`{"type":"object"}`))
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "data.json")
	if err := os.WriteFile(file, []byte(`{"type":"object"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, ref := range map[string]string{"file": "file://" + file, "path": file, "http": srv.URL + "/data.json"} {
		src := []byte(`{"$ref":"` + ref + `"}`)
		if _, err := NewSet(map[Phase][]byte{"review": src}); err == nil {
			t.Errorf("%s: NewSet accepted a $ref to %s", name, ref)
		}
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the server of an http $ref was asked %d times, want never", n)
	}
}
