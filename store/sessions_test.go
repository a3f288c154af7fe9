package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/phasegate/phasegate/internal/redistest"
	"github.com/phasegate/phasegate/session"
)

// sessionStore is what the proxy asks of a store of sessions.
type sessionStore interface {
	Look(ctx context.Context, key string) (session.State, bool, error)
	Charge(ctx context.Context, key string, c session.Charge) (session.Charged, error)
	Reset(ctx context.Context, key string) (session.State, bool, error)
}

// TestSessionsContract runs the same charges through the store in memory
// and the one on Redis: they must agree on every counter, cap and count.
func TestSessionsContract(t *testing.T) {
	r, _ := openTestRedis(t)
	for name, s := range map[string]sessionStore{"memory": NewMemorySessions(0, 0), "redis": NewRedisSessions(r)} {
		t.Run(name, func(t *testing.T) { sessionsContract(t, s) })
	}
}

func sessionsContract(t *testing.T, s sessionStore) {
	ctx := testContext(t)
	b := session.Budget{ToolCalls: 2, Tokens: 10_000, USD: 1, IdleTTL: time.Hour}
	if _, ok, err := s.Look(ctx, "k1:a"); ok || err != nil {
		t.Fatalf("Look of a session never charged: %v, %v; want none", ok, err)
	}
	call := session.Charge{Counters: session.Counters{Requests: 1, ToolCalls: 1, PromptTokens: 1200, CacheReadTokens: 1000,
		CompletionTokens: 30, USD: 0.1, UnpricedTokens: 0}, Budget: b}
	first, err := s.Charge(ctx, "k1:a", call)
	if err != nil {
		t.Fatal(err)
	}
	if !first.New || first.Capped || first.State.Capped != "" || first.Active != 1 || first.CappedSessions != 0 {
		t.Fatalf("first charge: %+v, want a new open session, one held", first)
	}
	second, err := s.Charge(ctx, "k1:a", call)
	if err != nil {
		t.Fatal(err)
	}
	want := session.Counters{Requests: 2, ToolCalls: 2, PromptTokens: 2400, CacheReadTokens: 2000, CompletionTokens: 60, USD: 0.2}
	if second.New || !second.Capped || second.State.Capped != session.CapToolCalls || !sameCounters(second.State.Counters, want) {
		t.Fatalf("second charge: %+v, want the session capped by its tool calls with %+v", second, want)
	}
	if second.CappedSessions != 1 || second.State.Budget != b {
		t.Errorf("second charge: %d capped, budget %+v; want 1 and %+v", second.CappedSessions, second.State.Budget, b)
	}
	if second.State.Started.IsZero() || second.State.Last.Before(second.State.Started) || second.State.Decayed <= 0.1 {
		t.Errorf("second charge: started %v, last %v, decayed %v", second.State.Started, second.State.Last, second.State.Decayed)
	}
	// A stop on a capped session keeps the first cap; another session is
	// its own.
	other, err := s.Charge(ctx, "k2:a", session.Charge{Cap: session.CapStopped, Budget: b})
	if err != nil || !other.New || !other.Capped || other.State.Capped != session.CapStopped || other.Active != 2 || other.CappedSessions != 2 {
		t.Fatalf("a stop of a session never charged: %+v, %v", other, err)
	}
	looked, ok, err := s.Look(ctx, "k1:a")
	if err != nil || !ok || looked.Capped != session.CapToolCalls || !sameCounters(looked.Counters, want) {
		t.Fatalf("Look after the charges: %+v, %v, %v", looked, ok, err)
	}
	reset, ok, err := s.Reset(ctx, "k1:a")
	if err != nil || !ok || !sameCounters(reset.Counters, want) {
		t.Fatalf("Reset: %+v, %v, %v; want the session as it was", reset, ok, err)
	}
	if _, ok, _ := s.Look(ctx, "k1:a"); ok {
		t.Error("Look after Reset found the session")
	}
	if _, ok, _ := s.Reset(ctx, "k1:a"); ok {
		t.Error("a second Reset found the session")
	}
	again, err := s.Charge(ctx, "k1:a", session.Charge{Counters: session.Counters{Requests: 1}, Budget: b})
	if err != nil || !again.New || again.State.Capped != "" || again.State.Requests != 1 || again.Active != 2 || again.CappedSessions != 1 {
		t.Errorf("a charge after Reset: %+v, %v; want a new open session", again, err)
	}
	if len(first.Ended)+len(second.Ended)+len(other.Ended)+len(again.Ended) != 0 {
		t.Errorf("sessions reported ended with none expired: %v %v %v %v", first.Ended, second.Ended, other.Ended, again.Ended)
	}
}

