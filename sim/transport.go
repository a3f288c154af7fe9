package sim

import (
	"context"
	"io"
	"net/http"
	"sync"
)

// BaseURL is the base URL of the in-process simulated models. Its host is
// in the reserved .invalid domain, so it can never reach a network.
const BaseURL = "http://" + host + "/v1"

const host = "phasegate-sim.invalid"

// Transport is an http.RoundTripper that serves requests for BaseURL's
// host in process and sends every other request on. The simulated models
// thus need no listener, no port and no network. The zero Transport
// serves the simulated models and sends the rest through
// http.DefaultTransport.
type Transport struct {
	// Handler serves the requests for BaseURL's host; nil means Handler().
	Handler http.Handler
	// Next carries every other request; nil means http.DefaultTransport.
	Next http.RoundTripper
}

// RoundTrip runs the handler in a goroutine that writes into a pipe; the
// goroutine ends when the handler returns, which it does once the reply is
// written, the request's context ends, or the reader closes the body.
// As with a real server, the handler's request context ends when the
// client closes the body, so a handler holding a reply open sees it leave.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != host {
		next := t.Next
		if next == nil {
			next = http.DefaultTransport
		}
		return next.RoundTrip(req)
	}
	h := t.Handler
	if h == nil {
		h = Handler()
	}
	ctx, cancel := context.WithCancel(req.Context())
	sreq := req.WithContext(ctx)
	pr, pw := io.Pipe()
	w := &pipeResponse{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		defer cancel()
		if req.Body != nil {
			defer req.Body.Close() // a RoundTripper closes the request body
		}
		defer func() {
			if v := recover(); v != nil {
				// http.ErrAbortHandler or a bug: the client sees a cut body.
				pw.CloseWithError(io.ErrUnexpectedEOF)
				w.WriteHeader(http.StatusOK)
				return
			}
			w.WriteHeader(http.StatusOK)
			pw.Close()
		}()
		h.ServeHTTP(w, sreq)
	}()
	select {
	case <-w.ready:
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	return &http.Response{
		Status: http.StatusText(w.status), StatusCode: w.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, Body: &pipeBody{PipeReader: pr, cancel: cancel}, ContentLength: -1, Request: req,
	}, nil
}

// pipeBody is the body of an in-process reply; closing it ends the
// handler's request context.
type pipeBody struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (b *pipeBody) Close() error {
	b.cancel()
	return b.PipeReader.Close()
}

// pipeResponse is the http.ResponseWriter of an in-process reply.
type pipeResponse struct {
	header http.Header
	sent   http.Header
	pw     *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
	status int
}

func (w *pipeResponse) Header() http.Header { return w.header }

func (w *pipeResponse) WriteHeader(status int) {
	w.once.Do(func() {
		w.status = status
		w.sent = w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeResponse) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(p)
}

// Flush does nothing: every Write already reaches the reader.
func (w *pipeResponse) Flush() {}
