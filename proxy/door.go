package proxy

import (
	"net/http"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/protocol"
)

// A door is one API's wire over the gateway's one pipeline: chat
// completions, OpenAI's Responses API, Anthropic's Messages API. The
// pipeline (auth, limits, fit, guard, retries, fallbacks, resume, metrics,
// traces) serves chat completion requests and yields a strategy's events;
// a door translates at both ends and nothing in between knows which door
// a request came by, except as the door label of metrics and spans.
// serveDoor serves every door's requests.
//
// A door's fields are its hooks, in the manner of httputil.ReverseProxy:
// name, paths and read are required; the others have the zero value
// documented on each.
//
// To add a door: write its translators as a pure package (its request
// into a chat completion request body; a chunk's data and the gateway's
// extension into its events; a chat.completion into its answer; a
// chat.Error into its error), then one file in this package that declares
// the door (its name among metrics.Doors, its paths, read, and a
// doorRequest whose sink writes the events through an eventWriter, and
// refusal and ending when its errors are not OpenAI's) and adds it to
// frontDoors. door_internal_test.go holds a small door written so.
type door struct {
	// name is the door label of metrics and the door attribute of spans,
	// one of metrics.Doors.
	name string
	// paths are the paths, below /v1, /standard/v1 and /two-stage/v1,
	// whose POST the pipeline serves through this door (each also with a
	// trailing slash).
	paths []string
	// routes, when set, adds the door's other routes of its API to each
	// of those groups (a stored response's GET, DELETE...).
	routes func(h *Handler, g *gin.RouterGroup)
	// read reads the client's request into the chat completion request
	// the pipeline serves, resolving whatever state of its own it needs
	// (stored history). An error is the client's, answered by refusal
	// before any byte. w is for the headers it sets and for
	// http.MaxBytesReader.
	read func(h *Handler, w http.ResponseWriter, r *http.Request) (doorRequest, error)
	// identity has every chunk the guard writes carry one id, created
	// time and model (see identity): true for a door whose wire shows a
	// chunk's. A door that mints its own (a Responses response id) leaves
	// it false and the chunks as the strategy made them.
	identity bool
	// refusal is the answer to a failure before the first byte (ok false:
	// nothing is written, the client left). Nil answers in OpenAI's shape,
	// an upstream's error relayed as it came (openAIRefusal).
	refusal func(f protocol.Failure) (a answer, ok bool)
	// ending appends the door's in-band error e, and whatever its wire
	// ends a stream with after it: the end of a resumable stream's log cut
	// short, or of a resume that cannot follow the stream to its end. n
	// numbers it among the events before it, as the position after the
	// last of them (the first event is at 1), for a wire that numbers its
	// events. Nil ends as chat completions does (chatEnding).
	ending func(dst []byte, n int, e *chat.Error) []byte
}

// doorRequest is one request as its door read it. It is owned by one
// request.
type doorRequest interface {
	// chatBody is the body of the chat completion request the pipeline
	// serves.
	chatBody() []byte
	// sink is where the strategy's events go: a stream's written as the
	// door's events to ew, a whole answer's to w when ew is nil. resumable
	// tells that ew keeps each event for a resume and that the stream goes
	// on when its client leaves. It is called once.
	sink(w http.ResponseWriter, ew eventWriter, resumable bool) sink
	// logKey is the key, in the store of streams, of the log of the
	// request's stream when it is resumable (and of its cancel), and the
	// owner who alone may read it.
	logKey() (key, owner string)
	// close releases what the request holds, once its answer was written.
	close()
}

// prompted is a door's request whose answer tells the gateway's count of
// the prompt (a Messages stream's message_start): it is told the count
// once the request is fitted, before its sink is made, when the request
// was counted.
type prompted interface{ prompt(tokens int) }

// eventWriter is where a door's sink writes a stream: whole events, as its
// client reads them. An sseWriter writes them; a resumable stream's
// writer logs each too (see resumeWriter).
type eventWriter interface {
	// open commits the response headers, h (the upstream's passed on)
	// first; once.
	open(h http.Header)
	// opened reports whether the headers were committed.
	opened() bool
	// event writes one whole event: its lines and the blank line that
	// ends it. b is not kept.
	event(b []byte) error
	// comment writes an SSE comment line (a keep-alive), never kept.
	comment(line []byte) error
	// flush writes what was gathered: the gateway is about to wait.
	flush() error
}

// frontDoors are the gateway's front doors.
var frontDoors = []*door{&chatDoor, &responsesDoor, &messagesDoor}

// doorRoutes adds each door's routes to the group of a protocol route:
// its paths served by serveDoor after chain, and its other routes.
func (h *Handler) doorRoutes(g *gin.RouterGroup, route string, chain []gin.HandlerFunc) {
	for _, d := range h.doors {
		serve := append(slices.Clone(chain), func(c *gin.Context) { h.serveDoor(c.Writer, c.Request, d, route) })
		for _, p := range d.paths {
			for _, slash := range []string{"", "/"} {
				g.POST(p+slash, serve...)
				h.doorOf[g.BasePath()+p+slash] = d
			}
		}
		if d.routes != nil {
			d.routes(h, g)
		}
	}
}

// answer is what a door answers, whole, before it wrote any byte: an
// error's status, headers (nil: a JSON content type) and body.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// refuseRoute answers e, an error of the middleware (auth, limits)
// before a door read the request, in the shape of the door whose route c
// matched; on a model route, in the shape its client reads (see
// refuseModels); in OpenAI's on any other route.
func (h *Handler) refuseRoute(c *gin.Context, e *chat.Error) {
	if d := h.doorOf[c.FullPath()]; d != nil {
		d.refuse(c.Writer, protocol.Failure{Error: e})
		return
	}
	if strings.Contains(c.FullPath(), "/models") {
		refuseModels(c.Writer, c.Request, protocol.Failure{Error: e})
		return
	}
	writeJSONError(c.Writer, e)
}

// answerTo is the door's answer to f before the first byte (see
// refusal).
func (d *door) answerTo(f protocol.Failure) (answer, bool) {
	if d.refusal == nil {
		return openAIRefusal(f)
	}
	return d.refusal(f)
}

// end appends the door's ending of a stream at log position n (see
// ending).
func (d *door) end(dst []byte, n int, e *chat.Error) []byte {
	if d.ending == nil {
		return chatEnding(dst, n, e)
	}
	return d.ending(dst, n, e)
}

// refuse writes the door's answer to f before any byte was written.
func (d *door) refuse(w http.ResponseWriter, f protocol.Failure) {
	if a, ok := d.answerTo(f); ok {
		a.write(w)
	}
}

func (a answer) write(w http.ResponseWriter) {
	copyHeader(w.Header(), a.header)
	if a.header == nil {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// openAIRefusal is the answer of chat completions, and of OpenAI's other
// APIs, to a failure before the first byte: an upstream's error relayed
// as it came, any other in OpenAI's shape, nothing for a client that
// left. The credentials an upstream quoted back (a key in an "invalid API
// key" message) are redacted on the way out, as every error body is
// (exitWriter).
func openAIRefusal(f protocol.Failure) (answer, bool) {
	if f.Relay != nil {
		h := f.Relay.Header
		if h == nil {
			h = http.Header{} // as it came: no content type of the gateway's
		}
		return answer{f.Relay.Status, h, f.Relay.Body}, true
	}
	if f.Error.Status == statusClientClosed {
		return answer{}, false
	}
	return answer{status: f.Error.Status, body: f.Error.Body()}, true
}
