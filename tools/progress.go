package tools

import "strings"

// Defaults of the progress rules. Both were measured on public agent
// trajectories replayed through the gateway (e2e/replay): the largest
// values that stop every loop there and cut no successful run.
const (
	// DefaultMaxWasted is the number of calls a loop may waste before the
	// guard refuses the next: SWE-agent's eps demonstration sent the same
	// failing `submit` four times (three of them wasted) before it changed
	// its quoting and solved the task.
	DefaultMaxWasted = 3
	// DefaultMaxFailingStreak is the number of calls of one tool in a row
	// that may fail with the same error before the guard refuses the next
	// call of that tool, whatever its arguments: no successful run of the
	// public trajectories has more than 2.
	DefaultMaxFailingStreak = 3
)

// progress is what the turn's history says about progress: which
// executions brought something new (fresh: no earlier execution had their
// tool, form and result) and which wasted a call (repeated an earlier
// one, and nothing new came back since). Results are compared as an
// agent reads them (NormaliseResult), and normalised only when two
// executions of one form returned different texts. Two runs of a form
// in a row with nothing new between them (the earlier one came since the
// last fresh execution, or is it) that differ only in that one of them is
// silent (no output in the same frame, see silentFrame) count as one
// result: a shell that loses a fast command's output, on any run, does
// not make a loop look like progress. Forms and results are
// compared by digest, and both are read from caches shared by requests
// (see formDigests). It is built once per policy, on the first judgement
// that needs it.
type progress struct {
	l *Ledger
	// forms are the digests of the executions' forms; malformed
	// arguments have none.
	forms []digest
	// read are the readings of the results, made when needed.
	read []reading
	// prev is the last earlier execution with the same tool, form and
	// result, or -1 (fresh).
	prev []int
	// id names the work an execution did: the first execution with its
	// tool, form and result.
	id []int
	// last is the last execution of each form (the form holds the tool),
	// and before the execution of the same form before each, or -1: the
	// executions of a form, newest first.
	last   map[digest]int
	before []int
	// lastFresh is the last fresh execution, or -1.
	lastFresh int
	// streak is the number of wasted executions since lastFresh.
	streak int
	// stale is the number of executions that were not fresh.
	stale int
}

func newProgress(l *Ledger, kindsOf func(name string) kinds) *progress {
	n := len(l.executed)
	p := &progress{l: l, forms: make([]digest, n), read: make([]reading, n),
		prev: make([]int, n), id: make([]int, n), last: make(map[digest]int, n), before: make([]int, n), lastFresh: -1}
	for k, e := range l.executed {
		p.prev[k], p.id[k] = -1, k
		if l.args[k] == nil || isWait(e.Call.Function.Name, l.args[k]) {
			// A malformed call still ran, and its effect is unknown; a
			// deliberate wait lets the world move on (a job polled after
			// each wait may have changed): both count as new.
			p.fresh(k)
			continue
		}
		name := e.Call.Function.Name
		f := p.formDigest(l.projectID, name, l.args[k], e.Call.Function.Arguments, kindsOf(name))
		p.forms[k] = f
		p.before[k] = -1
		if j, ok := p.last[f]; ok {
			p.before[k] = j
		}
		for j := p.before[k]; j >= 0; j = p.before[j] {
			if p.sameResult(j, k) || j == p.before[k] && j >= p.lastFresh && p.lostOutput(j, k) {
				p.prev[k], p.id[k] = j, p.id[j]
				break
			}
		}
		p.last[f] = k
		if p.prev[k] < 0 {
			p.fresh(k)
			continue
		}
		p.stale++
		if p.prev[k] >= p.lastFresh {
			p.streak++ // nothing new since the run it repeats: wasted
		}
	}
	return p
}

