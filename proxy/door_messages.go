package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/messages"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
)

// messagesDoor is Anthropic's Messages API (POST /v1/messages): the
// request is translated into a chat completion request for the upstream
// serving its model (messages.Translate), each chunk of the answer into
// Anthropic's events as it is written, a whole answer into a message
// object, and every error into Anthropic's shape and statuses. A
// resumable stream's log is kept under the request's X-Request-Id, as a
// chat stream's.
var messagesDoor = door{
	name:    metrics.DoorMessages,
	paths:   []string{"/messages"},
	routes:  (*Handler).messagesRoutes,
	read:    readMessages,
	refusal: messagesRefusal,
	ending:  messagesEnding,
}

// messagesEnding ends a Messages stream the gateway cut with an error
// event; nothing follows it.
func messagesEnding(dst []byte, _ int, e *chat.Error) []byte { return messages.ErrorEvent(dst, e) }

// messagesCall is one POST /v1/messages as the Messages door read it. It
// is owned by one request.
type messagesCall struct {
	h     *Handler
	r     *http.Request
	body  []byte
	tr    *messages.Translation
	reply messages.Reply
}

// readMessages reads and translates a Messages request, and names what
// of it the upstream does not get.
func readMessages(h *Handler, w http.ResponseWriter, r *http.Request) (doorRequest, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		return nil, err
	}
	tr, err := messages.Translate(body, h.messagesConfig())
	if err != nil {
		return nil, err
	}
	h.reportDropped(w, r, metrics.DoorMessages, tr.Dropped)
	return &messagesCall{h: h, r: r, body: body, tr: tr, reply: tr.Reply}, nil
}

// messagesConfig is what the translation needs to know of the upstream
// serving a model, and of the gateway: DeepSeek's dialect on DeepSeek
// and the simulated models (which speak it), images and top_k where the
// upstream is neither DeepSeek nor OpenAI's chat API, which lack them.
func (h *Handler) messagesConfig() messages.Config {
	hosted := messages.HostedDrop
	if h.cfg.HostedTools == HostedRefuse {
		hosted = messages.HostedRefuse
	}
	l := h.cfg.Limits
	limits := messages.Limits{MaxDepth: l.MaxDepth, MaxMessages: l.MaxMessages, MaxTools: l.MaxTools}
	return messages.Config{HostedTools: hosted, Limits: limits, Upstream: func(model string) messages.Config {
		p := h.cfg.provider(model)
		deepSeek := p.Name == thinkingProvider || p.Simulated
		openAI := p.Name == "openai"
		return messages.Config{DeepSeek: deepSeek, Images: !deepSeek, TopK: !deepSeek && !openAI, HostedTools: hosted}
	}}
}

func (c *messagesCall) chatBody() []byte { return c.tr.Body }

// clientBody is the body as the client sent it, whose fields may name
// the request's session (metadata.user_id; proxy/session.go).
func (c *messagesCall) clientBody() []byte { return c.body }

// prompt is told the gateway's count of the prompt: message_start says it
// until the upstream reports its own.
func (c *messagesCall) prompt(tokens int) { c.reply.InputTokens = tokens }

func (c *messagesCall) logKey() (key, owner string) {
	return c.h.streamKey(c.r, c.r.Header.Get("X-Request-Id")), c.h.owner(c.r)
}

func (c *messagesCall) close() {}

func (c *messagesCall) sink(w http.ResponseWriter, ew eventWriter, _ bool) sink {
	render := func(completion []byte) ([]byte, error) { return messages.FromCompletion(c.reply, completion) }
	if ew == nil {
		return &jsonSink{w: w, render: render, door: &messagesDoor}
	}
	return &messagesSink{w: w, ew: ew, stream: messages.NewStream(c.reply), render: render}
}

// messagesRefusal is the Messages API's answer to a failure before the
// first byte: an upstream's error said in Anthropic's shape with its
// Retry-After, any other from the gateway's error; nothing for a client
// that left.
func messagesRefusal(f protocol.Failure) (answer, bool) {
	if f.Relay != nil {
		status, body := messages.ErrorBody(f.Relay.Status, f.Relay.Body)
		h := http.Header{"Content-Type": {"application/json"}}
		if v := f.Relay.Header.Get("Retry-After"); v != "" {
			h.Set("Retry-After", v)
		}
		return answer{status, h, body}, true
	}
	if f.Error.Status == statusClientClosed {
		return answer{}, false
	}
	status, body := messages.ErrorResponse(f.Error)
	return answer{status: status, body: body}, true
}

// pingEvent is a ping, written while the answer is awaited where the chat
// door writes the upstream's keep-alive comments: a sign of life for the
// client, and, as a comment is, never kept in a resumable stream's log.
var pingEvent = bytes.TrimSuffix(messages.NewStream(messages.Reply{}).Ping(nil), []byte("\n\n"))

// messagesSink writes a chat completion stream as the Messages API's
// events: each chunk translated as it comes (messages.Stream), each event
// written through the door's eventWriter.
type messagesSink struct {
	w       http.ResponseWriter // for an answer passed on whole
	ew      eventWriter
	stream  *messages.Stream
	pending http.Header
	buf     []byte
	render  func([]byte) ([]byte, error)
}

func (s *messagesSink) header(h http.Header) { s.pending = h }

func (s *messagesSink) open() {
	if !s.ew.opened() {
		s.ew.open(s.pending)
	}
}

