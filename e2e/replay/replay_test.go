package replay_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/proxy"
)

// setup is one configuration of the gateway the trajectories are
// replayed through.
type setup struct {
	name    string
	profile protocol.Profile
	mode    protocol.Mode
}

var setups = []setup{
	{name: "strict", profile: protocol.ProfileStrict, mode: protocol.ModeEnforce},
	{name: "agent", profile: protocol.ProfileAgent, mode: protocol.ModeEnforce},
	{name: "observe", profile: protocol.ProfileAgent, mode: protocol.ModeObserve},
}

// outcome is what the gateway did to one trajectory.
type outcome struct {
	// step is the assistant message at which the gateway first altered
	// the run (a call forwarded unlike the recorded one, a refusal, a
	// forced final answer, a cut), or -1. Under observe mode it is the
	// message whose call the guard would first have refused.
	step int
	// kind says how: "refused:<verdict>", "forced:<budget>", "changed",
	// "failed:<why>"; under observe mode "would:<verdict>".
	kind string
	// passedOn reports, under observe mode, that every answer reached the
	// client as the upstream sent it.
	passedOn bool
}

func (o outcome) altered() bool { return o.step >= 0 }

// recorder keeps the trace events of the guard that alter a run, by
// request id.
type recorder struct {
	mu   sync.Mutex
	byID map[string][]metrics.Trace
}

