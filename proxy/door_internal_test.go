package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy/proxytest"
	"github.com/phasegate/phasegate/sim"
)

// plainDoor is a door as a new API would add one, written against the
// seam alone: POST /v1/plain takes the prompt as the body, ?stream=true
// streams the answer's text as "event: text" events (its own wire, ending
// with "event: end"), a whole answer is {"text": ...}, and its errors are
// text/plain. Its label is the Messages door's, the door slot still free.
var plainDoor = door{
	name:  metrics.DoorMessages,
	paths: []string{"/plain"},
	read: func(h *Handler, w http.ResponseWriter, r *http.Request) (doorRequest, error) {
		prompt, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		body, _ := json.Marshal(map[string]any{"model": sim.Model, "stream": r.URL.Query().Get("stream") == "true",
			"messages": []map[string]string{{"role": "user", "content": string(prompt)}}})
		return &plainCall{body: body, key: h.streamKey(r, "plain:"+r.Header.Get("X-Request-Id")), owner: h.owner(r)}, nil
	},
	refusal: func(f protocol.Failure) (answer, bool) {
		return answer{status: f.Error.Status, header: http.Header{"Content-Type": {"text/plain"}}, body: []byte("plain: " + f.Error.Message)}, true
	},
	ending: func(dst []byte, _ int, e *chat.Error) []byte {
		return append(dst, "event: oops\ndata: "+e.Message+"\n\n"...)
	},
}

type plainCall struct {
	body       []byte
	key, owner string
}

func (c *plainCall) chatBody() []byte            { return c.body }
func (c *plainCall) logKey() (key, owner string) { return c.key, c.owner }
func (c *plainCall) close()                      {}

func (c *plainCall) sink(w http.ResponseWriter, ew eventWriter, _ bool) sink {
	if ew == nil {
		return &jsonSink{w: w, render: func(completion []byte) ([]byte, error) {
			var v struct {
				Choices []struct {
					Message struct {
						Content string `json:"content"`
					} `json:"message"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(completion, &v); err != nil || len(v.Choices) == 0 {
				return nil, err
			}
			return json.Marshal(map[string]string{"text": v.Choices[0].Message.Content})
		}}
	}
	return &plainSink{ew: ew}
}

// plainSink writes the plain door's events.
type plainSink struct {
	ew      eventWriter
	pending http.Header
}

func (s *plainSink) header(h http.Header) { s.pending = h }

func (s *plainSink) open() {
	if !s.ew.opened() {
		s.ew.open(s.pending)
	}
}

func (s *plainSink) chunk(data, _ []byte) error {
	s.open()
	c, err := chat.DecodeChunk(data)
	if err != nil || len(c.Choices) == 0 || c.Choices[0].Delta.Content == nil || *c.Choices[0].Delta.Content == "" {
		return nil
	}
	return s.ew.event([]byte("event: text\ndata: " + *c.Choices[0].Delta.Content + "\n\n"))
}

func (s *plainSink) done() error {
	s.open()
	if err := s.ew.event([]byte("event: end\ndata: {}\n\n")); err != nil {
		return err
	}
	return s.ew.flush()
}

func (s *plainSink) comment(line []byte) error { s.open(); return s.ew.comment(line) }
func (s *plainSink) finish() error             { return s.ew.flush() }
func (s *plainSink) flush() error              { return s.ew.flush() }
func (s *plainSink) committed() bool           { return s.ew.opened() }
func (s *plainSink) fail(e *chat.Error)        { _ = s.ew.event(plainDoor.ending(nil, 0, e)) }
func (s *plainSink) whole(int, http.Header, []byte) error {
	return nil
}

// plainGateway serves the chat door and the plain door in front of
// respond, with a client key, and returns its URL and metrics.
func plainGateway(t *testing.T, respond proxytest.Responder) (string, prometheus.Gatherer) {
	t.Helper()
	_, usrv := proxytest.NewServer(t, respond)
	reg := prometheus.NewRegistry()
	cfg := Config{Providers: []Provider{{Name: "deepseek", BaseURL: usrv.URL + "/v1", APIKey: "sk-up"}}, ClientKeys: []ClientKey{{Key: "key-a"}}}
	h, err := New(cfg, Options{Metrics: metrics.New(reg, []string{"deepseek"}), Gatherer: reg, doors: []*door{&chatDoor, &plainDoor}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, reg
}

func plainDo(t *testing.T, method, url, key, body string, header http.Header) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	for k, vs := range header {
		req.Header[k] = vs
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// A door written against the seam alone gets the whole pipeline: its
// stream in its own wire, its whole answer rendered, its errors in its own
// shape (the middleware's and the upstream's, before the first byte), its
// resumable stream logged and replayed byte for byte by the one wrapper,
// and its requests counted under its door label.
func TestDoorSeam(t *testing.T) {
	url, reg := plainGateway(t, proxytest.Simulated())
	resp, live := plainDo(t, http.MethodPost, url+"/v1/plain?stream=true", "key-a", "hi",
		http.Header{"X-Phasegate-Resumable": {"true"}, "X-Request-Id": {"plain-1"}})
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(live, "event: text\ndata: ") || !strings.HasSuffix(live, "event: end\ndata: {}\n\n") {
		t.Fatalf("stream: %d %q", resp.StatusCode, live)
	}
	resp, replay := plainDo(t, http.MethodGet, url+"/v1/phasegate/requests/plain:plain-1/events", "key-a", "", nil)
	if resp.StatusCode != http.StatusOK || replay != live {
		t.Errorf("replay: %d %q, want the live stream %q", resp.StatusCode, replay, live)
	}
	resp, whole := plainDo(t, http.MethodPost, url+"/v1/plain", "key-a", "hi", nil)
	var v struct{ Text string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(whole), &v) != nil || v.Text == "" {
		t.Errorf("whole answer: %d %q", resp.StatusCode, whole)
	}
	resp, refused := plainDo(t, http.MethodPost, url+"/v1/plain", "key-b", "hi", nil)
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Type") != "text/plain" || !strings.HasPrefix(refused, "plain: ") {
		t.Errorf("a wrong key: %d %s %q, want the plain door's 401", resp.StatusCode, resp.Header.Get("Content-Type"), refused)
	}
	resp, chatRefused := plainDo(t, http.MethodPost, url+"/v1/chat/completions", "key-b", "{}", nil)
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(chatRefused, `{"error":`) {
		t.Errorf("a wrong key on chat: %d %q, want OpenAI's 401", resp.StatusCode, chatRefused)
	}
	if got := doorRequests(t, reg, metrics.DoorMessages); got != 2 {
		t.Errorf("requests counted under the plain door's label: %v, want 2", got)
	}

	url, _ = plainGateway(t, proxytest.Script(sim.Error(http.StatusTooManyRequests, "slow down", "rate_limit_error", "rate_limited")))
	resp, upstream := plainDo(t, http.MethodPost, url+"/v1/plain?stream=true", "key-a", "hi", nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Content-Type") != "text/plain" || !strings.HasPrefix(upstream, "plain: ") {
		t.Errorf("an upstream's 429: %d %q, want it in the plain door's shape", resp.StatusCode, upstream)
	}
}

// doorRequests sums phasegate_requests_total of door.
func doorRequests(t *testing.T, g prometheus.Gatherer, door string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "phasegate_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "door" && l.GetValue() == door {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
