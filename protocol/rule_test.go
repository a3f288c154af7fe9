package protocol

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/deepseek"
	"github.com/phasegate/phasegate/envelope"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/tools"
)

// TestRuleLabelsCounted: every label a rule's decisions carry is a value
// of the label of the metric that counts them (the counters drop a value
// they do not know, so a verdict, an outcome or a budget without its
// label would go uncounted).
func TestRuleLabelsCounted(t *testing.T) {
	for _, r := range allRules() {
		decided, counted := r.labels()
		if len(decided) == 0 {
			t.Errorf("%T: no labels", r)
		}
		for _, l := range decided {
			if !slices.Contains(counted, l) {
				t.Errorf("%T decides %q, which its metric does not count (values %v)", r, l, counted)
			}
		}
	}
}

// orPass is d, the zero decision (actPass) when nil.
func orPass(d *decision) decision {
	if d == nil {
		return decision{}
	}
	return *d
}

// checkDecision compares a rule's decision with want on the fields want
// sets (act, label, and those a row names), and checks its label is one
// the rule declares.
func checkDecision(t *testing.T, r guardRule, got, want decision) {
	t.Helper()
	if got.act != want.act || got.label != want.label {
		t.Errorf("act %d label %q, want act %d label %q", got.act, got.label, want.act, want.label)
	}
	if want.reason != "" && got.reason != want.reason {
		t.Errorf("reason %q, want %q", got.reason, want.reason)
	}
	if want.notice != "" && got.notice != want.notice {
		t.Errorf("notice %q, want %q", got.notice, want.notice)
	}
	if want.shown != "" && got.shown != want.shown {
		t.Errorf("shown %q, want %q", got.shown, want.shown)
	}
	if want.text != "" && got.text != want.text {
		t.Errorf("text %q, want %q", got.text, want.text)
	}
	if want.field != "" && got.field != want.field || got.final != want.final {
		t.Errorf("field %q final %v, want %q %v", got.field, got.final, want.field, want.final)
	}
	if decided, _ := r.labels(); got.label != "" && !slices.Contains(decided, got.label) {
		t.Errorf("label %q is not one of the rule's labels %v", got.label, decided)
	}
}

func ruleTools(t *testing.T) []chat.Tool {
	t.Helper()
	var ts []chat.Tool
	raw := `[{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}]`
	if err := json.Unmarshal([]byte(raw), &ts); err != nil {
		t.Fatal(err)
	}
	return ts
}

func ruleHistory(t *testing.T, msgs ...string) []chat.Message {
	t.Helper()
	var out []chat.Message
	for _, m := range append([]string{`{"role":"user","content":"look at a.go"}`}, msgs...) {
		var msg chat.Message
		if err := json.Unmarshal([]byte(m), &msg); err != nil {
			t.Fatal(err)
		}
		out = append(out, msg)
	}
	return out
}

// readA is an executed read of a.go, as a turn's history holds it.
var readA = []string{
	`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.go\"}"}}]}`,
	`{"role":"tool","tool_call_id":"c1","content":"package a"}`,
}

func callStep(name, args string) Step {
	return Step{Kind: StepCall, Call: &chat.ToolCall{ID: "c9", Type: "function", Function: chat.FunctionCall{Name: name, Arguments: args}}}
}

