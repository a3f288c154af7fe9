package redact

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// parts is a source that gives out one part per Read.
type parts struct{ p []string }

func (s *parts) Read(b []byte) (int, error) {
	for len(s.p) > 0 && s.p[0] == "" {
		s.p = s.p[1:]
	}
	if len(s.p) == 0 {
		return 0, io.EOF
	}
	n := copy(b, s.p[0])
	s.p[0] = s.p[0][n:]
	return n, nil
}

// readAll reads z to its end, checking after each Read that it holds no
// more than MaxHold bytes back.
func readAll(t testing.TB, z *Reader) string {
	t.Helper()
	var out bytes.Buffer
	b := make([]byte, 4096)
	for {
		n, err := z.Read(b)
		out.Write(b[:n])
		if len(z.in) > z.r.MaxHold() {
			t.Fatalf("holds %d bytes, more than MaxHold %d", len(z.in), z.r.MaxHold())
		}
		if errors.Is(err, io.EOF) {
			return out.String()
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
	}
}

// spellings are texts that hold a secret of New(skKey, gskKey, bareKey,
// oddKey, shortKey) in one of its spellings.
var spellings = []string{
	"Incorrect API key provided: " + skKey + ".",
	"key=" + gskKey,
	`{"error":{"message":"bad key ` + bareKey + `"}}`,
	"got " + oddKey + " then",
	"password " + shortKey + "\n\n",
	`{"message":"` + jsonEscaped(oddKey) + `"}`,
	unicodeEscaped(skKey, false),
	unicodeEscaped(gskKey, true),
	"x " + unicodeEscaped(oddKey, false) + " y",
	strings.ReplaceAll(unicodeEscaped(oddKey, false), `\`, `\\`),
	`a \u0073` + skKey[1:],
	strings.ReplaceAll(oddKey, "/", `\/`),
	"key ending " + strings.TrimPrefix(skKey, "sk-live-") + " ok",
	"GET /x?key=p%3Cw%3Ed%26%2B%2F-x%22y%270123456789 HTTP/1.1",
	"data: {\"k\":\"" + skKey + "\"}\n\ndata: " + gskKey + "\n\n",
}

func TestReaderRedactsSecretsCutAnywhere(t *testing.T) {
	t.Parallel()
	r := New(skKey, gskKey, bareKey, oddKey, shortKey)
	for _, in := range spellings {
		want := r.String(in)
		if !strings.Contains(want, Marker) {
			t.Fatalf("String(%q) = %q, holds no %s", in, want, Marker)
		}
		for i := 0; i <= len(in); i++ {
			if got := readAll(t, NewReader(r, &parts{[]string{in[:i], in[i:]}})); got != want {
				t.Fatalf("%q cut at %d: got %q, want %q", in, i, got, want)
			}
			for j := i; j <= len(in); j++ {
				if got := readAll(t, NewReader(r, &parts{[]string{in[:i], in[i:j], in[j:]}})); got != want {
					t.Fatalf("%q cut at %d and %d: got %q, want %q", in, i, j, got, want)
				}
			}
		}
		bytewise := make([]string, len(in))
		for i := range in {
			bytewise[i] = in[i : i+1]
		}
		if got := readAll(t, NewReader(r, &parts{bytewise})); got != want {
			t.Fatalf("%q a byte at a time: got %q, want %q", in, got, want)
		}
	}
}

// TestReaderReleasesEventsAtOnce reads from a pipe whose writer waits: an
// SSE event with no partial secret in it comes out whole before the next
// write; one that ends with the start of a secret comes out without it.
func TestReaderReleasesEventsAtOnce(t *testing.T) {
	t.Parallel()
	r := New(skKey, gskKey)
	pr, pw := io.Pipe()
	defer pr.Close()
	z := NewReader(r, pr)
	next := make(chan string, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for s := range next {
			if _, err := pw.Write([]byte(s)); err != nil {
				return
			}
		}
		pw.Close()
	}()
	defer func() { <-done }()
	defer close(next)
	b := make([]byte, 4096)
	read := func(send, want string) {
		t.Helper()
		next <- send
		n, err := z.Read(b)
		if err != nil || string(b[:n]) != want {
			t.Fatalf("after %q: read %q, %v; want %q", send, b[:n], err, want)
		}
	}
	read("data: {\"x\":\"s\"}\n\n", "data: {\"x\":\"s\"}\n\n")
	read("data: {\"k\":\"sk-liv", "data: {\"k\":\"")
	next <- "e-0123"
	read(skKey[len("sk-live-0123"):]+"\"}\n\n", Marker+"\"}\n\n")
}

// FuzzReader checks that the Reader gives out what Bytes makes of the
// whole text, however it is cut, for texts the patterns cannot match (on
// those the patterns are best effort across reads).
func FuzzReader(f *testing.F) {
	r := New(skKey, gskKey, bareKey, oddKey, shortKey)
	for _, s := range spellings {
		f.Add([]byte(s), uint64(7))
	}
	f.Add([]byte(strings.Repeat(`\\`, 200)+`\u00`), uint64(1))
	f.Add([]byte("plain text\n\n"), uint64(2))
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		if mayMatch(string(in)) {
			return
		}
		rnd := rand.New(rand.NewPCG(seed, seed))
		var p []string
		for rest := string(in); len(rest) > 0; {
			n := 1 + rnd.IntN(len(rest))
			p, rest = append(p, rest[:n]), rest[n:]
		}
		if got, want := readAll(t, NewReader(r, &parts{p})), string(r.Bytes(in)); got != want {
			t.Fatalf("cut as %q: got %q, want %q", p, got, want)
		}
	})
}

func TestReaderDropsHeldBytesOnFailure(t *testing.T) {
	t.Parallel()
	boom := errors.New("connection reset")
	z := NewReader(New(skKey), io.MultiReader(strings.NewReader("ok sk-live-0123"), iotestErr{boom}))
	got, err := io.ReadAll(z)
	if !errors.Is(err, boom) || string(got) != "ok " {
		t.Errorf("got %q, %v; want %q, %v", got, err, "ok ", boom)
	}
}

type iotestErr struct{ err error }

func (e iotestErr) Read([]byte) (int, error) { return 0, e.err }

func TestReaderHoldsNothingWithoutSecrets(t *testing.T) {
	t.Parallel()
	in := "data: sk-abcdefgh123 \\\\"
	if got := readAll(t, NewReader(nil, &parts{[]string{in}})); got != Patterns(in) {
		t.Errorf("got %q, want %q", got, Patterns(in))
	}
}
