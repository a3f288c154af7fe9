package redact

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// adversarial are texts of about n bytes built to make a redactor work
// hardest per byte: long runs of backslashes (each may start an escape),
// escapes that almost spell a key's character, and a key's spellings cut
// one character short, over and over.
func adversarial(n int) map[string]string {
	near := func(s string) string { return strings.Repeat(s[:len(s)-1]+"!", n/len(s)+1)[:n] }
	return map[string]string{
		"plain":           strings.Repeat("The quick brown fox jumps over the lazy dog. ", n/45+1)[:n],
		"backslashes":     strings.Repeat(`\`, n),
		"escaped u":       strings.Repeat(`\\\\\u00`, n/8+1)[:n],
		"near keys":       near(skKey),
		"near escaped":    near(unicodeEscaped(oddKey, false)),
		"near percent":    near(encoded(skKey)[0]),
		"near base64":     near(encoded(skKey)[2]),
		"repeated prefix": strings.Repeat("sk-live-", n/8+1)[:n],
	}
}

// BenchmarkRedactorAdversarial measures each adversarial text, whole and
// as a stream, at 256 KiB and 1 MiB (go test -run XXX -bench Adversarial
// ./internal/redact): the CPU time per byte (cpu-ns/B, the process's
// user and system time, which a loaded machine does not inflate as it
// does the wall time of ns/op) must not grow with the text.
func BenchmarkRedactorAdversarial(b *testing.B) {
	r := New(skKey, gskKey, bareKey, oddKey, "redis-password-0123456789")
	for _, size := range []int{256 << 10, 1 << 20} {
		for name, in := range adversarial(size) {
			name = fmt.Sprintf("%s/%dKiB", strings.ReplaceAll(name, " ", "_"), size>>10)
			b.Run(name+"/whole", func(b *testing.B) {
				cpuPerByte(b, len(in), func() { _ = r.String(in) })
			})
			b.Run(name+"/stream", func(b *testing.B) {
				cpuPerByte(b, len(in), func() { _, _ = io.Copy(io.Discard, NewReader(r, strings.NewReader(in))) })
			})
		}
	}
}

// cpuPerByte runs f b.N times and reports the CPU time it took per byte
// of an input of n bytes.
func cpuPerByte(b *testing.B, n int, f func()) {
	b.SetBytes(int64(n))
	before := cpuTime()
	for b.Loop() {
		f()
	}
	b.ReportMetric(float64(cpuTime()-before)/float64(b.N)/float64(n), "cpu-ns/B")
}

// cpuTime is the process's user and system time so far.
func cpuTime() time.Duration {
	var u syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// The regular expressions Patterns replaced, as the reference it is
// fuzzed against.
var (
	apiKeyRE = regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{8,}`)
	bearerRE = regexp.MustCompile(`(?i)\b(bearer)\s+[A-Za-z0-9._~+/-]+=*`)
)

// FuzzPatterns compares Patterns, a scan in linear time, with the
// regular expressions it replaced.
func FuzzPatterns(f *testing.F) {
	for _, s := range append(spellings, "Authorization: Bearer abc.def-ghi==\"}", "bearer\t\n tok", "xbearer tok", "sk-12345678 sk-1234567", "_sk-abcdefgh", "-sk-abcdefgh-sk-x", "BEARER  =", "sk-sk-sk-abcdefgh") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := apiKeyRE.ReplaceAllString(bearerRE.ReplaceAllString(s, "${1} "+Marker), Marker)
		if got := Patterns(s); got != want {
			t.Fatalf("Patterns(%q) = %q, the expressions give %q", s, got, want)
		}
	})
}
