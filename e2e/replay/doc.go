// Package replay holds the test that replays public agent trajectories
// through the gateway: a scripted upstream plays each recorded assistant
// turn, a client sends the growing history with the recorded tool results,
// and the test records whether the guard let the work through untouched
// and how soon it stopped the runs that loop. The trajectories are read
// from ../shared/traces beside the repository (see its README.md); they
// are never copied into the repository. The package has no code of its
// own: everything is in its tests.
package replay
