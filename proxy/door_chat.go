package proxy

import (
	"io"
	"net/http"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/metrics"
)

// chatDoor is chat completions, the pipeline's own wire: the request is
// served as it came, the chunks written as they are with the gateway's
// extension, errors in OpenAI's shape. A resumable stream's log is kept
// under the request's X-Request-Id.
var chatDoor = door{
	name:     metrics.DoorChat,
	paths:    []string{"/chat/completions"},
	read:     readChat,
	identity: true,
}

// chatCall is a chat completion request as the chat door read it.
type chatCall struct {
	h    *Handler
	r    *http.Request
	body []byte
}

func readChat(h *Handler, w http.ResponseWriter, r *http.Request) (doorRequest, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		return nil, err
	}
	return &chatCall{h: h, r: r, body: body}, nil
}

func (c *chatCall) chatBody() []byte { return c.body }
func (c *chatCall) close()           {}

func (c *chatCall) logKey() (key, owner string) {
	return c.h.streamKey(c.r, c.r.Header.Get("X-Request-Id")), c.h.owner(c.r)
}

func (c *chatCall) sink(w http.ResponseWriter, ew eventWriter, _ bool) sink {
	if ew == nil {
		return &jsonSink{w: w}
	}
	return &streamSink{w: w, ew: ew}
}

// chatEnding ends a chat completion stream the gateway cut, as every
// stream ends: the in-band error, then [DONE].
func chatEnding(dst []byte, _ int, e *chat.Error) []byte {
	return append(appendData(dst, e.Body()), doneEvent...)
}
