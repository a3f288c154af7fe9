package proxytest

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/phasegate/phasegate/chat"
)

// Wait bounds every wait of the tests that use the double: long enough for
// a loaded machine under -race, short enough that a hang fails.
const Wait = 10 * time.Second

// Context returns a context that ends after Wait or with the test.
func Context(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	tb.Cleanup(cancel)
	return ctx
}

// Do sends a request with body and returns the response, whose body is
// closed when the test ends.
func Do(tb testing.TB, ctx context.Context, client *http.Client, method, url, body string) *http.Response {
	tb.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, url, err)
	}
	tb.Cleanup(func() { resp.Body.Close() })
	return resp
}

// WaitCancelled fails the test unless a client abandons a reply within
// Wait.
func (u *Upstream) WaitCancelled(tb testing.TB) {
	tb.Helper()
	select {
	case <-u.Cancelled():
	case <-time.After(Wait):
		tb.Fatal("the upstream never saw the client leave")
	}
}

// Executed returns the tool calls of req's last turn (the messages after
// its last user message) that a tool message answers: the calls the
// client ran. A scripted model reads its progress off them, the history
// being all it is sent.
func Executed(req *chat.Request) []chat.ToolCall {
	turn := req.Messages
	for i := len(turn) - 1; i >= 0; i-- {
		if turn[i].Role == chat.RoleUser {
			turn = turn[i+1:]
			break
		}
	}
	answered := map[string]bool{}
	for _, m := range turn {
		if m.Role == chat.RoleTool {
			answered[m.ToolCallID] = true
		}
	}
	var ran []chat.ToolCall
	for _, m := range turn {
		for _, c := range m.ToolCalls {
			if answered[c.ID] {
				ran = append(ran, c)
			}
		}
	}
	return ran
}
