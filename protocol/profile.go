package protocol

import "fmt"

// Profile is a set of the guard's rules, as its setting spells it.
type Profile string

// Profiles.
const (
	// ProfileStrict is the protocol as first written: MaxPhaseCycles tool
	// executions per user turn (3 by default), an exact repeat refused as
	// a duplicate (but for RepeatableTools). The default.
	ProfileStrict Profile = "strict"
	// ProfileAgent is for agents that make dozens of calls a turn: any
	// call may repeat while its results change; a loop (a call repeated up
	// to form, a cycle of 2 to 4 calls, a tool failing in a row with the
	// same error) is refused once it wasted its calls
	// (tools.Policy.Progressive); the cycle budget, AgentMaxPhaseCycles,
	// counts only the executions that brought nothing new.
	ProfileAgent Profile = "agent"
)

// DefaultAgentMaxPhaseCycles is the cycle budget of the agent profile:
// the executions of a turn that brought nothing new (their call and
// result were seen in the turn already). Real work is never cut by it,
// however long (the longest resolved SWE-bench run of the public
// trajectories makes 124 calls in a turn, few of them stale); a loop the
// other rules miss still ends.
const DefaultAgentMaxPhaseCycles = 60

// ParseProfile reads a profile's name; "" is not one.
func ParseProfile(s string) (Profile, error) {
	switch p := Profile(s); p {
	case ProfileStrict, ProfileAgent:
		return p, nil
	}
	return "", fmt.Errorf("must be %s or %s, got %q", ProfileStrict, ProfileAgent, s)
}

// Tightens reports whether switching from profile p to q keeps or tightens
// the rules: strict is tighter than agent.
func (p Profile) Tightens(q Profile) bool { return p == q || q == ProfileStrict }

// Duplicates is how the strict profile judges a call identical to one
// executed in the turn, as STRICT_DUPLICATES spells it.
type Duplicates string

// Duplicate rules.
const (
	// DuplicatesExact: every exact repeat is a duplicate, as the protocol
	// was first written. The default.
	DuplicatesExact Duplicates = "exact"
	// DuplicatesResults: an exact repeat whose result may have changed
	// since (its last two runs differ, or a call since brought something
	// new, such as an edit between two reads) is progress and is
	// forwarded; any other is a duplicate (tools.Policy.ResultDuplicates).
	DuplicatesResults Duplicates = "results"
)