// TestRedisSessionsChargeOnce: a charge sent again with its id (a call
// retried after its reply was lost) is applied once.
func TestRedisSessionsChargeOnce(t *testing.T) {
	r, _ := openTestRedis(t)
	s := NewRedisSessions(r)
	ctx := testContext(t)
	c := session.Charge{Counters: session.Counters{Requests: 1, ToolCalls: 1, USD: 0.5}, Budget: session.Budget{ToolCalls: 2, IdleTTL: time.Hour}, ID: "n1#1"}
	first, err := s.Charge(ctx, "k:once", c)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.Charge(ctx, "k:once", c)
	if err != nil || again.New || again.Capped || !sameCounters(again.State.Counters, first.State.Counters) || again.Active != 1 {
		t.Errorf("the same charge again: %+v, %v; want the session as the first left it", again, err)
	}
	c.ID = "n1#2"
	if next, err := s.Charge(ctx, "k:once", c); err != nil || next.State.ToolCalls != 2 || !next.Capped {
		t.Errorf("the request's next charge: %+v, %v; want it applied", next, err)
	}
}

// sameCounters compares counters, dollars to a billionth.
func sameCounters(a, b session.Counters) bool {
	if math.Abs(a.USD-b.USD) > 1e-9 {
		return false
	}
	a.USD, b.USD = 0, 0
	return a == b
}

// TestSessionsExpire charges sessions with a TTL of 30 ms: once expired,
// a look finds none, and a later charge starts a new session; the charges
// report each expired session once, with what it cost and how it ended
// (the second session's own charge reports the first when the machine
// stalled past its TTL between them).
func TestSessionsExpire(t *testing.T) {
	r, _ := openTestRedis(t)
	for name, s := range map[string]sessionStore{"memory": NewMemorySessions(0, 0), "redis": NewRedisSessions(r)} {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			short := session.Budget{USD: 0.5, IdleTTL: 30 * time.Millisecond}
			var ended []session.Ended
			for _, c := range []struct {
				key string
				usd float64
			}{{"k:idle", 0.25}, {"k:capped", 0.75}} {
				out, err := s.Charge(ctx, c.key, session.Charge{Counters: session.Counters{Requests: 1, USD: c.usd}, Budget: short})
				if err != nil {
					t.Fatal(err)
				}
				ended = append(ended, out.Ended...)
			}
			waitGone(t, ctx, s, "k:idle")
			waitGone(t, ctx, s, "k:capped")
			got, err := s.Charge(ctx, "k:idle", session.Charge{Counters: session.Counters{Requests: 1}, Budget: session.Budget{IdleTTL: time.Hour}})
			if err != nil || !got.New || got.State.Requests != 1 || got.State.USD != 0 {
				t.Fatalf("a charge of an expired session: %+v, %v; want a new one", got, err)
			}
			want := []session.Ended{{USD: 0.25, Outcome: session.OutcomeIdle}, {USD: 0.75, Outcome: session.OutcomeCappedUSD}}
			ended = append(ended, got.Ended...)
			slices.SortFunc(ended, func(a, b session.Ended) int { return int(a.USD*100) - int(b.USD*100) })
			if !slices.Equal(ended, want) || got.Active != 1 || got.CappedSessions != 0 {
				t.Errorf("ended %+v, %d held, %d capped; want %+v, 1, 0", ended, got.Active, got.CappedSessions, want)
			}
		})
	}
}

// waitGone polls until the store no longer holds key (its TTL ran out
// by the store's own clock).
func waitGone(t *testing.T, ctx context.Context, s sessionStore, key string) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, ok, err := s.Look(ctx, key); err != nil || !ok {
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("session %s still held", key)
		case <-tick.C:
		}
	}
}

// TestMemorySessionsBounds: the store holds at most its count and its
// bytes, forgetting the least recently charged first and reporting them
// evicted.
func TestMemorySessionsBounds(t *testing.T) {
	ctx := context.Background()
	b := session.Budget{IdleTTL: time.Hour}
	m := NewMemorySessions(0, 3)
	var got session.Charged
	var ended []session.Ended
	for i := range 5 {
		var err error
		if got, err = m.Charge(ctx, fmt.Sprintf("k:%d", i), session.Charge{Counters: session.Counters{USD: float64(i)}, Budget: b}); err != nil {
			t.Fatal(err)
		}
		ended = append(ended, got.Ended...)
	}
	if got.Active != 3 || !slices.Equal(ended, []session.Ended{{USD: 0, Outcome: session.OutcomeEvicted}, {USD: 1, Outcome: session.OutcomeEvicted}}) {
		t.Errorf("count bound 3: %d held, ended %+v; want 3 and the two oldest evicted", got.Active, ended)
	}
	if _, ok, _ := m.Look(ctx, "k:0"); ok {
		t.Error("the least recently charged session is still held")
	}
	byBytes := NewMemorySessions(3*(memSessionBytes+3), 0)
	for i := range 4 {
		got, _ = byBytes.Charge(ctx, fmt.Sprintf("k:%d", i), session.Charge{Budget: b})
	}
	if got.Active != 3 || len(got.Ended) != 1 {
		t.Errorf("byte bound of 3 sessions: %d held, ended %+v", got.Active, got.Ended)
	}
}

