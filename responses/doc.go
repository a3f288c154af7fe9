// Package responses is the Responses API (POST /v1/responses) as a front
// door over the chat pipeline: the wire types of its requests, items,
// response objects and stream events, and the pure translators between
// them and chat completions.
//
//   - Translate turns a Responses request (with the items it references
//     already resolved) into the body of a chat completion request, or a
//     400 in OpenAI's shape that names what is not supported.
//   - Stream turns the chat.completion.chunk data of a chat stream into
//     the Responses event sequence, each event with its event: line and an
//     increasing sequence_number.
//   - FromCompletion turns one chat.completion into a response object.
//
// The guard never sees this package's types: it keeps judging chat
// completions, whichever door a request came by. The package is pure (no
// I/O, no goroutines) and depends only on chat and the standard library.
// Text is carried as the raw JSON the upstream wrote, never decoded and
// re-encoded, so what the model said reaches the client byte for byte.
package responses
