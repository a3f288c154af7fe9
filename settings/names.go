package settings

import (
	"slices"
	"strings"
)

// DidYouMean returns `; did you mean X?` for the known name nearest to
// name (a different case counts as nearest), or "" when none is near.
func DidYouMean(name string, known []string, prefix string) string {
	best, bestDist := "", len(name)/3+2
	for _, k := range known {
		if strings.EqualFold(strings.ReplaceAll(name, "-", "_"), strings.ReplaceAll(k, "-", "_")) {
			return "; did you mean " + prefix + k + "?"
		}
		if d := editDistance(name, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best == "" {
		return ""
	}
	return "; did you mean " + prefix + best + "?"
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// StrayVariable is a variable of the environment that looks meant for the
// gateway but names none of its settings.
type StrayVariable struct {
	Name    string
	Suggest string // the nearest setting, "" when none is near
}

// StrayVariables returns the variables of env (NAME=value items) that
// look meant for the gateway but name none of its settings: those whose
// first word is the first word of a setting (MAX_, RATE_LIMIT_, REDIS_...)
// and that are near a setting's name, and any PHASEGATE_ variable. A
// variable far from every setting (OPENAI_ORGANIZATION, LOG_FORMAT) is
// another program's, and left alone.
func StrayVariables(env []string) []StrayVariable {
	known := []string{"CONFIG", "PORT"}
	for alias := range aliases {
		known = append(known, alias)
	}
	prefixes := map[string]bool{}
	for _, s := range all {
		known = append(known, s.env)
		prefixes[firstWord(s.env)] = true
	}
	var out []StrayVariable
	for _, item := range env {
		name, _, _ := strings.Cut(item, "=")
		upper := strings.ToUpper(name)
		if name == "" || slices.Contains(known, name) || !prefixes[firstWord(upper)] {
			continue
		}
		suggest := strings.TrimSuffix(strings.TrimPrefix(DidYouMean(name, known, ""), "; did you mean "), "?")
		if suggest == "" && !strings.HasPrefix(upper, "PHASEGATE_") {
			continue
		}
		out = append(out, StrayVariable{Name: name, Suggest: suggest})
	}
	return out
}

func firstWord(name string) string {
	w, _, _ := strings.Cut(name, "_")
	return w
}