func TestCallRule(t *testing.T) {
	fresh := callRule{policy: tools.NewPolicy(ruleTools(t), nil, tools.NewLedger("", ruleHistory(t)))}
	ran := callRule{policy: tools.NewPolicy(ruleTools(t), nil, tools.NewLedger("", ruleHistory(t, readA...)))}
	leak := func(err error) Step {
		return Step{Kind: StepLeaked, Leak: &deepseek.LeakedCall{Call: *callStep("read_file", `{"path":"b.go"}`).Call, Raw: "<call>", Err: err}}
	}
	tests := []struct {
		name string
		rule callRule
		st   Step
		v    view
		want decision
	}{
		{"text", fresh, Step{Kind: StepText, Text: "hi"}, view{}, decision{}},
		{"a new call", fresh, callStep("read_file", `{"path":"a.go"}`), view{}, decision{act: actForward, label: "forward"}},
		{"the forced final answer's call", fresh, callStep("read_file", `{"path":"a.go"}`), view{final: true},
			decision{act: actDrop, label: "dropped", reason: "tool call in the forced final answer"}},
		{"the forced final answer's leaked call", fresh, leak(nil), view{final: true},
			decision{act: actDrop, label: "dropped", reason: "leaked tool call in the forced final answer"}},
		{"an undeclared tool", fresh, callStep("rm", `{}`), view{}, decision{act: actRefuse, label: "undeclared"}},
		{"malformed arguments", fresh, callStep("read_file", `{"path":`), view{}, decision{act: actRefuse, label: "malformed"}},
		{"off its schema", fresh, callStep("read_file", `{"file":"a.go"}`), view{}, decision{act: actRefuse, label: "schema_invalid"}},
		{"a duplicate", ran, callStep("read_file", `{"path":"a.go"}`), view{}, decision{act: actRefuse, label: "duplicate"}},
		{"a leaked call", fresh, leak(nil), view{}, decision{act: actForward, label: "forward"}},
		{"a leaked call that could not be read", fresh, leak(errLeak), view{}, decision{act: actRefuse, label: "malformed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := orPass(tt.rule.judge(&tt.st, &tt.v))
			checkDecision(t, tt.rule, got, tt.want)
			if got.act == actForward || got.act == actRefuse {
				if got.label != string(got.judgement.Verdict) || got.judgement.Tool == "" {
					t.Errorf("judgement %+v, want its verdict as the label and the tool named", got.judgement)
				}
			}
		})
	}
}

var errLeak = json.Unmarshal([]byte("{"), new(any))

func TestProgressRule(t *testing.T) {
	strict := func(maxCycles int, msgs ...string) progressRule {
		l := tools.NewLedger("", ruleHistory(t, msgs...))
		return progressRule{profile: ProfileStrict, maxCycles: maxCycles, maxRefusals: 3, ledger: l, policy: tools.NewPolicy(ruleTools(t), nil, l)}
	}
	agent := strict(1, readA...)
	agent.profile = ProfileAgent
	spent := strict(3)
	spent.spent = &Spent{Budget: metrics.SessionCaps[0], Notice: "The session's budget is spent.", Shown: "session budget spent."}
	cycles := tools.Budget{Executions: 1, MaxExecutions: 1, MaxRefused: 3}
	tests := []struct {
		name string
		rule progressRule
		v    view
		want decision
	}{
		{"budget left", strict(3, readA...), view{}, decision{}},
		{"cycles spent", strict(1, readA...), view{}, decision{act: actFinal, label: budgetCycles,
			notice: tools.CycleBudgetNotice(cycles), shown: tools.ShownCycleBudget(cycles)}},
		{"agent: a fresh execution spends nothing", agent, view{}, decision{}},
		{"refusals spent", strict(3), view{refused: 3}, decision{act: actFinal, label: budgetRefusals,
			notice: tools.DuplicateExceededNotice(tools.Budget{MaxExecutions: 3, Refused: 3, MaxRefused: 3})}},
		{"refusals left", strict(3), view{refused: 2}, decision{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkDecision(t, tt.rule, orPass(tt.rule.judge(&Step{}, &tt.v)), tt.want)
		})
	}
	t.Run("a session's spent budget", func(t *testing.T) {
		got := orPass(spent.judge(&Step{}, &view{}))
		if got.act != actFinal || got.label != spent.spent.Budget || got.notice != spent.spent.Notice || got.shown != spent.spent.Shown {
			t.Errorf("got %+v, want the session's budget, notice and line", got)
		}
		if _, counted := spent.labels(); !slices.Contains(counted, got.label) {
			t.Errorf("label %q not counted", got.label)
		}
	})
}

// saidText is an answer's content as the envelope rule reads it.
type saidText string

func (s saidText) content() string { return string(s) }

