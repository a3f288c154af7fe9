package protocol_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/envelope"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
)

const (
	envStart = envelope.StartDelimiter
	envEnd   = envelope.EndDelimiter
	// validAnalysis is the body of a valid analysis envelope.
	validAnalysis = `{"phase": "analysis", "data": {"summary": "Found 5 main modules", "recommended_splits": 5}}`
	// noSplits lacks the analysis phase's recommended_splits.
	noSplits = `{"phase": "analysis", "data": {"summary": "Found 5 main modules"}}`
	// trailingComma is valid once repaired.
	trailingComma = `{"phase": "analysis", "data": {"summary": "Found 5", "recommended_splits": 5,},}`
)

// envelopeReport is the envelope field of the phase metadata.
func envelopeReport(t *testing.T, a answer) *protocol.EnvelopeReport {
	t.Helper()
	last := a.chunks[len(a.chunks)-1]
	var top struct {
		Ext struct {
			Envelope *protocol.EnvelopeReport `json:"envelope"`
		} `json:"phasegate"`
	}
	if err := json.Unmarshal(last.raw, &top); err != nil {
		t.Fatalf("last chunk: %v\n%s", err, last.raw)
	}
	return top.Ext.Envelope
}

// runEnvelope runs the guard with an envelope rule against the scripted
// answers and returns what the client got.
func runEnvelope(t *testing.T, mode protocol.EnvelopeMode, retries int, m *metrics.Metrics, replies ...reply) (answer, *fakeUpstream) {
	t.Helper()
	u := newUpstream(t, replies...)
	g := protocol.NewTwoStage(protocol.TwoStageConfig{MaxEnvelopeRetries: retries, Metrics: m}, nil)
	a := read(t, run(t, g, exchange(newRequest(t, true, history(), `"stream_options":{"include_usage":true}`), u, protocol.Limits{Envelope: mode})))
	u.checkClosed(t)
	return a, u
}

func textReply(pieces ...string) reply {
	return streamReply(stream().Role().Content(pieces...).Finish("stop").Usage(10, 5, nil).Done())
}

// An envelope split anywhere, even inside its delimiters, is held back and
// forwarded whole as written; the text around it streams as usual.
func TestEnvelopeValidSplitAcrossChunks(t *testing.T) {
	whole := "I analysed it.\n" + envStart + "\n" + validAnalysis + "\n" + envEnd + "\nShall I go on?"
	var pieces []string
	for i := 0; i < len(whole); i += 7 {
		pieces = append(pieces, whole[i:min(i+7, len(whole))])
	}
	a, u := runEnvelope(t, protocol.EnvelopeRequired, 2, nil, textReply(pieces...))
	if a.content != whole {
		t.Errorf("content = %q, want the answer as written %q", a.content, whole)
	}
	want := &protocol.EnvelopeReport{Phase: "analysis", Found: true, Valid: true, Errors: []string{}}
	if diff := cmp.Diff(want, envelopeReport(t, a)); diff != "" {
		t.Errorf("envelope report (-want +got):\n%s", diff)
	}
	if n := len(u.sent()); n != 1 {
		t.Errorf("upstream calls = %d, want 1", n)
	}
	// The text before the envelope went out before the envelope was
	// complete: the first content chunk is the upstream's own.
	if first := a.chunks[1]; first.Choices[0].Delta.Content == nil || *first.Choices[0].Delta.Content != pieces[0] {
		t.Errorf("first content chunk = %s, want %q as it came", first.raw, pieces[0])
	}
}

func TestEnvelopeRepairedIsForwardedRepaired(t *testing.T) {
	a, _ := runEnvelope(t, protocol.EnvelopeOptional, 2, nil, textReply("Done.\n"+envStart, "\n"+trailingComma+"\n", envEnd))
	body := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(a.content, "Done.\n"), envStart), envEnd))
	var parsed struct {
		Phase string
		Data  struct {
			Summary           string `json:"summary"`
			RecommendedSplits int    `json:"recommended_splits"`
		}
	}
	if err := json.Unmarshal([]byte(body), &parsed); err != nil {
		t.Fatalf("the forwarded envelope is not JSON: %v\n%q", err, a.content)
	}
	if parsed.Phase != "analysis" || parsed.Data.RecommendedSplits != 5 || parsed.Data.Summary != "Found 5" {
		t.Errorf("forwarded envelope = %+v", parsed)
	}
	if r := envelopeReport(t, a); r == nil || !r.Valid || !r.Repaired || r.Retries != 0 {
		t.Errorf("envelope report = %+v, want valid and repaired", r)
	}
}

