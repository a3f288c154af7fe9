package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

// flushRecorder counts flushes and what was written before each.
type flushRecorder struct {
	*httptest.ResponseRecorder
	flushed []string
}

func (f *flushRecorder) Flush() {
	f.flushed = append(f.flushed, f.Body.String())
	f.ResponseRecorder.Flush()
}

func TestSSEWriter(t *testing.T) {
	tests := []struct {
		name  string
		write func(s *sseWriter) error
		want  string
	}{
		{name: "one event", write: func(s *sseWriter) error { return s.data([]byte(`{"a":1}`)) }, want: "data: {\"a\":1}\n\n"},
		{name: "several data lines", write: func(s *sseWriter) error { return s.data([]byte("{\n\"a\":1\n}")) }, want: "data: {\ndata: \"a\":1\ndata: }\n\n"},
		{name: "done", write: func(s *sseWriter) error { return s.data([]byte("[DONE]")) }, want: "data: [DONE]\n\n"},
		{name: "comment", write: func(s *sseWriter) error { return s.comment([]byte(": keep-alive")) }, want: ": keep-alive\n\n"},
		{name: "events in order, the buffer reused", write: func(s *sseWriter) error {
			if err := s.data([]byte(strings.Repeat("x", 100))); err != nil {
				return err
			}
			return s.data([]byte("y"))
		}, want: "data: " + strings.Repeat("x", 100) + "\n\ndata: y\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &flushRecorder{ResponseRecorder: httptest.NewRecorder()}
			s := newSSEWriter(rec)
			if err := tt.write(s); err != nil {
				t.Fatal(err)
			}
			if got := rec.Body.String(); got != tt.want {
				t.Errorf("wrote %q, want %q", got, tt.want)
			}
			if len(rec.flushed) == 0 || rec.flushed[len(rec.flushed)-1] != tt.want {
				t.Errorf("flushes saw %q, want the last to follow the last write", rec.flushed)
			}
		})
	}
}

// TestSSEWriterFlushesEveryEvent checks each event is flushed on its own.
func TestSSEWriterFlushesEveryEvent(t *testing.T) {
	rec := &flushRecorder{ResponseRecorder: httptest.NewRecorder()}
	s := newSSEWriter(rec)
	var want []string
	var body string
	for _, ev := range []string{"a", "b", "c"} {
		if err := s.data([]byte(ev)); err != nil {
			t.Fatal(err)
		}
		body += "data: " + ev + "\n\n"
		want = append(want, body)
	}
	if diff := cmp.Diff(want, rec.flushed); diff != "" {
		t.Errorf("body at each flush (-want +got):\n%s", diff)
	}
}

func TestSSEWriterStart(t *testing.T) {
	rec := httptest.NewRecorder()
	s := newSSEWriter(rec)
	s.start(http.Header{
		"Content-Length":               {"123"},
		"Content-Encoding":             {"gzip"},
		"Content-Type":                 {"text/event-stream"},
		"X-Ratelimit-Remaining-Tokens": {"7"},
	})
	s.start(http.Header{"X-Second": {"ignored"}})
	if err := s.data([]byte("x")); err != nil {
		t.Fatal(err)
	}
	want := http.Header{
		"Content-Type":                 {"text/event-stream; charset=utf-8"},
		"Cache-Control":                {"no-cache"},
		"X-Accel-Buffering":            {"no"},
		"X-Ratelimit-Remaining-Tokens": {"7"},
	}
	if diff := cmp.Diff(want, rec.Result().Header); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	if rec.Code != http.StatusOK {
		t.Errorf("status = %d, want 200", rec.Code)
	}
}

// failingWriter is a client that went away.
type failingWriter struct{ httptest.ResponseRecorder }

func (*failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestSSEWriterReportsAGoneClient(t *testing.T) {
	s := newSSEWriter(&failingWriter{*httptest.NewRecorder()})
	if err := s.data([]byte("x")); err == nil {
		t.Error("data to a gone client: got nil error")
	}
	if err := s.comment([]byte(": keep-alive")); err == nil {
		t.Error("comment to a gone client: got nil error")
	}
}

// TestCommentTap checks every comment line is reported once, whole, and
// nothing else, however the stream is split into reads, and that the
// bytes pass through unchanged.
func TestCommentTap(t *testing.T) {
	tests := []struct {
		name   string
		stream string
		want   []string
	}{
		{name: "none", stream: "data: {\"a\":\":b\"}\n\ndata: [DONE]\n\n"},
		{name: "keep-alives", stream: ": keep-alive\n\ndata: x\n\n: keep-alive\n\n", want: []string{": keep-alive", ": keep-alive"}},
		{name: "first line", stream: ":hi\ndata: x\n\n", want: []string{":hi"}},
		{name: "CRLF", stream: ": a\r\n\r\ndata: x\r\n\r\n: b\r\n", want: []string{": a", ": b"}},
		{name: "CR", stream: ": a\r\rdata: x\r\r", want: []string{": a"}},
		{name: "colon inside a data line", stream: "data: :not a comment\n\nevent: x:y\n\n"},
		{name: "long comment cut at 1 KiB", stream: ":" + strings.Repeat("k", 2000) + "\n", want: []string{":" + strings.Repeat("k", 1023)}},
		{name: "unterminated comment at the end", stream: "data: x\n\n: trailing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			readers := map[string]func(io.Reader) io.Reader{
				"whole":          func(r io.Reader) io.Reader { return r },
				"byte by byte":   iotest.OneByteReader,
				"half at a time": iotest.HalfReader,
			}
			for rname, wrap := range readers {
				var got []string
				tap := &commentTap{r: wrap(strings.NewReader(tt.stream)), onComment: func(b []byte) { got = append(got, string(b)) }}
				passed, err := io.ReadAll(tap)
				if err != nil {
					t.Fatalf("%s: %v", rname, err)
				}
				if string(passed) != tt.stream {
					t.Errorf("%s: passed %q, want %q", rname, passed, tt.stream)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("%s: comments (-want +got):\n%s", rname, diff)
				}
			}
		})
	}
}

