package envelope

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func FuzzScanner(f *testing.F) {
	f.Add(seedExample, uint8(7), uint8(13))
	f.Add("<<<"+StartDelimiter+"x<<<END_"+EndDelimiter+"<<", uint8(1), uint8(3))
	f.Add(StartDelimiter+"unterminated", uint8(30), uint8(2))
	f.Fuzz(func(t *testing.T, text string, a, b uint8) {
		want, wantErr := Find(text)
		var cuts []int
		for i := int(a) + 1; i < len(text); i += int(b) + 1 {
			cuts = append(cuts, i)
		}
		got, err := feedPieces(text, cuts)
		if !errors.Is(err, wantErr) || !cmp.Equal(want, got) {
			t.Fatalf("cut at %v: got %+v, %v; want %+v, %v", cuts, got, err, want, wantErr)
		}
		var whole string
		for _, p := range got {
			if p.Envelope {
				whole += StartDelimiter + p.Text + EndDelimiter
			} else {
				whole += p.Text
			}
		}
		if whole != text {
			t.Fatalf("parts %+v do not reassemble %q", got, text)
		}
	})
}

func FuzzJudge(f *testing.F) {
	for _, body := range seedExamples {
		f.Add(body)
	}
	f.Add(`{phase: 'progress', data: {task_id: "t", status: "blocked",},`)
	f.Add("```json\n{“phase”: “aggregation”}\n```")
	f.Fuzz(func(t *testing.T, body string) {
		r := Judge(body)
		if r.Valid != (len(r.Errors) == 0) {
			t.Fatalf("Valid = %v with errors %q", r.Valid, r.Errors)
		}
		if r.Valid && Judge(r.JSON).Repaired {
			t.Fatalf("repaired JSON %q needs repair again", r.JSON)
		}
		Default().Notice(r, "")
		// With no end delimiter in the body, Parse finds exactly this envelope.
		if !strings.Contains(body, EndDelimiter) {
			if p := Parse(StartDelimiter + body + EndDelimiter); !cmp.Equal(r, p) {
				t.Fatalf("Parse differs from Judge: %+v vs %+v", p, r)
			}
		}
	})
}

// FuzzFallback checks that the word filter in front of the patterns never
// changes the verdict: Fallback equals the seed's patterns alone.
func FuzzFallback(f *testing.F) {
	for _, s := range []string{"Analysis complete.", "task list READY", "Work\tdone", "could  not", "taſk done", "breaKdown created", "nothing"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		var want []Signal
		for _, p := range fallbackPatterns {
			if p.re.MatchString(text) {
				want = append(want, p.signal)
			}
		}
		if got := Fallback(text); !slices.Equal(got, want) {
			t.Fatalf("Fallback(%q) = %v, the patterns alone give %v", text, got, want)
		}
	})
}
