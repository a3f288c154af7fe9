package session

import (
	"fmt"
	"strconv"
)

// Notice returns the final instruction given to the model when the
// session's budget c is spent (b is the request's budget), and the line
// the client is shown.
func Notice(c Cap, b Budget) (text, shown string) {
	what := spentText(c, b)
	text = "The budget of this agent session is spent (" + what + "). Do not call any tool: " +
		"provide your final answer now, summarising what you have done, what you found and what is left to do."
	shown = "session budget spent (" + what + "): the model answers now, without tools."
	return text, shown
}

// spentText says which budget is spent, and how large it was.
func spentText(c Cap, b Budget) string {
	switch c {
	case CapToolCalls:
		return plural(b.ToolCalls, "tool call")
	case CapTokens:
		return plural(b.Tokens, "token")
	case CapUSD:
		return fmt.Sprintf("US$%.2f", b.USD)
	case CapStopped:
		return "stopped by an operator"
	}
	return string(c)
}

func plural(n int64, unit string) string {
	s := strconv.FormatInt(n, 10) + " " + unit
	if n != 1 {
		s += "s"
	}
	return s
}
