package sim

import (
	"strings"

	"github.com/phasegate/phasegate/chat"
)

// OrchestratorModel plays an orchestrator agent's model that answers in
// the structured envelopes of the orchestrator protocol (package
// envelope: a JSON block naming its phase and its data). The
// last user message picks the scenario:
//   - "broken": an envelope missing a required field, then a valid one
//     once a notice follows;
//   - "missing": no envelope ("Analysis complete."), then a valid one once
//     a notice follows;
//   - "repair": an envelope with trailing commas and single-quoted keys,
//     valid once repaired;
//   - anything else: a valid analysis envelope at once.
//
// The envelope is written in pieces of a few bytes, its delimiters split
// across chunks, as a model streams it.
const OrchestratorModel = "phasegate-sim-orchestrator"

// The envelope delimiters of the orchestrator protocol.
const (
	envelopeStart = "<<<ORCHESTRATOR_RESPONSE>>>"
	envelopeEnd   = "<<<END_ORCHESTRATOR_RESPONSE>>>"
)

func orchestratorDecide(req *chat.Request) turn {
	said := ""
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == chat.RoleUser {
			said = strings.ToLower(req.Messages[i].Text())
			break
		}
	}
	asked := readTurn(req).notices > 0
	envelope := func(body string) string {
		return "I explored the codebase.\n" + envelopeStart + "\n" + body + "\n" + envelopeEnd + "\nShall I break it into tasks?"
	}
	const valid = `{"phase": "analysis", "data": {"summary": "Found 3 modules: api, store, web", "recommended_splits": 3, "estimated_complexity": "medium"}}`
	switch {
	case asked:
		return turn{reasoning: "Write the envelope exactly as asked.", text: envelope(valid)}
	case strings.Contains(said, "broken"):
		return turn{reasoning: "Report the analysis.", text: envelope(`{"phase": "analysis", "data": {"summary": "Found 3 modules", "estimated_complexity": "huge"}}`)}
	case strings.Contains(said, "missing"):
		return turn{reasoning: "Report the analysis.", text: "Analysis complete. There are three modules: api, store and web."}
	case strings.Contains(said, "repair"):
		return turn{reasoning: "Report the analysis.", text: envelope(`{'phase': 'analysis', data: {summary: 'Found 3 modules', 'recommended_splits': 3,},}`)}
	default:
		return turn{reasoning: "Report the analysis.", text: envelope(valid)}
	}
}
