package chat

// Drop is one part of a request that a front door accepted and did not
// send to the upstream: a tool a chat upstream cannot run, or a field its
// chat API has no place for. Every door names its drops so, and the
// gateway reports them the same way whichever door a request came by.
type Drop struct {
	// Param names it as the X-Phasegate-Dropped header does: its path in
	// the request, and after "=" the value that decided it where one did
	// (tools[8].type=web_search, include[1]=file_search_call.results,
	// prompt_cache_key). It holds no comma, space or control byte.
	Param string
	// Field is its kind: a metric label from the door's fixed list, never
	// a client's string.
	Field string
}