// An invalid envelope is never shown: the answer is closed, and the model
// is asked again with what it wrote and a notice naming what was wrong.
func TestEnvelopeInvalidIsAskedAgain(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, []string{"p"})
	broken := streamReply(stream().Role().Content("Here:\n", envStart, noSplits, envEnd, " trailing words", " more").Finish("stop").Done())
	a, u := runEnvelope(t, protocol.EnvelopeOptional, 2, m, broken, textReply("Again:\n"+envStart+validAnalysis+envEnd))
	if strings.Contains(a.content, noSplits) {
		t.Errorf("the client saw the broken envelope: %q", a.content)
	}
	if !strings.Contains(a.content, validAnalysis) || !strings.HasPrefix(a.content, "Here:\n") {
		t.Errorf("content = %q, want the first answer's text, the notice, then the valid envelope", a.content)
	}
	if !strings.Contains(a.content, "**System Notice**: The orchestrator envelope could not be used (missing required field data.recommended_splits); asking the model again (1 of 2).") {
		t.Errorf("content = %q, want the notice line", a.content)
	}
	if got := u.response(t, 0); got.read >= got.total {
		t.Errorf("the broken answer was read to its end (%d of %d events): it should be closed at the envelope", got.read, got.total)
	}
	sent := u.sent()
	if len(sent) != 2 {
		t.Fatalf("upstream calls = %d, want 2", len(sent))
	}
	extra := messagesAfter(sent[1], len(sent[0].Messages))
	if len(extra) != 2 || extra[0].Role != chat.RoleAssistant || !strings.Contains(extra[0].Content, noSplits) ||
		extra[1].Role != chat.RoleSystem || !strings.Contains(extra[1].Content, "missing required field data.recommended_splits") ||
		!strings.Contains(extra[1].Content, `"phase": "analysis"`) {
		t.Errorf("re-ask appended %+v, want the broken answer and a notice naming the missing field", extra)
	}
	if r := envelopeReport(t, a); r == nil || !r.Valid || r.Retries != 1 {
		t.Errorf("envelope report = %+v, want valid after 1 retry", r)
	}
	if got := counterValue(t, reg, "phasegate_envelopes_total", "retried", "analysis"); got != 1 {
		t.Errorf("retried envelopes = %v, want 1", got)
	}
	if got := counterValue(t, reg, "phasegate_envelopes_total", "valid", "analysis"); got != 1 {
		t.Errorf("valid envelopes = %v, want 1", got)
	}
}

func TestEnvelopeMissing(t *testing.T) {
	plain := "Analysis complete; breakdown ready."
	t.Run("required is asked again", func(t *testing.T) {
		a, u := runEnvelope(t, protocol.EnvelopeRequired, 2, nil, textReply(plain), textReply(envStart+validAnalysis+envEnd))
		if n := len(u.sent()); n != 2 {
			t.Fatalf("upstream calls = %d, want 2", n)
		}
		last := u.sent()[1].Messages
		if n := last[len(last)-1]; n.Role != chat.RoleSystem || !strings.Contains(n.Text(), "missing start delimiter "+envStart) {
			t.Errorf("notice = %q, want the missing delimiter named", n.Text())
		}
		if r := envelopeReport(t, a); r == nil || !r.Valid || r.Retries != 1 {
			t.Errorf("envelope report = %+v", r)
		}
	})
	t.Run("optional reports the keyword fallback", func(t *testing.T) {
		a, u := runEnvelope(t, protocol.EnvelopeOptional, 2, nil, textReply(plain))
		if n := len(u.sent()); n != 1 {
			t.Errorf("upstream calls = %d, want 1", n)
		}
		if a.content != plain {
			t.Errorf("content = %q, want %q", a.content, plain)
		}
		want := &protocol.EnvelopeReport{Errors: []string{"missing start delimiter " + envStart},
			Fallback: []envelope.Signal{envelope.SignalAnalysisComplete, envelope.SignalTasksReady}}
		if diff := cmp.Diff(want, envelopeReport(t, a)); diff != "" {
			t.Errorf("envelope report (-want +got):\n%s", diff)
		}
	})
	t.Run("unterminated is asked again", func(t *testing.T) {
		a, u := runEnvelope(t, protocol.EnvelopeOptional, 1, nil, textReply("x ", envStart, validAnalysis), textReply(envStart+validAnalysis+envEnd))
		if n := len(u.sent()); n != 2 {
			t.Fatalf("upstream calls = %d, want 2", n)
		}
		if strings.Count(a.content, validAnalysis) != 1 {
			t.Errorf("content = %q, want the unterminated envelope held back", a.content)
		}
	})
}