func TestForwardHeader(t *testing.T) {
	in := http.Header{"Accept-Encoding": {"gzip"}, "Host": {"gw"}, "Connection": {"close, X-Stainless-Os"}, "X-Project-Id": {"p"}, "User-Agent": {"ua"},
		"Cookie": {"c=1"}, "Api-Key": {"k"}, "Proxy-Authorization": {"Basic eA=="}, "X-Stainless-Lang": {"js"}, "X-Stainless-Os": {"hop"},
		"Openai-Organization": {"org"}, "Authorization": {"Bearer sk"}, "Keep-Alive": {"1"}, "Content-Length": {"10"}}
	got := forwardHeader(in, nil)
	want := http.Header{"User-Agent": {"ua"}, "X-Stainless-Lang": {"js"}, "Openai-Organization": {"org"}, "Authorization": {"Bearer sk"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("forwarded (-want +got):\n%s", diff)
	}
	if in.Get("Accept-Encoding") == "" {
		t.Error("forwardHeader changed its input")
	}
}

func TestResponseHeader(t *testing.T) {
	in := http.Header{"X-Request-Id": {"req_up"}, "Connection": {"X-H"}, "X-H": {"1"}, "Content-Length": {"5"}, "X-Ratelimit-Limit-Tokens": {"9"},
		"Set-Cookie": {"s=1"}, "Location": {"http://x/"}, "Openai-Organization": {"org-op"}, "Cf-Ray": {"1"}}
	got := responseHeader(in)
	want := http.Header{"X-Upstream-Request-Id": {"req_up"}, "X-Ratelimit-Limit-Tokens": {"9"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("passed on (-want +got):\n%s", diff)
	}
	if !bytes.Equal([]byte(in.Get("X-Request-Id")), []byte("req_up")) {
		t.Error("responseHeader changed its input")
	}
}

// referenceComments is the plain byte-by-byte reading of SSE comment
// lines that commentTap must match: a line starting with ':' up to its
// '\r' or '\n', kept to 1 KiB.
func referenceComments(stream []byte) []string {
	var out []string
	lineStart, in := true, false
	var cur []byte
	for _, c := range stream {
		switch {
		case in:
			if c == '\n' || c == '\r' {
				out = append(out, string(cur))
				in, lineStart = false, true
				continue
			}
			if len(cur) < 1024 {
				cur = append(cur, c)
			}
		case lineStart && c == ':':
			in, lineStart, cur = true, false, []byte{':'}
		default:
			lineStart = c == '\n' || c == '\r'
		}
	}
	return out
}

// chunkReader returns its data in reads of the given sizes, cycling.
type chunkReader struct {
	data  []byte
	sizes []byte
	i     int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(r.sizes) > 0 {
		n = int(r.sizes[r.i%len(r.sizes)])%64 + 1
		r.i++
	}
	n = min(n, len(p), len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// FuzzCommentTap checks commentTap reports exactly the comments of the
// reference reading, however the stream is split into reads.
func FuzzCommentTap(f *testing.F) {
	f.Add([]byte(": keep-alive\n\ndata: {\"a\":\":\"}\n\n:x\r\n\r:y\rdata: z\n"), []byte{3, 1, 7})
	f.Add([]byte(":"+strings.Repeat("k", 1500)+"\n:"), []byte{63})
	f.Fuzz(func(t *testing.T, stream, sizes []byte) {
		var got []string
		tap := &commentTap{r: &chunkReader{data: stream, sizes: sizes}, onComment: func(b []byte) { got = append(got, string(b)) }}
		passed, err := io.ReadAll(tap)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(passed, stream) {
			t.Fatalf("passed %q, want %q", passed, stream)
		}
		if diff := cmp.Diff(referenceComments(stream), got); diff != "" {
			t.Fatalf("comments of %q split by %v (-want +got):\n%s", stream, sizes, diff)
		}
	})
}

// data writes one event whose data is b (see appendData).
func (s *sseWriter) data(b []byte) error {
	s.start(nil)
	s.buf = appendData(s.buf, b)
	return s.queued()
}