// formDigest is the digest of the form of a call of tool name with
// arguments (parsed as args), from the cache when the same call was seen
// before.
func (p *progress) formDigest(projectID, name string, args map[string]any, arguments string, k kinds) digest {
	key := formKey(projectID, name, k.schema, arguments)
	if d, ok := formDigests.Get(key); ok {
		return d
	}
	d := digestOf(string(formOf(projectID, name, args, k)))
	formDigests.Put(key, d)
	return d
}

func (p *progress) fresh(k int) { p.lastFresh, p.streak = k, 0 }

// sameResult reports whether executions i and k returned the same result
// as an agent reads it.
func (p *progress) sameResult(i, k int) bool {
	a, b := p.l.executed[i].Result, p.l.executed[k].Result
	return a == b || p.reading(i).norm == p.reading(k).norm
}

// lostOutput reports whether executions j and k, of one form, returned
// the same result but that one of them lost its output: one is silent
// (see silentFrame) and the other printed in the same frame.
func (p *progress) lostOutput(j, k int) bool {
	rj, rk := p.reading(j), p.reading(k)
	return rj.silent != rk.silent && rj.frame == rk.frame
}

func (p *progress) reading(i int) reading {
	if !p.read[i].read {
		p.read[i] = readResult(p.l.executed[i].Result)
	}
	return p.read[i]
}

// repeat is what a call would repeat: the last execution of its form.
type repeat struct {
	// last is the last execution of the call's form, -1 when there is
	// none; earlier the one before it that returned the same result, or
	// -1.
	last, earlier int
	// wasted: running the call again would waste it (nothing new came
	// back since last).
	wasted bool
	// period is the length of the cycle the call would continue: 1 when
	// it repeats the call just executed, 2 to 4 for a cycle whose calls
	// and results repeat, 0 for none.
	period int
}

// repeatOf says what a call of form f would repeat, if it ran and
// returned what its form returned last.
func (p *progress) repeatOf(f digest) repeat {
	last, ok := p.last[f]
	if !ok {
		return repeat{last: -1, earlier: -1}
	}
	r := repeat{last: last, earlier: -1}
	r.earlier = p.prev[r.last]
	r.wasted = p.lastFresh <= r.last
	n := len(p.id)
	if r.last == n-1 {
		r.period = 1
		return r
	}
	for period := 2; period <= 4 && 2*period <= n; period++ {
		if p.id[n-period] != p.id[r.last] {
			continue
		}
		cycle := true
		for j := range period {
			if p.id[n-period+j] != p.id[n-2*period+j] {
				cycle = false
				break
			}
		}
		if cycle {
			r.period = period
			break
		}
	}
	return r
}

// changedSince reports, for an exact repeat of the executions with
// signature sig, whether its result may have changed: its last two runs
// returned different results, or an execution since its last run brought
// something new (a file edited between two reads).
func (p *progress) changedSince(sig Signature) bool {
	last, before := -1, -1
	for k := len(p.l.executed) - 1; k >= 0; k-- {
		if p.l.executed[k].Signature != sig {
			continue
		}
		if last < 0 {
			last = k
			continue
		}
		before = k
		break
	}
	if last < 0 {
		return false
	}
	return before >= 0 && !p.sameResult(before, last) || p.lastFresh > last
}

// isWait reports whether a call waits on purpose: a tool named for
// waiting or sleeping, or a shell command that runs sleep.
func isWait(name string, args map[string]any) bool {
	if containsFold(name, "sleep") || containsFold(name, "wait") {
		return true
	}
	k := kinds{tool: name}
	for key, v := range args {
		s, ok := v.(string)
		if !ok || !strings.Contains(s, "sleep") || k.of(key) != kindShell {
			continue
		}
		for _, cmd := range strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(";&|\n(", r) }) {
			if f := strings.Fields(cmd); len(f) > 0 && f[0] == "sleep" {
				return true
			}
		}
	}
	return false
}

// containsFold reports whether s holds word, an ASCII lower-case word,
// in any case, without allocating.
func containsFold(s, word string) bool {
	for i := 0; i+len(word) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(word)], word) {
			return true
		}
	}
	return false
}