func TestEnvelopeRule(t *testing.T) {
	const valid = `{"phase": "aggregation", "data": {"status": "success"}}`
	const repairable = `{"phase": "aggregation", "data": {"status": "success",},}`
	const broken = `{"phase": "aggregation", "data": [1]}`
	optional := newEnvelopeRule(EnvelopeOptional, nil, 2)
	required := newEnvelopeRule(EnvelopeRequired, nil, 2)
	start, end := envelope.StartDelimiter, envelope.EndDelimiter
	left := view{said: saidText("some text")}
	spent := view{said: saidText("some text"), env: envelopeState{retries: 2}}
	tests := []struct {
		name string
		rule envelopeRule
		st   Step
		v    view
		want decision
	}{
		{"text", optional, Step{Kind: StepText, Text: "hi"}, left, decision{}},
		{"open", optional, Step{Kind: StepEnvelopeOpen}, left, decision{act: actHold}},
		{"valid", optional, Step{Kind: StepEnvelope, Text: valid}, left, decision{act: actWrite, label: envelopeValid, text: start + valid + end}},
		{"repaired", optional, Step{Kind: StepEnvelope, Text: repairable}, left, decision{act: actWrite, label: envelopeRepaired}},
		{"invalid: asked again", optional, Step{Kind: StepEnvelope, Text: broken}, left,
			decision{act: actReask, label: envelopeRetried, shown: "The orchestrator envelope could not be used (data is array, want object); asking the model again (1 of 2)."}},
		{"invalid, re-asks spent", optional, Step{Kind: StepEnvelope, Text: broken}, spent, decision{act: actReport, label: envelopeInvalid}},
		{"invalid, re-asks spent, a keyword", optional, Step{Kind: StepEnvelope, Text: broken},
			view{said: saidText("Task complete."), env: envelopeState{retries: 2}}, decision{act: actReport, label: envelopeFallback}},
		{"too long", optional, Step{Kind: StepEnvelopeOver}, left, decision{act: actReask, label: envelopeRetried}},
		{"open at the finish", optional, Step{Kind: StepFinish}, view{said: saidText(""), env: envelopeState{open: true}},
			decision{act: actReask, label: envelopeRetried, reason: "missing end delimiter " + end}},
		{"judged before the finish", required, Step{Kind: StepFinish}, view{env: envelopeState{reported: true}}, decision{}},
		{"missing, optional", optional, Step{Kind: StepFinish}, left, decision{act: actReport, label: envelopeMissing}},
		{"missing, required", required, Step{Kind: StepFinish}, left,
			decision{act: actReask, label: envelopeRetried, reason: "missing start delimiter " + start}},
		{"missing, required, re-asks spent", required, Step{Kind: StepFinish}, spent, decision{act: actReport, label: envelopeInvalid}},
		{"open at a forwarded call", optional, callStep("read_file", `{}`), view{env: envelopeState{open: true}},
			decision{act: actReport, label: envelopeInvalid, reason: "missing end delimiter before a tool call"}},
		{"a call, none open", optional, callStep("read_file", `{}`), view{}, decision{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := orPass(tt.rule.judge(&tt.st, &tt.v))
			checkDecision(t, tt.rule, got, tt.want)
			if got.act == actReask && (got.notice == "" || got.envelope == nil) {
				t.Errorf("re-ask %+v, want its notice and envelope", got)
			}
			if got.act == actReport && got.label != envelopeInvalid && got.report == nil {
				t.Errorf("report missing from %+v", got)
			}
			if strings.Contains(got.shown, start) || strings.Contains(got.shown, end) {
				t.Errorf("shown %q holds a delimiter", got.shown)
			}
		})
	}
}

func TestDegenerateRule(t *testing.T) {
	loop := func(kind StepKind, text, thought string) []Step {
		var out []Step
		for range 400 {
			out = append(out, Step{Kind: kind, Text: text, Thought: thought})
		}
		return out
	}
	tests := []struct {
		name  string
		steps []Step
		v     view
		want  decision
	}{
		{"plain text", []Step{{Kind: StepText, Text: "Use docker-php-ext-install gd."}}, view{}, decision{}},
		{"not text", loop(StepFinish, "mechanism ", ""), view{}, decision{}},
		{"content repeats", loop(StepText, "mechanism ", ""), view{},
			decision{act: actCut, label: degenerateReasked, field: "content", notice: tools.DegenerateNotice, shown: tools.ShownDegenerate(false)}},
		{"reasoning repeats, again", loop(StepText, "", "Wait, let me re-read the question. "), view{cut: true},
			decision{act: actCut, label: degenerateFinished, field: "reasoning_content", final: true, shown: tools.ShownDegenerate(true)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &degenerateScan{}
			var got decision
			for _, st := range tt.steps {
				if got = orPass(d.judge(&st, &tt.v)); got.act != actPass {
					break
				}
			}
			checkDecision(t, d, got, tt.want)
			if got.field != "" && !slices.Contains(metrics.DegenerateFields, got.field) {
				t.Errorf("field %q is not a value of metrics.DegenerateFields", got.field)
			}
		})
	}
}
