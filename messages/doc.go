// Package messages is Anthropic's Messages API (POST /v1/messages) as a
// front door over the chat pipeline: the pure translators between its
// wire and chat completions.
//
//   - Translate turns a Messages request into the body of a chat
//     completion request, with the names of what it held that a chat
//     upstream cannot use (dropped, never a 400 that stops an agent), or
//     a *chat.Error (400) that says what is wrong. CountBody does the
//     same for count_tokens.
//   - FromCompletion turns one chat.completion into a message object.
//   - Stream turns the chunks of a chat stream into Anthropic's event
//     sequence (message_start, content_block_*, message_delta,
//     message_stop), each event with its event: line.
//   - ErrorResponse and ErrorEvent shape a *chat.Error as Anthropic's
//     error body and status, before and after the first byte.
//   - ModelsJSON and CountJSON are the model list and count_tokens
//     answers in Anthropic's shape.
//
// The guard never sees this package's types: it judges chat completions
// whichever door a request came by. The package is pure (no I/O, no
// goroutines) and depends only on chat, internal packages and the
// standard library. Text, thinking and tool arguments are carried as the
// raw JSON the client or the upstream wrote, never decoded and
// re-encoded, so they cross the door byte for byte.
package messages
