package responses

import (
	"bytes"
	"encoding/json"
	"iter"
	"strconv"
	"time"
)

// Response is a response object under construction: its identity, what
// the request said (echoed in every rendering, as OpenAI does), its
// output items and usage. It is owned by one request.
type Response struct {
	ID        string
	CreatedAt int64
	// echo is the request's fields as they are rendered, between commas.
	echo   []byte
	items  []*outItem
	status string
	// incomplete is the reason of an incomplete response.
	incomplete string
	errCode    string
	errMessage string
	usage      *Usage
	estimated  bool
	completed  int64
	// namespaced maps the chat name of each function of a namespace to
	// the function as the client names it.
	namespaced map[string]qualified
	// sealReasoning is whether the request included the encrypted
	// reasoning, and sealer seals it (see SealWith).
	sealReasoning bool
	sealer        *Sealer
}

// outItem is one output item; text, args, name and callID hold JSON
// string contents as the upstream escaped them, so text is never decoded
// and re-encoded.
type outItem struct {
	typ    string // TypeMessage, TypeReasoning or TypeFunctionCall
	id     string
	status string
	text   []byte
	name   []byte // quoted
	callID []byte // quoted
	args   []byte
	// namespace is the quoted namespace of a function call of a
	// namespace's function, nil for none.
	namespace []byte
	// sealed is the encrypted_content of a reasoning item, once done.
	sealed string
}

// NewResponse starts the response to r.
func NewResponse(r *Request) *Response {
	return &Response{ID: NewID("resp_"), CreatedAt: time.Now().Unix(), echo: echoOf(r), status: StatusInProgress,
		namespaced: r.toolset.namespaced(), sealReasoning: r.Includes(IncludeEncryptedReasoning)}
}

// SealWith has the reasoning items of the response carry their text
// sealed by s in encrypted_content, when the request included
// reasoning.encrypted_content; a nil s seals nothing.
func (r *Response) SealWith(s *Sealer) {
	if r.sealReasoning {
		r.sealer = s
	}
}

// seal seals the text of item it, a reasoning item that is done.
func (r *Response) seal(it *outItem) {
	if r.sealer != nil && it.typ == TypeReasoning && it.sealed == "" {
		it.sealed = r.sealer.seal(it.text)
	}
}

// call is the output item of a function call whose chat name is name
// (quoted; callID too, both copied): a function of a namespace is named
// as the client declared it, with its namespace.
func (r *Response) call(callID, name []byte) *outItem {
	it := &outItem{typ: TypeFunctionCall, id: NewID("fc_"), callID: bytes.Clone(callID), name: bytes.Clone(name)}
	if q, ok := r.namespaced[string(inner(name))]; ok {
		it.name, _ = json.Marshal(q.name)
		it.namespace, _ = json.Marshal(q.namespace)
	}
	return it
}

// echoOf renders the request's fields a response repeats, with the
// defaults OpenAI reports for those it did not send.
func echoOf(r *Request) []byte {
	e := struct {
		Instructions       *string         `json:"instructions"`
		MaxOutputTokens    *int            `json:"max_output_tokens"`
		Metadata           json.RawMessage `json:"metadata"`
		Model              string          `json:"model"`
		ParallelToolCalls  bool            `json:"parallel_tool_calls"`
		PreviousResponseID *string         `json:"previous_response_id"`
		Reasoning          ReasoningParam  `json:"reasoning"`
		Store              bool            `json:"store"`
		Temperature        json.RawMessage `json:"temperature"`
		Text               TextParam       `json:"text"`
		ToolChoice         json.RawMessage `json:"tool_choice"`
		Tools              []any           `json:"tools"`
		TopP               json.RawMessage `json:"top_p"`
		Truncation         string          `json:"truncation"`
		User               *string         `json:"user,omitempty"`
	}{Instructions: r.Instructions, MaxOutputTokens: r.MaxOutputTokens, Metadata: orRaw(r.Metadata, "{}"), Model: r.Model,
		ParallelToolCalls: r.ParallelToolCalls == nil || *r.ParallelToolCalls, Store: r.Stored(),
		Temperature: orRaw(r.Temperature, "1"), ToolChoice: orRaw(r.ToolChoice, `"auto"`), Tools: r.toolset.echo,
		TopP: orRaw(r.TopP, "1"), Truncation: "disabled"}
	if r.PreviousResponseID != "" {
		e.PreviousResponseID = &r.PreviousResponseID
	}
	if r.Reasoning != nil {
		e.Reasoning = *r.Reasoning
	}
	e.Text.Format = json.RawMessage(`{"type":"text"}`)
	if r.Text != nil && len(r.Text.Format) > 0 && !isNull(r.Text.Format) {
		e.Text.Format = r.Text.Format
	}
	if r.User != "" {
		e.User = &r.User
	}
	if e.Tools == nil {
		e.Tools = []any{}
	}
	b, _ := json.Marshal(e) // every field is valid JSON: decoded from the request
	return b[1 : len(b)-1]
}

func orRaw(raw json.RawMessage, def string) json.RawMessage {
	if len(raw) == 0 || isNull(raw) {
		return json.RawMessage(def)
	}
	return raw
}