// With the re-asks spent the answer still ends, once: the broken envelope
// held back, the report invalid with its errors and the fallback verdict.
func TestEnvelopeBudgetSpent(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, []string{"p"})
	bad := func() reply { return textReply("Task complete. ", envStart+noSplits+envEnd, " Bye.") }
	a, u := runEnvelope(t, protocol.EnvelopeRequired, 1, m, bad(), bad())
	if n := len(u.sent()); n != 2 {
		t.Errorf("upstream calls = %d, want 2 (1 retry)", n)
	}
	if strings.Contains(a.content, noSplits) {
		t.Errorf("the client saw a broken envelope: %q", a.content)
	}
	if !strings.HasSuffix(a.content, " Bye.") {
		t.Errorf("content = %q, want the last answer's text after its envelope", a.content)
	}
	want := &protocol.EnvelopeReport{Phase: "analysis", Found: true, Errors: []string{"missing required field data.recommended_splits"},
		Retries: 1, Fallback: []envelope.Signal{envelope.SignalWorkerDone}}
	if diff := cmp.Diff(want, envelopeReport(t, a)); diff != "" {
		t.Errorf("envelope report (-want +got):\n%s", diff)
	}
	if a.finish() != chat.FinishStop {
		t.Errorf("finish = %q, want stop", a.finish())
	}
	if got := counterValue(t, reg, "phasegate_envelopes_total", "fallback", "analysis"); got != 1 {
		t.Errorf("fallback envelopes = %v, want 1", got)
	}
}

