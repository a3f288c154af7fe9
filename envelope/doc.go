// Package envelope reads the orchestrator protocol's structured responses:
// a JSON object {"phase": ..., "data": {...}} written by the model between
// StartDelimiter and EndDelimiter, with text allowed before and after.
//
// A Scanner finds envelopes in text arriving in pieces split anywhere;
// Judge parses an envelope body, repairs common JSON mistakes and
// validates it against its phase's schema; Parse does both for a whole
// response; Fallback applies the keyword patterns to text without an
// envelope; Notice words the re-ask for the model from a Result's errors.
// The package does no I/O.
//
// Comments and tests cite the sections of the orchestrator protocol's
// specification (called "the seed") by their titles: "Phase Types",
// "Parsing Algorithm", "Error Handling", "Fallback Detection".
package envelope