// Status is the response's status: in_progress until it ends.
func (r *Response) Status() string { return r.status }

// AppendJSON appends the response object as it stands.
func (r *Response) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"id":"`...)
	dst = append(dst, r.ID...)
	dst = append(dst, `","object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, r.CreatedAt, 10)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, r.status...)
	dst = append(dst, `","completed_at":`...)
	if r.completed > 0 {
		dst = strconv.AppendInt(dst, r.completed, 10)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"error":`...)
	if r.errCode != "" {
		m, _ := json.Marshal(r.errMessage)
		dst = append(append(append(append(dst, `{"code":"`...), r.errCode...), `","message":`...), m...)
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"incomplete_details":`...)
	if r.incomplete != "" {
		dst = append(append(append(dst, `{"reason":"`...), r.incomplete...), `"}`...)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(append(dst, ','), r.echo...)
	dst = append(dst, `,"output":[`...)
	for i, it := range r.items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = it.appendJSON(dst)
	}
	dst = append(dst, ']')
	if r.usage != nil {
		u, _ := json.Marshal(r.usage)
		dst = append(append(dst, `,"usage":`...), u...)
	}
	if r.estimated {
		dst = append(dst, `,"phasegate":{"usage_estimated":true}`...)
	}
	return append(dst, '}')
}

// JSON returns the response object as it stands.
func (r *Response) JSON() []byte { return r.AppendJSON(nil) }

// Output returns the output items, as they are stored for later
// requests.
func (r *Response) Output() []Item {
	out := make([]Item, 0, len(r.items))
	for _, it := range r.items {
		var item Item
		if json.Unmarshal(it.appendJSON(nil), &item) == nil {
			out = append(out, item)
		}
	}
	return out
}

// OutputJSON yields the id of each output item and the item rendered as
// JSON, which decodes to what Output holds: for a writer that stores
// them, without a decode and an encode each.
func (r *Response) OutputJSON() iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		for _, it := range r.items {
			if !yield(it.id, it.appendJSON(nil)) {
				return
			}
		}
	}
}

// appendJSON renders the item.
func (it *outItem) appendJSON(dst []byte) []byte { return it.appendItem(dst, true) }

// appendItem renders the item; without parts, a message or reasoning
// item has no content yet, as output_item.added announces it.
func (it *outItem) appendItem(dst []byte, parts bool) []byte {
	dst = append(append(append(dst, `{"id":"`...), it.id...), `","type":"`...)
	dst = append(append(append(dst, it.typ...), `","status":"`...), it.status...)
	switch it.typ {
	case TypeMessage:
		dst = append(dst, `","role":"assistant","content":[`...)
		if parts {
			dst = appendTextPart(dst, it.text)
		}
		return append(dst, "]}"...)
	case TypeReasoning:
		dst = append(dst, `","summary":[],"content":[`...)
		if parts {
			dst = append(append(append(dst, `{"type":"reasoning_text","text":"`...), it.text...), `"}`...)
		}
		dst = append(dst, ']')
		if parts && it.sealed != "" {
			dst = append(append(append(dst, `,"encrypted_content":"`...), it.sealed...), '"')
		}
		return append(dst, '}')
	default:
		dst = append(append(append(dst, `","call_id":`...), it.callID...), `,"name":`...)
		dst = append(dst, it.name...)
		if it.namespace != nil {
			dst = append(append(dst, `,"namespace":`...), it.namespace...)
		}
		dst = append(append(dst, `,"arguments":"`...), it.args...)
		return append(dst, `"}`...)
	}
}

func appendTextPart(dst, text []byte) []byte {
	dst = append(dst, `{"type":"output_text","text":"`...)
	return append(append(dst, text...), `","annotations":[],"logprobs":[]}`...)
}

// add opens an output item and returns its index.
func (r *Response) add(it *outItem) int {
	it.status = StatusInProgress
	r.items = append(r.items, it)
	return len(r.items) - 1
}

// end sets the final status of the response and of its open items:
// completed, or incomplete with the reason a chat finish reason gives.
func (r *Response) end(finish string) {
	r.status, r.completed = StatusCompleted, time.Now().Unix()
	switch finish {
	case "length":
		r.status, r.incomplete = StatusIncomplete, "max_output_tokens"
	case "content_filter":
		r.status, r.incomplete = StatusIncomplete, "content_filter"
	}
	for _, it := range r.items {
		if it.status == StatusInProgress {
			it.status = r.status
		}
	}
	if r.status != StatusCompleted {
		r.completed = 0
	}
}

// fail marks the response failed with the Responses API's error code.
func (r *Response) fail(status int, message string) {
	r.status, r.errMessage, r.errCode = StatusFailed, message, "server_error"
	if status == 429 {
		r.errCode = "rate_limit_exceeded"
	}
	for _, it := range r.items {
		if it.status == StatusInProgress {
			it.status = StatusIncomplete
		}
	}
}

// setUsage records the usage of a chat completion (and whether the
// gateway estimated it).
func (r *Response) setUsage(raw json.RawMessage, estimated bool) {
	if u := UsageOf(raw); u != nil {
		r.usage, r.estimated = u, estimated
	}
}
