package proxy

import "testing"

// A path normal says is normal is the path removeDotSegments makes of it,
// and one it makes is normal: the short way and the long agree.
func FuzzNormal(f *testing.F) {
	for _, p := range []string{"/", "/v1/chat/completions", "/v1/chat/", "//v1", "/v1/./x", "/v1/../x", "/v1/.", "/v1/..", "/.", "", "v1", "/v1//x", "/a/b/"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got := removeDotSegments(p)
		if normal(p) && got != p {
			t.Fatalf("normal(%q), but removeDotSegments makes %q", p, got)
		}
		if !normal(got) {
			t.Fatalf("removeDotSegments(%q) = %q, which normal says is not", p, got)
		}
	})
}