// TestMemorySessionsSweep: expired sessions go with the next charge,
// reported once, on the store's clock.
func TestMemorySessionsSweep(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	m := NewMemorySessions(0, 0)
	m.SetClock(func() time.Time { return now })
	short := session.Budget{IdleTTL: time.Minute}
	for i := range 40 {
		_, _ = m.Charge(ctx, fmt.Sprintf("k:%d", i), session.Charge{Budget: short})
	}
	now = now.Add(time.Minute)
	got, _ := m.Charge(ctx, "k:new", session.Charge{Budget: short})
	if len(got.Ended) != sweepBatch || got.Active != 40-sweepBatch+1 {
		t.Fatalf("first charge after expiry: %d ended, %d held; want a batch of %d", len(got.Ended), got.Active, sweepBatch)
	}
	got, _ = m.Charge(ctx, "k:new", session.Charge{Budget: short})
	if len(got.Ended) != 40-sweepBatch || got.Active != 1 {
		t.Errorf("second charge: %d ended, %d held; want the rest", len(got.Ended), got.Active)
	}
}

// BenchmarkMemorySessionsCharge is the cost of a session's charges in
// memory, with 10 000 sessions held: a request's opening (its decision
// and reservation) and its settlement, which the design bounds at 50 µs.
func BenchmarkMemorySessionsCharge(b *testing.B) {
	ctx := context.Background()
	m := NewMemorySessions(0, 0)
	budget := session.Budget{ToolCalls: 1 << 40, Tokens: 1 << 40, USD: 1e9, IdleTTL: time.Hour}
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("0123456789abcdef01234567:session-%d", i)
		_, _ = m.Charge(ctx, keys[i], session.Charge{Budget: budget})
	}
	o := session.Opening{Budget: budget, Prompt: 40_000, MissPrice: 0.3, HitPrice: 0.006, Priced: true, Calls: 1}
	c := session.Charge{Counters: session.Counters{CacheReadTokens: 39_000, CompletionTokens: 200, USD: 0.0002}, Budget: budget}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			k := keys[i%len(keys)]
			if _, err := m.Open(ctx, k, o); err != nil {
				b.Fatal(err)
			}
			if err := m.Owe(ctx, k, c); err != nil {
				b.Fatal(err)
			}
			i += 7
		}
	})
}

