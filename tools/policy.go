package tools

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/schema"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// Verdict is what the guard does with the first complete tool call of a
// response. Values are the metric label spelling.
type Verdict string

// Verdicts.
const (
	// VerdictForward: a new call of a declared, allowed tool whose
	// arguments fit its schema; the client gets it.
	VerdictForward Verdict = "forward"
	// VerdictDuplicate: the same call was executed earlier in the turn.
	VerdictDuplicate Verdict = "duplicate"
	// VerdictMalformed: the arguments are not one JSON object.
	VerdictMalformed Verdict = "malformed"
	// VerdictUndeclared: the request declares no tool of that name.
	VerdictUndeclared Verdict = "undeclared"
	// VerdictSchemaInvalid: the arguments do not fit the tool's parameters
	// schema.
	VerdictSchemaInvalid Verdict = "schema_invalid"
	// VerdictNotAllowed: plan mode, and the tool is not on its allowlist.
	VerdictNotAllowed Verdict = "not_allowed"
	// VerdictNoProgress: a call that would repeat earlier ones (the same
	// arguments, or the same up to form) after they brought nothing new:
	// a repeatable tool whose last two identical calls returned the same
	// result, or, under the progress rule, a loop that wasted its calls.
	VerdictNoProgress Verdict = "no_progress"
	// VerdictCycle: under the progress rule, a call that would continue a
	// cycle of 2 to 4 calls whose calls and results repeat (A B A B), after
	// the cycle wasted its calls.
	VerdictCycle Verdict = "cycle"
	// VerdictFailingStreak: under the progress rule, a call of a tool
	// whose last calls in a row all failed with the same error.
	VerdictFailingStreak Verdict = "failing_streak"
)

// Verdicts returns every verdict, for initialising metric labels to 0.
func Verdicts() []Verdict {
	return []Verdict{VerdictForward, VerdictDuplicate, VerdictMalformed, VerdictUndeclared, VerdictSchemaInvalid, VerdictNotAllowed,
		VerdictNoProgress, VerdictCycle, VerdictFailingStreak}
}

// Loop reports whether the verdict refuses a call for looping: a repeat
// that makes no progress, in any shape.
func (v Verdict) Loop() bool {
	switch v {
	case VerdictDuplicate, VerdictNoProgress, VerdictCycle, VerdictFailingStreak:
		return true
	}
	return false
}

// Judgement is the Policy's decision on one call.
type Judgement struct {
	Verdict Verdict
	// Tool is the name the call gave, as the model wrote it.
	Tool string
	// Signature is the call's signature; "" when the arguments are
	// malformed.
	Signature Signature
	// Reason says what was decided and why, in a sentence fit for a notice
	// to the model: it names the tool but never quotes argument values.
	Reason string
	// Variant is set on a no_progress verdict whose call repeats the
	// earlier ones only up to form (Form), not exactly.
	Variant bool
	// Wasted is, on a no_progress or cycle verdict of the progress rule,
	// the number of calls the turn wasted since anything new came back.
	Wasted int
	// Quote is, on a failing_streak verdict, the line of the tool's last
	// result that says what went wrong, for the notice to quote. It is the
	// tool's output: it goes to the model and the client, never to logs
	// or traces.
	Quote string
	// SchemaErr is a *SchemaError when the declared tool's parameters
	// schema does not compile. The call was then judged as if the tool had
	// no schema: a broken schema is the client's fault, not the model's, and
	// must not get calls refused. The caller logs it.
	SchemaErr error
}

// SchemaError is a parameters schema that does not compile.
type SchemaError struct {
	Tool string
	Err  error
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("compile parameters schema of tool %q: %v", e.Tool, e.Err)
}

func (e *SchemaError) Unwrap() error { return e.Err }

// Policy judges the tool calls of one request against the tools it
// declares, the plan-mode allowlist and the turn's ledger. Build one per
// request. Schemas are compiled lazily, at most once each, so a Policy is
// not safe for concurrent use.
type Policy struct {
	ledger   *Ledger
	declared map[string]*declaredTool
	names    []string // declared function names, in request order
	allow    map[string]struct{}
	allowed  []string // declared names on the allowlist, in request order
	// repeatable are the tools exempt from the duplicate rule while their
	// results change ("edit → run tests → edit → run tests").
	repeatable map[string]struct{}
	// progressive: every tool may repeat while it makes progress, and a
	// call that repeats an earlier one up to form without progress is
	// refused (see Progressive).
	progressive bool
	// resultDuplicates: an exact repeat whose result may have changed
	// since is forwarded (see ResultDuplicates).
	resultDuplicates bool
	// maxWasted and maxFailing are the progress rule's limits.
	maxWasted, maxFailing int
	prog                  *progress // built on the first judgement that needs it
}

