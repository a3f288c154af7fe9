package proxy

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/tools"
)

// Limits bound the shape of one chat request, beyond its size in bytes,
// so that a hostile or broken client cannot make the gateway (or the
// upstream, on the operator's key) do unbounded work. Zero fields take
// their defaults, which are far beyond what real agents send.
type Limits struct {
	// MaxDepth bounds the nesting of JSON objects and arrays. Default 64.
	MaxDepth int
	// MaxMessages bounds the messages of a request. Default 10,000.
	MaxMessages int
	// MaxTools bounds the tools a request declares. Default 512.
	MaxTools int
	// MaxToolSchemaBytes bounds one tool's parameters schema. Default
	// 256 KiB.
	MaxToolSchemaBytes int
	// MaxArgumentsBytes bounds the arguments of one tool call in the
	// history. Default 4 MiB.
	MaxArgumentsBytes int
	// MaxHeaderBytes bounds a request's header fields, names and values
	// together. Default 64 KiB. (The server itself refuses more than
	// 1 MiB before the gateway sees the request.)
	MaxHeaderBytes int
	// MaxItemReferences bounds the distinct items the item_reference
	// items of one Responses request name: each is a read of the store.
	// Default 1,000.
	MaxItemReferences int
}

// DefaultLimits returns the limits phasegate starts with.
func DefaultLimits() Limits {
	return Limits{MaxDepth: 64, MaxMessages: 10_000, MaxTools: 512, MaxToolSchemaBytes: 256 << 10, MaxArgumentsBytes: 4 << 20, MaxHeaderBytes: 64 << 10,
		MaxItemReferences: 1_000}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	for _, f := range []struct{ v, def *int }{{&l.MaxDepth, &d.MaxDepth}, {&l.MaxMessages, &d.MaxMessages},
		{&l.MaxTools, &d.MaxTools}, {&l.MaxToolSchemaBytes, &d.MaxToolSchemaBytes}, {&l.MaxArgumentsBytes, &d.MaxArgumentsBytes},
		{&l.MaxHeaderBytes, &d.MaxHeaderBytes}, {&l.MaxItemReferences, &d.MaxItemReferences}} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return l
}

// checkBody refuses a chat request body over the limits of its depth,
// messages and tools before it is decoded (see chat.CheckCounts).
func checkBody(body []byte, l Limits) error {
	return chat.CheckCounts(body, l.MaxDepth,
		chat.Bound{Member: "messages", What: "messages", Max: l.MaxMessages},
		chat.Bound{Member: "tools", What: "tools", Max: l.MaxTools})
}

// checkResponsesBody is checkBody for a Responses API request, which is
// decoded into a struct (its member names matched in any case): its
// input items become messages, so the same limits bound them.
func checkResponsesBody(body []byte, l Limits) error {
	return chat.CheckCounts(body, l.MaxDepth,
		chat.Bound{Member: "input", FoldCase: true, What: "input items", Max: l.MaxMessages},
		chat.Bound{Member: "tools", FoldCase: true, What: "tools", Max: l.MaxTools})
}

// checkShape refuses a parsed request over the limits. (checkBody
// refused too many messages or tools before they were decoded; they are
// counted again here for requests built otherwise.)
func checkShape(req *chat.Request, l Limits) error {
	if n := len(req.Messages); n > l.MaxMessages {
		return chat.TooMany("messages", "messages", n, l.MaxMessages)
	}
	if n := len(req.Tools); n > l.MaxTools {
		return chat.TooMany("tools", "tools", n, l.MaxTools)
	}
	for i, t := range req.Tools {
		if n := len(t.Function.Parameters); n > l.MaxToolSchemaBytes {
			return tooLarge(fmt.Sprintf("tools[%d].function.parameters", i), "the parameters schema of tool %q is %d bytes; this gateway accepts at most %d", t.Function.Name, n, l.MaxToolSchemaBytes)
		}
	}
	for i, m := range req.Messages {
		for j, tc := range m.ToolCalls {
			if n := len(tc.Function.Arguments); n > l.MaxArgumentsBytes {
				return tooLarge(fmt.Sprintf("messages[%d].tool_calls[%d].function.arguments", i, j), "the arguments of a tool call are %d bytes; this gateway accepts at most %d", n, l.MaxArgumentsBytes)
			}
		}
	}
	return nil
}

// checkSchemaCost refuses tools whose parameters schemas cost more to
// compile than tools.DefaultSchemaBudget allows (the guard compiles them
// to judge calls), saying which pattern and why.
func checkSchemaCost(ts []chat.Tool) error {
	for i, t := range ts {
		_, err := tools.SchemaCost(t.Function.Parameters, tools.DefaultSchemaBudget())
		var ce *tools.SchemaCostError
		if errors.As(err, &ce) {
			return chat.InvalidRequest(fmt.Sprintf("tools[%d].function.parameters", i), "the parameters schema of tool %s: %s", tools.QuoteName(t.Function.Name), ce.Error())
		}
	}
	return nil
}

func tooLarge(param, format string, args ...any) *chat.Error {
	return &chat.Error{Status: http.StatusRequestEntityTooLarge, Type: chat.TypeInvalidRequest, Code: "request_too_large", Param: param,
		Message: fmt.Sprintf(format, args...)}
}

// limitHeaders answers a request whose header fields are over the limit
// with a 431, in its door's shape (see refuseRoute).
func (h *Handler) limitHeaders(c *gin.Context) {
	n := 0
	for k, vs := range c.Request.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4 // ": " and CRLF
		}
	}
	if n > h.cfg.Limits.MaxHeaderBytes {
		h.refuseRoute(c, &chat.Error{Status: http.StatusRequestHeaderFieldsTooLarge, Type: chat.TypeInvalidRequest, Code: "headers_too_large",
			Message: fmt.Sprintf("the request's header fields are %d bytes; this gateway accepts at most %d", n, h.cfg.Limits.MaxHeaderBytes)})
		c.Abort()
		return
	}
	c.Next()
}
