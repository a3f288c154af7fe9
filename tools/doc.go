// Package tools holds the guard's decisions about tool calls, as pure code:
// no I/O, no goroutines.
//
//   - Accumulator reassembles the streamed tool-call deltas of a response
//     and tells when its first call is complete.
//   - Signature identifies a call by tool name, canonical arguments and
//     project, so reordered keys or respelled numbers are still the same
//     call.
//   - Ledger reads the current turn out of a request's history: which calls
//     the client executed, their signatures and results. The history is the
//     ledger; the gateway keeps no per-conversation state.
//   - Policy judges the first complete call of a response (forward,
//     duplicate, malformed, undeclared, schema_invalid, not_allowed), and
//     the notice functions say to the model why a call was refused and what
//     budget is left.
//
// The guard of package protocol (TwoStage) judges each call with a Policy
// built on the turn's Ledger and tells the model why with these notices.
package tools
