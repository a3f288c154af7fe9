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
	// ProfileAgent is for agents that make dozens of calls a turn:
	// AgentMaxPhaseCycles executions, any call may repeat while its
	// results change, and a call that repeats earlier ones up to form
	// without progress is refused as no_progress (tools.Policy.Progressive).
	ProfileAgent Profile = "agent"
)

// DefaultAgentMaxPhaseCycles is the cycle ceiling of the agent profile:
// a coding agent's long turn (explore, read, edit, test, fix, test) fits,
// a loop the detectors miss still ends.
const DefaultAgentMaxPhaseCycles = 60

// Profiles returns the profiles, strictest first.
func Profiles() []Profile { return []Profile{ProfileStrict, ProfileAgent} }

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
