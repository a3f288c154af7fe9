package proxy_test

import (
	"regexp"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/phasegate/phasegate/envelope"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
	"github.com/phasegate/phasegate/sim"
)

// TestEnvelopeAskedAgainReadsOnce: when the guard asks an envelope again,
// the client reads the model's text once and the notice as a paragraph of
// its own: the text the model repeats before its new envelope is not sent
// twice, text it changed is sent whole, and no notice sits between more
// than one blank line. Streamed and whole, through a real server.
func TestEnvelopeAskedAgainReadsOnce(t *testing.T) {
	client := orchestratorGateway(t, proxy.EnvelopeRule{Pattern: "phasegate-sim-orch*", Mode: protocol.EnvelopeRequired})
	const prose = "I explored the codebase."
	blankLines := regexp.MustCompile(`\n{3,}`)
	for _, tc := range []struct {
		prompt    string
		wantProse int
		wantFirst string // the text the client reads first
	}{
		{prompt: "Analyse the code (broken).", wantProse: 1, wantFirst: prose + "\n\n**System Notice**: "},
		{prompt: "Analyse the code (missing).", wantProse: 1, wantFirst: "Analysis complete. There are three modules: api, store and web.\n\n**System Notice**: "},
	} {
		for _, stream := range []bool{true, false} {
			t.Run(tc.prompt+map[bool]string{true: " stream", false: " whole"}[stream], func(t *testing.T) {
				req := openai.ChatCompletionRequest{Model: sim.OrchestratorModel, Messages: userMessage(tc.prompt)}
				content := askContent(t, client, req, stream)
				if got := strings.Count(content, prose); got != tc.wantProse {
					t.Errorf("the client read %q %d times, want %d:\n%q", prose, got, tc.wantProse, content)
				}
				if !strings.HasPrefix(content, tc.wantFirst) {
					t.Errorf("the client's content does not start with %q:\n%q", tc.wantFirst, content)
				}
				if m := blankLines.FindString(content); m != "" {
					t.Errorf("the client's content holds %d newlines in a row:\n%q", len(m), content)
				}
				if r := envelope.Parse(content); !r.Valid {
					t.Errorf("no valid envelope: %+v\n%q", r, content)
				}
			})
		}
	}
}
