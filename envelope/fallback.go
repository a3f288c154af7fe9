package envelope

import (
	"regexp"
	"strings"
)

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
// Each pattern ends in one of its words: ASCII text without any of them
// cannot match, which is checked first, as the regular expressions cost
// far more than a search for a word.
var fallbackPatterns = []struct {
	signal Signal
	re     *regexp.Regexp
	words  []string
}{
	{SignalAnalysisComplete, regexp.MustCompile(`(?i)(?:analysis|exploration)\s+(?:complete|done|finished)`), []string{"complete", "done", "finished"}},
	{SignalTasksReady, regexp.MustCompile(`(?i)(?:task\s+list|breakdown)\s+(?:ready|complete|created)`), []string{"ready", "complete", "created"}},
	{SignalWorkerDone, regexp.MustCompile(`(?i)(?:task|work)\s+(?:complete|done|finished)`), []string{"complete", "done", "finished"}},
	{SignalWorkerError, regexp.MustCompile(`(?i)(?:error|failed|could\s+not)`), []string{"error", "failed", "could"}},
}

// Fallback returns the signals whose keyword pattern matches text, in the
// seed's order; nil when none does. It is meant for text without an
// envelope. Safe for concurrent use.
func Fallback(text string) []Signal {
	var out []Signal
	// Outside ASCII, case folding maps other letters to the patterns'
	// (the Kelvin sign to k), so only ASCII text is filtered by words.
	lower, ascii := "", isASCII(text)
	if ascii {
		lower = strings.ToLower(text)
	}
	for _, p := range fallbackPatterns {
		if ascii && !containsAny(lower, p.words) {
			continue
		}
		if p.re.MatchString(text) {
			out = append(out, p.signal)
		}
	}
	return out
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func containsAny(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}
