package chat

import (
	"errors"

	"github.com/phasegate/phasegate/internal/jsonscan"
)

// Bound is a top-level array of a request body whose elements are
// counted while the body is scanned, before it is decoded (see
// CheckCounts).
type Bound struct {
	// Member is the array's name in the body. FoldCase matches it as
	// encoding/json matches a struct field ("Input" is "input"): set it
	// for a door that decodes its request into a struct.
	Member   string
	FoldCase bool
	// What names the elements in the error: "messages", "input items",
	// "tools".
	What string
	Max  int
}

// CheckCounts refuses, as a 400 in OpenAI's shape, a request body that
// nests objects and arrays deeper than maxDepth, or one of whose bounds
// holds more elements than its Max. It reads the raw body in one pass
// before anything is decoded (jsonscan.Count): decoding 500,000 tiny
// items builds about 16 times their bytes before their number can be
// looked at. Every front door calls it with its own arrays, so the same
// shapes are refused at the same cost, with the same errors, whichever
// door they came by.
func CheckCounts(body []byte, maxDepth int, bounds ...Bound) error {
	arrays := make([]jsonscan.Counted, len(bounds))
	for i, b := range bounds {
		arrays[i] = jsonscan.Counted{Name: b.Member, FoldCase: b.FoldCase, Max: b.Max}
	}
	err := jsonscan.Count(body, maxDepth, arrays...)
	var de *jsonscan.DepthError
	if errors.As(err, &de) {
		return InvalidRequest("", "the request nests JSON objects and arrays more than %d deep", de.Max)
	}
	var ce *jsonscan.CountError
	if errors.As(err, &ce) {
		for _, b := range bounds {
			if b.Member == ce.Name {
				return TooMany(b.Member, b.What, ce.Count, ce.Max)
			}
		}
	}
	return err
}

// TooMany is the 400 of a request with n elements in its array param,
// each a what, when max is the most accepted.
func TooMany(param, what string, n, max int) *Error {
	return InvalidRequest(param, "the request has %d %s; this gateway accepts at most %d", n, what, max)
}
