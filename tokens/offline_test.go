package tokens

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/phasegate/phasegate/chat"
)

const offlineChild = "PHASEGATE_TOKENS_OFFLINE_CHILD"

type noNetwork struct{}

func (noNetwork) RoundTrip(r *http.Request) (*http.Response, error) {
	return nil, errors.New("network used: " + r.URL.String())
}

// TestOfflineStart starts a new process, so that no encoding is loaded
// yet, with an empty TIKTOKEN_CACHE_DIR and TMPDIR, proxies that refuse
// connections and, where unshare(1) can, no network at all. The child
// builds a Counter and counts; the parent checks it did and that the cache
// directories are still empty.
func TestOfflineStart(t *testing.T) {
	if os.Getenv(offlineChild) == "1" {
		offlineChildMain(t)
		return
	}
	cacheDir, tmpDir := t.TempDir(), t.TempDir()
	args := []string{os.Args[0], "-test.run=^TestOfflineStart$", "-test.v"}
	if exec.Command("unshare", "-rn", "true").Run() == nil {
		args = append([]string{"unshare", "-rn"}, args...)
		t.Log("child runs without a network (unshare -rn)")
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(),
		offlineChild+"=1",
		"TIKTOKEN_CACHE_DIR="+cacheDir,
		"DATA_GYM_CACHE_DIR="+cacheDir,
		"TMPDIR="+tmpDir,
		"HTTP_PROXY=http://127.0.0.1:1", "HTTPS_PROXY=http://127.0.0.1:1",
		"http_proxy=http://127.0.0.1:1", "https_proxy=http://127.0.0.1:1",
		"NO_PROXY=", "no_proxy=",
	)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "offline count ok") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "start-up:") {
			t.Log(strings.TrimSpace(line))
		}
	}
	for _, dir := range []string{cacheDir, tmpDir} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 0 {
			t.Errorf("%s: got %d entries, want it empty", dir, len(entries))
		}
	}
}

func offlineChildMain(t *testing.T) {
	http.DefaultTransport = noNetwork{}
	encodings.mu.Lock()
	loaded := len(encodings.m)
	encodings.mu.Unlock()
	if loaded != 0 {
		t.Fatalf("got %d encodings loaded before New, want a fresh process", loaded)
	}
	start := time.Now()
	c, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("start-up: New(DefaultConfig()) loaded %d encodings in %v", len(encodings.m), time.Since(start))
	var msgs []chat.Message
	if err := json.Unmarshal([]byte(cookbookMessages), &msgs); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		model string
		want  int
	}{{"gpt-4o", 124}, {"gpt-4", 129}} {
		f, err := c.Fit(tt.model, msgs, nil, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if f.PromptTokens != tt.want {
			t.Fatalf("%s: got %d tokens, want %d", tt.model, f.PromptTokens, tt.want)
		}
	}
	t.Log("offline count ok")
}