// Progressive switches the policy to judge repeats by progress, for every
// tool. An execution of the turn is fresh when no earlier one had its
// tool, its Form and its result (as NormaliseResult reads them; a run
// that lost its output, or printed where the run before it lost its own,
// with nothing new between them, brings no new result), and
// wastes its call when it repeats an earlier execution and nothing fresh
// came back since. A call that would waste one more call, once the turn
// has wasted maxWasted since its last fresh execution, is refused: as a
// cycle when it continues a cycle of 2 to 4 calls whose calls and
// results repeat, else as no_progress. A call of a tool whose last
// maxFailing calls in a row failed with the same error is refused as a
// failing_streak. Any other call, an identical repeat included, is
// forwarded. Zero limits take DefaultMaxWasted and
// DefaultMaxFailingStreak. Repeatable has no further effect. It returns
// p.
func (p *Policy) Progressive(maxWasted, maxFailing int) *Policy {
	p.progressive = true
	p.maxWasted, p.maxFailing = cmp.Or(maxWasted, DefaultMaxWasted), cmp.Or(maxFailing, DefaultMaxFailingStreak)
	return p
}

// ResultDuplicates makes the strict rule judge an exact repeat by its
// result (STRICT_DUPLICATES=results): a call identical to an executed one
// is forwarded when its result may have changed since (its last two runs
// returned different results, or a call since brought something new, such
// as an edit between two reads), and refused as a duplicate otherwise. It
// returns p.
func (p *Policy) ResultDuplicates() *Policy {
	p.resultDuplicates = true
	return p
}

// Stale returns the number of executed calls of the turn that brought
// nothing new: each repeated an earlier call of the turn (the same tool,
// the same arguments up to form) and got the same result. The agent
// profile's cycle budget counts these.
func (p *Policy) Stale() int { return p.progress().stale }

// progress is the turn's progress, built once.
func (p *Policy) progress() *progress {
	if p.prog == nil {
		p.prog = newProgress(p.ledger, p.kindsOf)
	}
	return p.prog
}

// kindsOf tells the language of the string arguments of tool name, with
// what its schema says, read once.
func (p *Policy) kindsOf(name string) kinds {
	t := p.declared[name]
	if t == nil {
		return kinds{tool: name}
	}
	if !t.hinted {
		t.hints, t.hinted = schemaHints(t.params), true
		if len(t.params) > 0 {
			t.schemaDigest = digestOf(string(t.params)).hash
		}
	}
	return kinds{tool: name, hints: t.hints, schema: t.schemaDigest}
}

// Repeatable exempts the named tools from the duplicate rule while their
// results change: an identical call is forwarded unless the last two
// identical calls of the turn returned the same result (no progress). The
// cycle budget still counts them. It returns p.
func (p *Policy) Repeatable(names []string) *Policy {
	if len(names) == 0 {
		return p
	}
	p.repeatable = make(map[string]struct{}, len(names))
	for _, n := range names {
		p.repeatable[n] = struct{}{}
	}
	return p
}

type declaredTool struct {
	params   json.RawMessage
	compiled bool
	schema   *jsonschema.Schema // nil: no schema, or it did not compile
	err      error
	// hints are the languages the schema gives string parameters, read
	// once hinted.
	hints        map[string]stringKind
	hinted       bool
	schemaDigest uint64
}

// NewPolicy returns the policy of a request. tools are the tools the
// client declared, before any plan-mode filtering: a call of a declared
// tool off the allowlist is not_allowed, not undeclared. allow is the
// plan-mode allowlist of function names; nil means no plan mode, an empty
// non-nil list allows nothing. When two tools share a name the first wins.
// ledger's project id scopes the signatures; a nil ledger is an empty
// history in project "".
func NewPolicy(tools []chat.Tool, allow []string, ledger *Ledger) *Policy {
	if ledger == nil {
		ledger = &Ledger{}
	}
	p := &Policy{ledger: ledger, declared: make(map[string]*declaredTool, len(tools))}
	for _, t := range tools {
		name := t.Function.Name
		if name == "" {
			continue
		}
		if _, dup := p.declared[name]; dup {
			continue
		}
		p.declared[name] = &declaredTool{params: t.Function.Parameters}
		p.names = append(p.names, name)
	}
	if allow != nil {
		p.allow = make(map[string]struct{}, len(allow))
		for _, name := range allow {
			p.allow[name] = struct{}{}
		}
		for _, name := range p.names {
			if _, ok := p.allow[name]; ok {
				p.allowed = append(p.allowed, name)
			}
		}
	}
	return p
}

