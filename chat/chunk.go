package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/phasegate/phasegate/internal/jsonscan"
)

// Done is the data of the event that ends an OpenAI stream.
const Done = "[DONE]"

// Finish reasons, as the wire spells them.
const (
	FinishStop      = "stop"
	FinishLength    = "length"
	FinishToolCalls = "tool_calls"
)

// Chunk is a typed view of one chat.completion.chunk. Fields the gateway
// does not read are not decoded; forward the raw data to keep them.
type Chunk struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint string          `json:"system_fingerprint,omitempty"`
	Choices           []ChunkChoice   `json:"choices"`
	Usage             json.RawMessage `json:"usage,omitempty"`
}

// ChunkChoice is one choice of a chunk.
type ChunkChoice struct {
	Index        int     `json:"index"`
	Delta        Delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

// Delta is the incremental message of a chunk choice.
type Delta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCallDelta `json:"tool_calls,omitempty"`
}

// ToolCallDelta is a fragment of a streamed tool call. Upstreams send the
// id, type and name on the first fragment of an index only, the arguments
// in pieces; some repeat the id on every fragment.
type ToolCallDelta struct {
	Index    int    `json:"index"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// DecodeChunk decodes the data of one SSE event, as encoding/json does: a
// chunk of the usual shape in one walk (walkChunk), anything else by
// encoding/json itself.
func DecodeChunk(data []byte) (Chunk, error) {
	if c, ok := walkChunk(data); ok {
		return c, nil
	}
	return decodeChunkJSON(data)
}

// decodeChunkJSON is DecodeChunk by encoding/json: the reference walkChunk
// is fuzzed against.
func decodeChunkJSON(data []byte) (Chunk, error) {
	var c Chunk
	if err := json.Unmarshal(data, &c); err != nil {
		return Chunk{}, fmt.Errorf("decode chunk: %w", err)
	}
	return c, nil
}

// FinishReason returns the finish reason of the first choice, or "".
func (c *Chunk) FinishReason() string {
	if len(c.Choices) == 0 || c.Choices[0].FinishReason == nil {
		return ""
	}
	return *c.Choices[0].FinishReason
}

// HasUsage reports whether the chunk carries a usage object (absent and
// null are both "no usage"; a zero usage is still usage).
func (c *Chunk) HasUsage() bool { return len(c.Usage) > 0 && !isNull(c.Usage) }

// WithExtension returns the JSON object data with one more top-level field
// key set to the JSON value ext, by splicing before the closing brace: the
// rest of data is kept byte for byte. data that is not an object is
// returned unchanged.
func WithExtension(data []byte, key string, ext []byte) []byte {
	return AppendExtension(make([]byte, 0, len(data)+len(key)+len(ext)+4), data, key, ext)
}

// AppendExtension appends WithExtension(data, key, ext) to dst, so a
// writer can reuse its buffer.
func AppendExtension(dst, data []byte, key string, ext []byte) []byte {
	trimmed := bytes.TrimSpace(data)
	end := bytes.LastIndexByte(data, '}')
	if end < 0 || len(trimmed) == 0 || trimmed[0] != '{' {
		return append(dst, data...)
	}
	start := bytes.IndexByte(data, '{') // after any leading whitespace
	dst = append(dst, data[:end]...)
	if len(bytes.TrimSpace(data[start+1:end])) > 0 {
		dst = append(dst, ',')
	}
	dst = strconv.AppendQuote(dst, key)
	dst = append(dst, ':')
	dst = append(dst, ext...)
	return append(dst, data[end:]...)
}

// AddUsage sums two usage objects field by field: numbers are added,
// nested objects summed recursively, any other value taken from the later
// one. Vendor fields (DeepSeek's prompt_cache_hit_tokens, OpenAI's
// *_tokens_details) are summed like the standard ones. Either side may be
// empty, meaning absent.
func AddUsage(a, b json.RawMessage) (json.RawMessage, error) {
	if len(a) == 0 || isNull(a) {
		return b, nil
	}
	if len(b) == 0 || isNull(b) {
		return a, nil
	}
	var ma, mb map[string]json.RawMessage
	if err := json.Unmarshal(a, &ma); err != nil {
		return nil, fmt.Errorf("decode usage: %w", err)
	}
	if err := json.Unmarshal(b, &mb); err != nil {
		return nil, fmt.Errorf("decode usage: %w", err)
	}
	for k, vb := range mb {
		va, ok := ma[k]
		if !ok {
			ma[k] = vb
			continue
		}
		ma[k] = addValue(va, vb)
	}
	return json.Marshal(ma)
}

// addValue sums two values of one usage field. A null is absent, not a
// reset: it never replaces a value. Only JSON numbers are summed: a string
// that reads as a number (an id, say) is a string.
func addValue(a, b json.RawMessage) json.RawMessage {
	if isNull(bytes.TrimSpace(b)) {
		return a
	}
	if isNull(bytes.TrimSpace(a)) {
		return b
	}
	var na, nb json.Number
	if isNumber(a) && isNumber(b) && json.Unmarshal(a, &na) == nil && json.Unmarshal(b, &nb) == nil {
		ia, errA := na.Int64()
		ib, errB := nb.Int64()
		if errA == nil && errB == nil {
			return strconv.AppendInt(nil, ia+ib, 10)
		}
		fa, _ := na.Float64()
		fb, _ := nb.Float64()
		return strconv.AppendFloat(nil, fa+fb, 'g', -1, 64)
	}
	if bytes.HasPrefix(bytes.TrimSpace(a), []byte("{")) && bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) {
		if sum, err := AddUsage(a, b); err == nil {
			return sum
		}
	}
	return b
}

// isNumber reports whether raw is a JSON number literal, judged by its
// first byte.
func isNumber(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9')
}

// ChunkHeader is what every chunk of one response shares.
type ChunkHeader struct {
	ID                string
	Created           int64
	Model             string
	SystemFingerprint string
}

// OutChunk is a chunk the gateway writes itself.
type OutChunk struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint string          `json:"system_fingerprint,omitempty"`
	Choices           []OutChoice     `json:"choices"`
	Usage             json.RawMessage `json:"usage,omitempty"`
	Extension         json.RawMessage `json:"phasegate,omitempty"`
}

// OutChoice is a choice of a chunk the gateway writes: the choice it
// reads. FinishReason is always written, null when nil, as OpenAI does.
type OutChoice = ChunkChoice

// OutDelta is the delta of a chunk the gateway writes: the delta it reads.
type OutDelta = Delta

// NewChunk returns an empty chunk with the shared header.
func (h ChunkHeader) NewChunk() OutChunk {
	return OutChunk{ID: h.ID, Object: "chat.completion.chunk", Created: h.Created, Model: h.Model, SystemFingerprint: h.SystemFingerprint}
}

// HasToken reports whether the data of a chunk carries something the
// model generated: a non-empty content or reasoning_content string, or a
// tool-call fragment. A chunk that only opens the message (a role and an
// empty content), a finish or usage chunk does not. It reads the bytes
// without decoding them.
func HasToken(data []byte) bool {
	for k := jsonscan.Scan(data); k.Next(); {
		switch {
		case k.Is("content"), k.Is("reasoning_content"):
			if body, _, ok := k.StringValue(); ok && len(body) > 0 {
				return true
			}
		case k.Is("tool_calls"):
			if hasElement(data, k.Value()) {
				return true
			}
		}
	}
	return false
}

// hasElement reports whether the value at data[i] is an array that is not
// empty.
func hasElement(data []byte, i int) bool {
	if i >= len(data) || data[i] != '[' {
		return false
	}
	j := jsonscan.SkipSpace(data, i+1)
	return j < len(data) && data[j] != ']'
}