// A response that ends in a tool call is the tool guard's: no envelope is
// asked for.
func TestEnvelopeToolCallIsTheGuards(t *testing.T) {
	call := streamReply(stream().Role().ToolCall(0, "call_1", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Done())
	a, u := runEnvelope(t, protocol.EnvelopeRequired, 2, nil, call)
	if n := len(u.sent()); n != 1 {
		t.Errorf("upstream calls = %d, want 1", n)
	}
	if a.finish() != chat.FinishToolCalls || len(a.calls) != 1 {
		t.Errorf("finish = %q, calls = %d, want the call forwarded", a.finish(), len(a.calls))
	}
	if r := envelopeReport(t, a); r != nil {
		t.Errorf("envelope report = %+v, want none for a tool call", r)
	}
}

// Without an envelope rule the delimiters are text like any other, and
// every text chunk is the upstream's own bytes.
func TestEnvelopeOffLeavesTextAlone(t *testing.T) {
	up := textReply("a ", envStart, noSplits, envEnd)
	a, _ := runEnvelope(t, protocol.EnvelopeOff, 2, nil, up)
	for i, c := range a.chunks[:5] {
		if got := string(withoutExtension(t, c.raw)); got != up.data[i] {
			t.Errorf("chunk %d = %s, want the upstream's %s", i, got, up.data[i])
		}
	}
	if r := envelopeReport(t, a); r != nil {
		t.Errorf("envelope report = %+v, want none", r)
	}
}

func TestParseEnvelopeMode(t *testing.T) {
	for in, want := range map[string]protocol.EnvelopeMode{"": "", "off": "", "optional": "optional", " Required ": "required"} {
		if got, err := protocol.ParseEnvelopeMode(in); err != nil || got != want {
			t.Errorf("ParseEnvelopeMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := protocol.ParseEnvelopeMode("always"); err == nil {
		t.Error("ParseEnvelopeMode(always) accepted")
	}
}

// counterValue returns the value of the counter of name whose label values, in the order
// of their names (outcome before phase), are labels.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var vals []string
			for _, lp := range mt.GetLabel() {
				vals = append(vals, lp.GetValue())
			}
			if cmp.Equal(vals, labels) {
				return mt.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return 0
}

// An envelope that outgrows the bound with no re-ask left is dropped up to
// its end delimiter: none of it reaches the client, the text after it does.
func TestEnvelopeOversizeIsDropped(t *testing.T) {
	pieces := []string{"x ", envStart, `{"phase":"analysis","data":{"summary":"`}
	for range protocol.MaxEnvelopeBytes/1024 + 10 {
		pieces = append(pieces, strings.Repeat("y", 1024))
	}
	pieces = append(pieces, `","recommended_splits":1}}`, envEnd, " bye")
	a, _ := runEnvelope(t, protocol.EnvelopeRequired, 0, nil, textReply(pieces...))
	if a.content != "x  bye" {
		t.Errorf("content = %.80q (%d bytes), want only the text around the envelope", a.content, len(a.content))
	}
	if r := envelopeReport(t, a); r == nil || r.Valid || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "over 262144 bytes") {
		t.Errorf("envelope report = %+v, want invalid, over the bound", r)
	}
}

// A re-ask decided at the finish reads the answer on to its usage: the
// client's usage is what the upstream reported for both calls.
func TestEnvelopeReaskAtFinishKeepsReportedUsage(t *testing.T) {
	a, u := runEnvelope(t, protocol.EnvelopeRequired, 2, nil, textReply("no envelope here"), textReply(envStart+validAnalysis+envEnd))
	if got := u.response(t, 0); got.read != got.total {
		t.Errorf("the first answer was read %d of %d events, want to its end", got.read, got.total)
	}
	if len(a.usage) != 1 {
		t.Fatalf("usage chunks = %d, want 1", len(a.usage))
	}
	if got := usageMap(t, a.usage[0]); got["prompt_tokens"] != 20.0 || got["completion_tokens"] != 10.0 {
		t.Errorf("usage = %v, want the two reported usages summed (20 and 10)", got)
	}
	if last := a.chunks[len(a.chunks)-1]; last.Ext == nil || last.Ext.UsageEstimated {
		t.Errorf("usage marked estimated: %s", last.raw)
	}
}

// The rule applies to each answer: a valid envelope in an answer whose
// tool call was refused does not stand for the next answer.
func TestEnvelopeVerdictIsPerAnswer(t *testing.T) {
	dup := streamReply(stream().Role().Content(envStart+validAnalysis+envEnd).
		ToolCall(0, "call_2", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Usage(10, 5, nil).Done())
	u := newUpstream(t, dup, textReply("plain"), textReply(envStart+validAnalysis+envEnd))
	g := protocol.NewTwoStage(protocol.TwoStageConfig{MaxEnvelopeRetries: 2}, nil)
	req := newRequest(t, true, history(ran("call_1", "read_file", `{"path":"a.go"}`)), "")
	a := read(t, run(t, g, exchange(req, u, protocol.Limits{Envelope: protocol.EnvelopeRequired})))
	if n := len(u.sent()); n != 3 {
		t.Errorf("upstream calls = %d, want 3: refused call, missing envelope asked again, valid", n)
	}
	if r := envelopeReport(t, a); r == nil || !r.Valid || r.Retries != 1 {
		t.Errorf("envelope report = %+v, want valid after 1 retry", r)
	}
	u.checkClosed(t)
}

// Text the scan holds when a call is forwarded goes out before the call.
func TestEnvelopeHeldTextBeforeToolCall(t *testing.T) {
	call := streamReply(stream().Role().Content("see a <<").ToolCall(0, "call_1", "read_file", `{"path":"a.go"}`).Finish("tool_calls").Done())
	a, _ := runEnvelope(t, protocol.EnvelopeOptional, 2, nil, call)
	if a.content != "see a <<" || len(a.calls) != 1 {
		t.Errorf("content = %q, calls = %d; want the held text, then the call", a.content, len(a.calls))
	}
}