// BenchmarkRedisSessionsCharge is one request's cost on Redis: its
// opening, one script that carries the settlement of the request before.
func BenchmarkRedisSessionsCharge(b *testing.B) {
	srv := redistest.Start(b)
	r, err := OpenRedis(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	s := NewRedisSessions(r)
	ctx := context.Background()
	budget := session.Budget{IdleTTL: time.Hour}
	o := session.Opening{Budget: budget, Prompt: 40_000, MissPrice: 0.3, HitPrice: 0.006, Priced: true, Calls: 1}
	c := session.Charge{Counters: session.Counters{CacheReadTokens: 39_000, CompletionTokens: 200, USD: 0.0002}, Budget: budget}
	b.ResetTimer()
	for i := range b.N {
		k := fmt.Sprintf("k:%d", i%1000)
		if _, err := s.Open(ctx, k, o); err != nil {
			b.Fatal(err)
		}
		if err := s.Owe(ctx, k, c); err != nil {
			b.Fatal(err)
		}
	}
}

// opener is what the proxy asks of a store to open a request's session.
type opener interface {
	sessionStore
	Open(ctx context.Context, key string, o session.Opening) (session.Opened, error)
}

// TestSessionsOpen runs the same openings through the store in memory and
// the one on Redis: each decides the request and reserves what it is sure
// to cost, and both agree on every decision and count.
func TestSessionsOpen(t *testing.T) {
	r, _ := openTestRedis(t)
	var got [2][]session.Opened
	for i, s := range []opener{NewMemorySessions(0, 0), NewRedisSessions(r)} {
		got[i] = openings(t, s)
	}
	for i := range got[0] {
		m, rd := got[0][i], got[1][i]
		if m.Spent != rd.Spent || m.New != rd.New || m.Capped != rd.Capped || !sameCounters(m.Reserved, rd.Reserved) ||
			!sameCounters(m.State.Counters, rd.State.Counters) || m.State.Capped != rd.State.Capped || !sameCounters(m.Before.Counters, rd.Before.Counters) {
			t.Errorf("opening %d: memory %+v, Redis %+v", i+1, m, rd)
		}
	}
}

// openings opens requests of sessions of s and checks each against what
// the design says of it; it returns them.
func openings(t *testing.T, s opener) []session.Opened {
	ctx := testContext(t)
	b := session.Budget{ToolCalls: 2, Tokens: 1000, USD: 0.01, IdleTTL: time.Hour}
	o := session.Opening{Budget: b, Prompt: 300, MissPrice: 0.3, HitPrice: 0.006, Priced: true, Calls: 1, ID: "n1#0"}
	var all []session.Opened
	open := func(key string, o session.Opening) session.Opened {
		t.Helper()
		out, err := s.Open(ctx, key, o)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, out)
		return out
	}
	// A new session: the whole prompt reserved as missed, and one call.
	first := open("k1:a", o)
	want := session.Counters{Requests: 1, ToolCalls: 1, PromptTokens: 300, USD: 300 * 0.3 / 1e6}
	if first.Spent != "" || !first.New || !sameCounters(first.Reserved, want) || !sameCounters(first.State.Counters, want) {
		t.Fatalf("first opening: %+v, want a new session with %+v reserved", first, want)
	}
	// Its settlement: the cache held 200 of the prompt, 20 completion tokens.
	if _, err := s.Charge(ctx, "k1:a", session.Charge{Counters: session.Counters{CacheReadTokens: 200, CompletionTokens: 20}, Budget: b, ID: "n1#1"}); err != nil {
		t.Fatal(err)
	}
	// The next prompt is reserved at the session's miss ratio, a third;
	// its call reaches the budget, which only a settlement records.
	o.ID = "n2#0"
	second := open("k1:a", o)
	if second.Spent != "" || second.Reserved.CacheReadTokens != 200 || second.State.ToolCalls != 2 || second.State.Capped != "" {
		t.Fatalf("second opening: %+v, want 200 of 300 reserved as cache reads, 2 calls, no cap", second)
	}
	// The budget reached: the request is the forced final answer, reserves
	// no call and records the cap.
	o.ID = "n3#0"
	third := open("k1:a", o)
	if third.Spent != session.CapToolCalls || !third.Capped || third.Reserved.ToolCalls != 0 || third.State.Requests != 3 || third.Before.ToolCalls != 2 {
		t.Fatalf("third opening: %+v, want the forced final answer, capped, no call reserved", third)
	}
	// Refused (SESSION_ON_CAP=reject): nothing reserved.
	o.ID, o.Reject = "n4#0", true
	if fourth := open("k1:a", o); fourth.Spent != session.CapToolCalls || fourth.Reserved != (session.Counters{}) || fourth.State.Requests != 3 {
		t.Fatalf("a refused opening: %+v, want nothing charged", fourth)
	}
	// A prompt that would carry a new session past its tokens.
	o.ID, o.Reject, o.Prompt = "n5#0", false, 1200
	if big := open("k1:b", o); big.Spent != session.CapTokens || big.Reserved.ToolCalls != 0 || big.State.Capped != session.CapTokens {
		t.Fatalf("an opening past the tokens: %+v, want its forced final answer", big)
	}
	return all
}

// TestRedisSessionsOweCarried: a settlement owed makes no call; the next
// call of the store, of any session, carries it and reports the cap it
// recorded; Flush carries what is left.
func TestRedisSessionsOweCarried(t *testing.T) {
	r, _ := openTestRedis(t)
	s := NewRedisSessions(r)
	ctx := testContext(t)
	b := session.Budget{ToolCalls: 2, IdleTTL: time.Hour}
	if err := s.Owe(ctx, "k:owed", session.Charge{Counters: session.Counters{Requests: 1, ToolCalls: 2}, Budget: b, ID: "o#1"}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Look(ctx, "k:owed"); ok || err != nil {
		t.Fatalf("a settlement owed is on Redis already: %v %v", ok, err)
	}
	out, err := s.Open(ctx, "k:other", session.Opening{Budget: b, Prompt: 10, ID: "p#0"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []session.Settled{{Key: "k:owed", Cap: session.CapToolCalls}}; !slices.Equal(out.Settled, want) {
		t.Errorf("the opening that carried it reports %+v, want %+v", out.Settled, want)
	}
	if st, ok, err := s.Look(ctx, "k:owed"); !ok || err != nil || st.ToolCalls != 2 || st.Capped != session.CapToolCalls {
		t.Errorf("after the carrying call: %+v %v %v, want 2 calls, capped", st, ok, err)
	}
	for i := range carryMax + 3 {
		if err := s.Owe(ctx, fmt.Sprintf("k:many-%d", i), session.Charge{Counters: session.Counters{Requests: 1}, Budget: b}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k:many-0", fmt.Sprintf("k:many-%d", carryMax+2)} {
		if st, ok, err := s.Look(ctx, k); !ok || err != nil || st.Requests != 1 {
			t.Errorf("%s after Flush: %+v %v %v, want charged", k, st, ok, err)
		}
	}
}
