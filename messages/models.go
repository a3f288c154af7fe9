package messages

import (
	"strconv"
	"time"
)

// ModelsJSON returns the model list in the Messages API's shape, one
// page holding every id: {"data":[{"type":"model","id",…}],"has_more":
// false,"first_id","last_id"}. created is the created_at of every
// model (a gateway knows no release dates).
func ModelsJSON(ids []string, created time.Time) []byte {
	dst := append(make([]byte, 0, 64+len(ids)*96), `{"data":[`...)
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendModel(dst, id, created)
	}
	dst = append(dst, `],"has_more":false,"first_id":`...)
	if len(ids) == 0 {
		return append(dst, `null,"last_id":null}`...)
	}
	dst = append(appendString(dst, ids[0]), `,"last_id":`...)
	return append(appendString(dst, ids[len(ids)-1]), '}')
}

// ModelJSON returns one model in the Messages API's shape.
func ModelJSON(id string, created time.Time) []byte { return appendModel(nil, id, created) }

func appendModel(dst []byte, id string, created time.Time) []byte {
	dst = append(appendString(append(dst, `{"type":"model","id":`...), id), `,"display_name":`...)
	dst = append(appendString(dst, id), `,"created_at":"`...)
	return append(created.UTC().AppendFormat(dst, time.RFC3339), `"}`...)
}

// CountJSON returns the answer to count_tokens: {"input_tokens":n}.
func CountJSON(n int) []byte {
	return append(strconv.AppendInt([]byte(`{"input_tokens":`), int64(n), 10), '}')
}
