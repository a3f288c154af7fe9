package envelope

import "regexp"

// Signal is a keyword fallback verdict; its value is the seed's pattern
// name.
type Signal string

// The seed's fallback signals ("Fallback Detection").
const (
	SignalAnalysisComplete Signal = "analysis_complete"
	SignalTasksReady       Signal = "tasks_ready"
	SignalWorkerDone       Signal = "worker_done"
	SignalWorkerError      Signal = "worker_error"
)

// fallbackPatterns are the seed's patterns as written: case-insensitive,
// unanchored, without word boundaries (so "terror" matches worker_error).
var fallbackPatterns = []struct {
	signal Signal
	re     *regexp.Regexp
}{
	{SignalAnalysisComplete, regexp.MustCompile(`(?i)(?:analysis|exploration)\s+(?:complete|done|finished)`)},
	{SignalTasksReady, regexp.MustCompile(`(?i)(?:task\s+list|breakdown)\s+(?:ready|complete|created)`)},
	{SignalWorkerDone, regexp.MustCompile(`(?i)(?:task|work)\s+(?:complete|done|finished)`)},
	{SignalWorkerError, regexp.MustCompile(`(?i)(?:error|failed|could\s+not)`)},
}

// Fallback returns the signals whose keyword pattern matches text, in the
// seed's order; nil when none does. It is meant for text without an
// envelope. Safe for concurrent use.
func Fallback(text string) []Signal {
	var out []Signal
	for _, p := range fallbackPatterns {
		if p.re.MatchString(text) {
			out = append(out, p.signal)
		}
	}
	return out
}
