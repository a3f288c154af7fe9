package proxy

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/phasegate/phasegate/chat"
)

// maxCodings bounds the content codings of one upstream answer that are
// undone: more than two layers serve no purpose but to cost CPU.
const maxCodings = 2

// decodingTransport undoes the content codings of every upstream answer
// before anything reads it: the gateway redacts what it relays and reads
// what it judges, and a compressed body would pass both unread. The
// transport below already undoes the gzip it asks for; this undoes an
// upstream's coding it did not ask for (deflate, or gzip where it asked
// none), so that an error body compressed unasked is redacted as any
// other, never relayed still compressed with its Content-Encoding
// dropped. A coding it cannot undo (br, zstd, compress) is a 502 that
// says so; the body is not relayed. FORWARD_HEADERS cannot name
// Accept-Encoding, so a client never chooses the coding.
type decodingTransport struct{ next http.RoundTripper }

func (t decodingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if err := decodeCodings(resp); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// decodeCodings makes resp's body its decoded bytes, without a
// Content-Encoding or a Content-Length, when it has codings other than
// identity; a bodiless answer only loses the header.
func decodeCodings(resp *http.Response) error {
	codings := contentCodings(resp.Header.Values("Content-Encoding"))
	resp.Header.Del("Content-Encoding")
	if len(codings) == 0 || bodiless(resp) {
		return nil
	}
	if len(codings) > maxCodings {
		return codingError(strings.Join(codings, ", "), fmt.Sprintf("more than %d codings", maxCodings))
	}
	var body io.Reader = resp.Body
	for i := len(codings) - 1; i >= 0; i-- {
		open, ok := decoders[codings[i]]
		if !ok {
			return codingError(codings[i], "it reads gzip and deflate")
		}
		body = &decodedReader{src: body, open: open}
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{body, resp.Body}
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	resp.Uncompressed = true
	return nil
}

// contentCodings returns the codings of Content-Encoding values, in the
// order they were applied, in lower case, identity left out.
func contentCodings(values []string) []string {
	var out []string
	for _, v := range values {
		for _, c := range strings.Split(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				out = append(out, c)
			}
		}
	}
	return out
}

// decoders open a reader of each coding the gateway undoes.
var decoders = map[string]func(io.Reader) (io.Reader, error){
	"gzip":    func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) },
	"x-gzip":  func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) },
	"deflate": openDeflate,
}

// openDeflate reads deflate as RFC 9110 defines it, zlib's format, or as
// some servers send it, the raw deflate stream (told apart by zlib's
// two-byte header, whose check bits no raw stream of that start has).
func openDeflate(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	head, err := br.Peek(2)
	if err != nil && len(head) < 2 {
		return nil, err
	}
	if head[0]&0x0f == 8 && (uint16(head[0])<<8|uint16(head[1]))%31 == 0 {
		return zlib.NewReader(br)
	}
	return flate.NewReader(br), nil
}

// decodedReader decodes src, opening its decoder at the first read (a
// decoder reads its header then, not while the answer's headers are
// being handled, so a stream's first-byte wait stays the watchdog's). A
// body that does not decode is a 502 that says so.
type decodedReader struct {
	src  io.Reader
	open func(io.Reader) (io.Reader, error)
	r    io.Reader
	err  error
}

func (d *decodedReader) Read(p []byte) (int, error) {
	if d.r == nil && d.err == nil {
		d.r, d.err = d.open(d.src)
		d.err = corrupt(d.err)
	}
	if d.err != nil {
		return 0, d.err
	}
	n, err := d.r.Read(p)
	return n, corrupt(err)
}

// corrupt turns a decoder's verdict on its input into the gateway's 502;
// any other error (the connection's) is kept.
func corrupt(err error) error {
	var fe flate.CorruptInputError
	if errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, zlib.ErrHeader) ||
		errors.Is(err, zlib.ErrChecksum) || errors.Is(err, zlib.ErrDictionary) || errors.As(err, &fe) {
		return fmt.Errorf("%w: %w", &chat.Error{Status: http.StatusBadGateway, Type: chat.TypeUpstream, Code: "upstream_content_encoding",
			Message: "the upstream's compressed answer does not decode"}, err)
	}
	return err
}

// codingError is the 502 of an answer in a coding the gateway does not
// undo.
func codingError(coding, why string) error {
	return &chat.Error{Status: http.StatusBadGateway, Type: chat.TypeUpstream, Code: "upstream_content_encoding",
		Message: fmt.Sprintf("the upstream answered in content coding %.40q, which the gateway cannot decode to check what it relays (%s)", coding, why)}
}