func (r *recorder) Trace(_ context.Context, ev metrics.Trace) {
	switch ev.Kind {
	case metrics.TraceToolCallRefused, metrics.TraceDuplicateToolCall, metrics.TraceBudgetExhausted:
	case metrics.TraceObservedToolCall:
		if ev.Verdict == "forward" {
			return
		}
	default:
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byID[ev.RequestID] = append(r.byID[ev.RequestID], ev)
}

func (r *recorder) events(id string) []metrics.Trace {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// gateway serves one setup in front of the double, through the real
// router on a loopback server.
func gateway(tb testing.TB, s setup, ts []*trajectory, rec *recorder) (*httptest.Server, error) {
	up := httptest.NewServer(double(ts))
	tb.Cleanup(up.Close)
	cfg := proxy.Config{
		Providers:    []proxy.Provider{{Name: "openai", BaseURL: up.URL + "/v1"}},
		GuardProfile: s.profile,
		GuardMode:    s.mode,
	}
	h, err := proxy.New(cfg, proxy.Options{DefaultProtocol: proxy.ProtocolTwoStage, TwoStage: protocol.NewTwoStage(protocol.TwoStageConfig{}, rec)})
	if err != nil {
		return nil, fmt.Errorf("proxy.New: %w", err)
	}
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return srv, nil
}

// replay sends trajectory ti's requests in order until the gateway alters
// an answer, or the run ends.
func replay(ctx context.Context, s setup, gw *httptest.Server, rec *recorder, ts []*trajectory, ti int) (outcome, error) {
	t := ts[ti]
	o := outcome{step: -1, passedOn: true}
	for _, step := range t.steps() {
		id := requestID(s.name, ti, step)
		a, err := send(ctx, gw.Client(), gw.URL, id, t, step)
		if err != nil {
			return o, fmt.Errorf("%s: message %d: %w", t.ID, step, err)
		}
		if s.mode == protocol.ModeObserve {
			o.passedOn = o.passedOn && a.same(t.msgs[step])
			continue
		}
		if !a.same(t.msgs[step]) {
			o.step, o.kind = step, alteration(a, rec.events(id))
			return o, nil
		}
	}
	if s.mode == protocol.ModeObserve {
		// Observe mode judges a call when its result comes back: the
		// agent's next request, which a run that ended on a result
		// never sent. Send it, as the agent would have.
		if last := t.msgs[len(t.msgs)-1]; last.Role == "tool" {
			if _, err := send(ctx, gw.Client(), gw.URL, requestID(s.name, ti, len(t.msgs)), t, len(t.msgs)); err != nil {
				return o, fmt.Errorf("%s: after the last message: %w", t.ID, err)
			}
		}
		o.step, o.kind = wouldAlter(t, rec, s.name, ti)
	}
	return o, nil
}

// alteration names what the gateway did to an answer that is not the
// recorded one.
func alteration(a answer, evs []metrics.Trace) string {
	for _, ev := range evs {
		switch ev.Kind {
		case metrics.TraceToolCallRefused, metrics.TraceDuplicateToolCall:
			return "refused:" + ev.Verdict
		case metrics.TraceBudgetExhausted:
			return "forced:" + ev.Reason
		}
	}
	if a.status != http.StatusOK {
		return fmt.Sprintf("failed:status %d", a.status)
	}
	return "changed"
}

// wouldAlter is, under observe mode, the first message whose call the
// guard would have refused, and the verdict, judged when the call's
// result came back.
func wouldAlter(t *trajectory, rec *recorder, config string, ti int) (int, string) {
	callStep := map[string]int{}
	for i, m := range t.msgs {
		for _, c := range m.ToolCalls {
			callStep[c.ID] = i
		}
	}
	for _, step := range append(t.steps(), len(t.msgs)) {
		for _, ev := range rec.events(requestID(config, ti, step)) {
			if s, ok := callStep[ev.ToolCallID]; ok {
				return s, "would:" + ev.Verdict
			}
		}
	}
	return -1, ""
}

// runSetup replays every trajectory through one gateway, a few at once.
func runSetup(tb testing.TB, s setup, ts []*trajectory) ([]outcome, error) {
	rec := &recorder{byID: map[string][]metrics.Trace{}}
	gw, err := gateway(tb, s, ts, rec)
	if err != nil {
		return nil, err
	}
	// Within the race run's 25 minutes: the three setups share two cores
	// with the other packages' tests.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	out := make([]outcome, len(ts))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i := range ts {
		g.Go(func() error {
			o, err := replay(ctx, s, gw, rec, ts, i)
			out[i] = o
			return err
		})
	}
	return out, g.Wait()
}

// TestReplay replays the public trajectories of ../shared/traces through
// the gateway under the strict profile, the agent profile and observe
// mode, and prints what the gateway did to them (go test -v). Under the
// agent profile no successful run may be altered, and every run that
// loops (wastes more than maxWasted calls in a row: see loopOf) must be
// altered at the latest at the call that would waste one more; observe
// mode must pass every answer on unchanged and would first have refused
// each run's call exactly where enforcing altered it.
func TestReplay(t *testing.T) {
	ts := loadTrajectories(t)
	loops := make([]loop, len(ts))
	for i, tr := range ts {
		loops[i] = loopOf(tr)
	}
	// The setups replay at once, each through its own gateway, so that
	// both cores stay busy while one setup finishes its longest runs.
	results := map[string][]outcome{}
	took := map[string]time.Duration{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range setups {
		wg.Go(func() {
			start := time.Now()
			out, err := runSetup(t, s, ts)
			if err != nil {
				t.Errorf("%s: %v", s.name, err)
			}
			mu.Lock()
			defer mu.Unlock()
			results[s.name], took[s.name] = out, time.Since(start)
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, s := range setups {
		t.Logf("%s  (replayed in %s)", figures(s, ts, loops, results[s.name]), took[s.name].Round(time.Second))
	}
	for i, tr := range ts {
		agent, observe := results["agent"][i], results["observe"][i]
		if tr.Outcome.Success && agent.altered() {
			t.Errorf("agent: %s, a successful run, was altered at message %d (%s)", tr.ID, agent.step, agent.kind)
		}
		if l := loops[i]; l.mustStop >= 0 && (!agent.altered() || agent.step > l.mustStop) {
			t.Errorf("agent: %s loops past %d wasted calls at message %d; the gateway altered it at %d (%s)", tr.ID, maxWasted, l.mustStop, agent.step, agent.kind)
		}
		if !observe.passedOn {
			t.Errorf("observe: %s: an answer reached the client changed", tr.ID)
		}
		if observe.step != agent.step {
			t.Errorf("observe: %s: the first call the guard would have refused is at message %d (%s); enforcing, it altered the run at %d (%s)",
				tr.ID, observe.step, observe.kind, agent.step, agent.kind)
		}
	}
}

// figures sums up one setup's outcomes.
func figures(s setup, ts []*trajectory, loops []loop, out []outcome) string {
	var successful, altered, alteredOK, looping, long, stopped, wastedBefore int
	kinds := map[string]int{}
	var okAltered []string
	for i, o := range out {
		ok := ts[i].Outcome.Success
		if ok {
			successful++
		}
		if o.altered() {
			altered++
			kinds[o.kind]++
			if ok {
				alteredOK++
				okAltered = append(okAltered, fmt.Sprintf("%s (message %d, %s)", ts[i].ID, o.step, o.kind))
			}
		}
		l := loops[i]
		if l.longest > 0 {
			looping++
			wastedBefore += wastedUntil(ts[i], o.step)
		}
		if l.mustStop >= 0 {
			long++
			if o.altered() && o.step <= l.mustStop {
				stopped++
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (GUARD_PROFILE=%s, GUARD_MODE=%s): altered %d of %d trajectories, %d of %d successful\n",
		s.name, s.profile, s.mode, altered, len(ts), alteredOK, successful)
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&b, "  %-40s %d\n", k, kinds[k])
	}
	fmt.Fprintf(&b, "  looping trajectories (a call wasted): %d, wasted calls let through: %d; loops past %d wasted calls: %d, stopped in time: %d\n",
		looping, wastedBefore, maxWasted, long, stopped)
	slices.Sort(okAltered)
	for i, a := range okAltered {
		if i == 5 {
			fmt.Fprintf(&b, "  ... and %d more successful runs altered\n", len(okAltered)-i)
			break
		}
		fmt.Fprintf(&b, "  successful, altered: %s\n", a)
	}
	return b.String()
}

// wastedUntil counts the wasted calls a run executed before message
// stop (all of them when stop is -1).
func wastedUntil(t *trajectory, stop int) int {
	n := 0
	for _, turn := range t.turns() {
		for k, w := range wasted(turn) {
			if w && (stop < 0 || turn[k].step < stop) {
				n++
			}
		}
	}
	return n
}