// write writes the events of out one by one: each ends with a blank
// line, and holds none before (its data is one line of JSON).
func (s *messagesSink) write(out []byte) error {
	s.buf = out
	var err error
	for len(out) > 0 {
		n := bytes.Index(out, []byte("\n\n")) + 2
		if n < 2 {
			n = len(out)
		}
		if werr := s.ew.event(out[:n]); werr != nil && err == nil {
			err = werr
		}
		out = out[n:]
	}
	return err
}

// chunk translates one chunk; one the translation cannot read ends the
// stream with an error event, and nothing after the end is written.
func (s *messagesSink) chunk(data, ext []byte) error {
	s.open()
	if s.stream.Ended() {
		return nil
	}
	out, err := s.stream.Chunk(s.buf[:0], data, ext)
	if err != nil {
		out = s.stream.Fail(out, chat.AsError(err))
	}
	return s.write(out)
}

func (s *messagesSink) done() error {
	s.open()
	if err := s.write(s.stream.End(s.buf[:0])); err != nil {
		return err
	}
	return s.ew.flush()
}

func (s *messagesSink) fail(e *chat.Error) {
	s.open()
	_ = s.write(s.stream.Fail(s.buf[:0], e))
	_ = s.ew.flush()
}

func (s *messagesSink) comment([]byte) error {
	s.open()
	if s.stream.Ended() {
		return nil
	}
	return s.ew.comment(pingEvent)
}

func (s *messagesSink) finish() error   { return s.ew.flush() }
func (s *messagesSink) flush() error    { return s.ew.flush() }
func (s *messagesSink) committed() bool { return s.ew.opened() }
func (s *messagesSink) whole(status int, h http.Header, body []byte) error {
	return writeRendered(s.w, status, h, body, s.render, &messagesDoor)
}

// messagesRoutes adds POST /messages/count_tokens, answered in
// Anthropic's shape, errors included.
func (h *Handler) messagesRoutes(g *gin.RouterGroup) {
	d := h.doorOf[g.BasePath()+"/messages"]
	for _, slash := range []string{"", "/"} {
		p := "/messages/count_tokens" + slash
		g.POST(p, func(c *gin.Context) { h.countTokens(c.Writer, c.Request) })
		h.doorOf[g.BasePath()+p] = d
	}
}

// countTokens answers count_tokens with the gateway's own count of the
// prompt the request would send upstream: its tokenizer's estimate, or
// four bytes a token without one.
func (h *Handler) countTokens(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	var tr *messages.Translation
	if err == nil {
		tr, err = messages.CountBody(body, h.messagesConfig())
	}
	var req *chat.Request
	if err == nil {
		req, err = chat.ParseRequest(tr.Body)
	}
	if err != nil {
		if a, ok := messagesRefusal(protocol.Classify(err)); ok {
			a.write(w)
		}
		return
	}
	n := len(tr.Body) / 4
	if h.tokens != nil {
		_, n = h.tokens.CountPrompt(req.Model, req.Messages, req.Tools)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(messages.CountJSON(n))
}

// anthropicClient reports that r asks as an Anthropic client: with the
// anthropic-version header that Anthropic's SDKs and Claude Code send
// with every request. The model routes, which chat and Messages clients
// share, answer it in Anthropic's shape.
func anthropicClient(r *http.Request) bool { return r.Header.Get("Anthropic-Version") != "" }

// refuseModels answers f, a failure of a model route, in the shape its
// client reads.
func refuseModels(w http.ResponseWriter, r *http.Request, f protocol.Failure) {
	if !anthropicClient(r) {
		writeError(w, f)
		return
	}
	if a, ok := messagesRefusal(f); ok {
		a.write(w)
	}
}

// modelIDs are the ids of OpenAI model objects, and the created time of
// the first (Anthropic's list has one created_at a model; the gateway
// knows no release dates).
func modelIDs(data []json.RawMessage) ([]string, time.Time) {
	ids := make([]string, 0, len(data))
	var created int64
	for i, raw := range data {
		var m struct {
			ID      string `json:"id"`
			Created int64  `json:"created"`
		}
		if json.Unmarshal(raw, &m) != nil || m.ID == "" {
			continue
		}
		if i == 0 {
			created = m.Created
		}
		ids = append(ids, m.ID)
	}
	return ids, time.Unix(created, 0)
}

func writeAnthropicModels(w http.ResponseWriter, data []json.RawMessage) {
	ids, created := modelIDs(data)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(messages.ModelsJSON(ids, created))
}

// serveModel answers GET /v1/models/{id} of an Anthropic client: the
// model as the provider its name routes to answers it (the simulated
// model answers any name it serves), in Anthropic's shape, and the
// provider's 404 in Anthropic's. Any other request of the path is passed
// through.
func (h *Handler) serveModel(w http.ResponseWriter, r *http.Request, id string) {
	if r.Method != http.MethodGet || !anthropicClient(r) {
		h.servePassThrough(w, r)
		return
	}
	r, cancel := h.bounded(r)
	defer cancel()
	body, err := h.getUpstream(r.Context(), h.cfg.provider(id), forwardHeader(r.Header, h.forward), "/models/"+id)
	ids, created := modelIDs([]json.RawMessage{body})
	if err == nil && len(ids) == 0 {
		err = &protocol.InvalidResponseError{Message: "the provider's model object has no id"}
	}
	if err != nil {
		refuseModels(w, r, protocol.Classify(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(messages.ModelJSON(ids[0], created))
}
