package envelope

import (
	"fmt"
	"strings"
)

// Notice words the re-ask for the model after a response whose envelope
// was missing or invalid: what was wrong (r.Errors), then the seed's
// stricter prompt, the exact format with the fields the phase requires.
// want is the phase the caller expects; empty uses r.Phase when it is
// known. It returns "" when r is Valid: there is nothing to re-ask.
func (s *Set) Notice(r Result, want Phase) string {
	if r.Valid {
		return ""
	}
	if want == "" {
		want = r.Phase
	}
	var b strings.Builder
	b.WriteString("Your orchestrator response could not be used:\n")
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "- %s\n", e)
	}
	b.WriteString("Answer again and include exactly one structured response in this format:\n")
	b.WriteString(StartDelimiter + "\n")
	fmt.Fprintf(&b, "{\"phase\": %s, \"data\": {...}}\n", s.phaseHint(want))
	b.WriteString(EndDelimiter + "\n")
	if req := s.Required(want); req != nil {
		fmt.Fprintf(&b, "The data of phase %q must have the fields %s.\n", want, strings.Join(req, ", "))
	}
	b.WriteString("Write strict JSON: double-quoted keys and strings, no trailing commas, no code fences, no comments.")
	return b.String()
}

func (s *Set) phaseHint(p Phase) string {
	if s.Known(p) {
		return quoteJSON(string(p))
	}
	return "one of " + s.phaseList()
}