// Judge decides on one complete call. The checks run in this order, and
// the first that fails gives the verdict:
//
//  1. malformed: without parsed arguments there is nothing else to check
//     reliably (no signature, no schema), and a cut-off call is most often
//     a broken stream, which the model fixes by sending the call again.
//  2. undeclared: a tool that does not exist is the most basic fault of
//     the call; telling the model about plan mode or parameters of a tool
//     it cannot call would mislead it.
//  3. not_allowed: a call plan mode refuses anyway need not have its
//     arguments fixed.
//  4. schema_invalid: the call is wrong in itself, whatever the history.
//  5. duplicate: the only check that depends on the history comes last, so
//     the duplicate count, which can force the final answer, counts only
//     calls the client would otherwise have received.
//  6. forward.
func (p *Policy) Judge(call chat.ToolCall) Judgement {
	j := p.judge(call)
	j.Tool = call.Function.Name
	return j
}

func (p *Policy) judge(call chat.ToolCall) Judgement {
	name := call.Function.Name
	args, problem := parseArguments(call.Function.Arguments)
	if problem != "" {
		return Judgement{
			Verdict: VerdictMalformed,
			Reason:  fmt.Sprintf("The arguments of tool %s are malformed: %s.", QuoteName(name), problem),
		}
	}
	tool, ok := p.declared[name]
	if !ok {
		return Judgement{
			Verdict: VerdictUndeclared,
			Reason:  fmt.Sprintf("Tool %s is not declared in this request; %s.", QuoteName(name), nameList("declared tools", "no tools are declared", p.names)),
		}
	}
	if p.allow != nil {
		if _, ok := p.allow[name]; !ok {
			return Judgement{
				Verdict: VerdictNotAllowed,
				Reason:  fmt.Sprintf("Tool %s is not allowed in plan mode; %s.", QuoteName(name), nameList("allowed tools", "no tools are allowed", p.allowed)),
			}
		}
	}
	var j Judgement
	if schema := p.schema(name, tool); schema != nil {
		if err := schema.Validate(any(args)); err != nil {
			return Judgement{
				Verdict: VerdictSchemaInvalid,
				Reason:  fmt.Sprintf("The arguments of tool %s do not match its parameters schema: %s.", QuoteName(name), describeValidation(err)),
			}
		}
	} else if tool.err != nil {
		j.SchemaErr = tool.err
	}
	j.Signature = signatureOf(p.ledger.projectID, name, args)
	if p.progressive {
		return p.judgeProgress(j, call, args)
	}
	if p.ledger.Blocked(j.Signature) {
		return p.judgeRepeat(j, name)
	}
	j.Verdict = VerdictForward
	j.Reason = fmt.Sprintf("Tool %s is declared and was not executed with these arguments in this turn.", QuoteName(name))
	return j
}

// judgeRepeat decides, by the strict rules, on a call identical to one
// executed in the turn: a duplicate, but for a repeatable tool whose
// result changed and, with ResultDuplicates, a call whose result may
// have changed since.
func (p *Policy) judgeRepeat(j Judgement, name string) Judgement {
	_, repeatable := p.repeatable[name]
	switch {
	case p.resultDuplicates && p.progress().changedSince(j.Signature):
		j.Verdict = VerdictForward
		j.Reason = fmt.Sprintf("Tool %s was executed with the same arguments in this turn, but its result may have changed since.", QuoteName(name))
	case !repeatable:
		j.Verdict = VerdictDuplicate
		j.Reason = fmt.Sprintf("Tool %s was already executed with the same arguments in this turn.", QuoteName(name))
	case p.ledger.NoProgress(j.Signature):
		j.Verdict = VerdictNoProgress
		j.Reason = fmt.Sprintf("Tool %s is repeatable, but its last two calls with the same arguments in this turn returned the same result.", QuoteName(name))
	default:
		j.Verdict = VerdictForward
		j.Reason = fmt.Sprintf("Tool %s is repeatable and its result changed since its last identical call.", QuoteName(name))
	}
	return j
}

// judgeProgress decides on a call whose tool, plan mode and schema
// passed, by the progress rule of Progressive.
func (p *Policy) judgeProgress(j Judgement, call chat.ToolCall, args map[string]any) Judgement {
	name := call.Function.Name
	pr := p.progress()
	r := pr.repeatOf(pr.formDigest(p.ledger.projectID, name, args, call.Function.Arguments, p.kindsOf(name)))
	// A failing streak first: its notice quotes the error.
	if fs := pr.failingStreakOf(); fs.tool == name && fs.calls >= p.maxFailing {
		j.Verdict, j.Quote = VerdictFailingStreak, fs.line
		j.Reason = fmt.Sprintf("Tool %s failed %d times in a row in this turn with the same error.", QuoteName(name), fs.calls)
		return j
	}
	if r.wasted && pr.streak+1 > p.maxWasted {
		return p.loop(j, name, r)
	}
	j.Verdict = VerdictForward
	j.Reason = fmt.Sprintf("Tool %s is declared, and the turn made progress since the call's last run of the same form, or the turn wasted at most %d calls.", QuoteName(name), p.maxWasted)
	return j
}

