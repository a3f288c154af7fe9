// Package chat holds the OpenAI chat-completions wire types the gateway
// decides on, and the codec for the chunks it writes.
//
// The gateway is transparent: it keeps the raw JSON of every request field
// and every message it does not change, so fields it does not understand
// (reasoning_content, logprobs, vendor extensions) reach the other side byte
// for byte. The typed fields here are read-only views used for decisions;
// edits go through the methods that rewrite the raw form.
//
// The package is pure: no I/O, no goroutines, imported by every other
// package of the gateway and importing none of them.
package chat