// loop refuses a call that would waste one more call of a loop: as a
// cycle when it continues one, else as no progress.
func (p *Policy) loop(j Judgement, name string, r repeat) Judgement {
	ex := p.ledger.executed
	j.Wasted = p.prog.streak
	if r.period >= 2 {
		j.Verdict = VerdictCycle
		j.Reason = fmt.Sprintf("Tool %s would continue a cycle of %d calls whose calls and results repeat in this turn (its last run was call %s), and %d calls since anything new came back were wasted: running the cycle again cannot tell you anything new.",
			QuoteName(name), r.period, QuoteName(ex[r.last].Call.ID), p.prog.streak)
		return j
	}
	how := "arguments that differ from theirs only in form (white space, quoting that changes nothing, comments, key order, number spelling)"
	identical := ex[r.last].Signature == j.Signature && (r.earlier < 0 || ex[r.earlier].Signature == j.Signature)
	if identical {
		how = "the same arguments"
	}
	runs := QuoteName(ex[r.last].Call.ID)
	if r.earlier >= 0 {
		runs = QuoteName(ex[r.earlier].Call.ID) + " and " + runs
	}
	j.Verdict, j.Variant = VerdictNoProgress, !identical
	j.Reason = fmt.Sprintf("Tool %s was called again with %s as its calls %s in this turn, which returned the same result, and %d calls since anything new came back were wasted: running it again cannot tell you anything new.",
		QuoteName(name), how, runs, p.prog.streak)
	return j
}

func (p *Policy) schema(name string, t *declaredTool) *jsonschema.Schema {
	if !t.compiled {
		t.compiled = true
		if len(t.params) > 0 && string(t.params) != "null" {
			sch, err := schemas.compile(t.params)
			if err != nil {
				t.err = &SchemaError{Tool: name, Err: err}
			}
			t.schema = sch
		}
	}
	return t.schema
}

// describeValidation lists the leaf failures of a validation error by
// schema location, the part of the schema that failed, never by argument
// content (instance paths are made of the model's keys), in the order of
// schema.Describe.
func describeValidation(err error) string {
	out := schema.Describe(err, describeLeaf)
	const most = 5
	if len(out) > most {
		out = append(out[:most], fmt.Sprintf("and %d more", len(out)-most))
	}
	if len(out) == 0 {
		return "validation failed"
	}
	return strings.Join(out, "; ")
}

func describeLeaf(e *jsonschema.ValidationError) string {
	var msg string
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		names := make([]string, len(k.Missing))
		for i, n := range k.Missing {
			names[i] = strconv.Quote(n) // schema names, not argument content
		}
		msg = "missing required " + plural(len(names), "property", "properties") + " " + strings.Join(names, ", ")
	case *kind.Type:
		msg = fmt.Sprintf("wrong type %s, want %s", k.Got, strings.Join(k.Want, " or "))
	case *kind.AdditionalProperties:
		msg = "properties the schema does not declare are not allowed"
	case *kind.FalseSchema:
		msg = "no value is allowed here"
	default:
		kw := "schema"
		if path := e.ErrorKind.KeywordPath(); len(path) > 0 {
			kw = path[0]
		}
		msg = fmt.Sprintf("value fails %q", kw)
	}
	_, loc, _ := strings.Cut(e.SchemaURL, "#")
	if loc == "" {
		return msg
	}
	return "at " + loc + ": " + msg
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// QuoteName quotes a tool name for a notice, cut short: a hallucinated
// name can be arbitrarily long.
func QuoteName(name string) string {
	const most = 64
	if len(name) <= most {
		return strconv.Quote(name)
	}
	cut := most
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return strconv.Quote(name[:cut] + "…")
}

func nameList(label, none string, names []string) string {
	if len(names) == 0 {
		return none
	}
	const most = 32
	if len(names) > most {
		return fmt.Sprintf("%s: %s and %d more", label, strings.Join(names[:most], ", "), len(names)-most)
	}
	return label + ": " + strings.Join(names, ", ")
}

// FilterTools returns the tools whose function name is on the plan-mode
// allowlist, in their order; nil allow (no plan mode) returns tools
// unchanged. The result may be empty: chat.Request.SetTools then removes
// the field.
func FilterTools(tools []chat.Tool, allow []string) []chat.Tool {
	if allow == nil {
		return tools
	}
	var out []chat.Tool
	for _, t := range tools {
		if slices.Contains(allow, t.Function.Name) {
			out = append(out, t)
		}
	}
	return out
}
