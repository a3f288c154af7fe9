package envelope

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const validBody = `{"phase": "analysis", "data": {"summary": "Found 5 main modules", "recommended_splits": 5}}`

// The seed's "Example Valid Response": text before and after the envelope.
var seedExample = "I've analyzed the codebase and found several components to document.\n\n" +
	StartDelimiter + "\n" + validBody + "\n" + EndDelimiter +
	"\n\nLet me know if you'd like me to proceed with the task breakdown."

func TestFind(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    []Part
		wantErr error
	}{
		{name: "plain text", text: "no envelope here", want: []Part{{Text: "no envelope here"}}},
		{name: "empty", text: "", want: nil},
		{name: "seed Delimiters: text before and after", text: "a" + StartDelimiter + "{}" + EndDelimiter + "b",
			want: []Part{{Text: "a"}, {Text: "{}", Envelope: true}, {Text: "b"}}},
		{name: "envelope alone", text: StartDelimiter + " x " + EndDelimiter,
			want: []Part{{Text: " x ", Envelope: true}}},
		{name: "two envelopes", text: StartDelimiter + "1" + EndDelimiter + "-" + StartDelimiter + "2" + EndDelimiter,
			want: []Part{{Text: "1", Envelope: true}, {Text: "-"}, {Text: "2", Envelope: true}}},
		{name: "near miss of the start delimiter is text", text: "<<<ORCHESTRATOR_RESPONSE>> <<",
			want: []Part{{Text: "<<<ORCHESTRATOR_RESPONSE>> <<"}}},
		{name: "end delimiter outside an envelope is text", text: EndDelimiter,
			want: []Part{{Text: EndDelimiter}}},
		{name: "seed Parsing Algorithm: missing end delimiter", text: "a" + StartDelimiter + "{",
			want: []Part{{Text: "a" + StartDelimiter + "{"}}, wantErr: ErrUnterminated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Find(tt.text)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parts (-want +got):\n%s", diff)
			}
		})
	}
}

// feedPieces feeds text to a Scanner in pieces cut at cuts, and returns
// every part with adjacent text merged, and Flush's error.
func feedPieces(text string, cuts []int) ([]Part, error) {
	var s Scanner
	var parts []Part
	prev := 0
	for _, c := range append(cuts, len(text)) {
		for _, p := range s.Feed(text[prev:c]) {
			mergePart(&parts, p)
		}
		prev = c
	}
	rest, err := s.Flush()
	for _, p := range rest {
		mergePart(&parts, p)
	}
	return parts, err
}

func mergePart(parts *[]Part, p Part) {
	if p.Envelope {
		*parts = append(*parts, p)
		return
	}
	appendText(parts, p.Text)
}

func TestScannerSplitAtEveryByte(t *testing.T) {
	texts := []string{
		seedExample,
		"x" + StartDelimiter + "1" + EndDelimiter + StartDelimiter + "2" + EndDelimiter + "<<<",
		"<<<<<<ORCHESTRATOR_RESPONSE>>>" + "<<<<END_ORCHESTRATOR_RESPONSE>>>>",
		"a" + StartDelimiter + "unterminated <<<END_",
	}
	for _, text := range texts {
		want, wantErr := Find(text)
		for i := 0; i <= len(text); i++ {
			for _, cuts := range [][]int{{i}, everyByte(len(text))[:i]} {
				got, err := feedPieces(text, cuts)
				if !errors.Is(err, wantErr) || !cmp.Equal(want, got) {
					t.Fatalf("text %q cut at %v: got %+v, %v; want %+v, %v", text, cuts, got, err, want, wantErr)
				}
			}
		}
	}
}

func everyByte(n int) []int {
	cuts := make([]int, n)
	for i := range cuts {
		cuts[i] = i + 1
	}
	return cuts
}

func TestScannerHoldsBackOnlyADelimiterPrefix(t *testing.T) {
	var s Scanner
	text := "hello <<<ORCHESTRATOR_RESP"
	parts := s.Feed(text)
	if len(parts) != 1 || parts[0].Text != "hello " {
		t.Fatalf("Feed = %+v, want the text before the possible delimiter", parts)
	}
	if got, want := len(s.pending), len("<<<ORCHESTRATOR_RESP"); got != want || got >= len(StartDelimiter) {
		t.Errorf("held %d bytes, want %d", got, want)
	}
	parts = s.Feed("X")
	if len(parts) != 1 || parts[0].Text != "<<<ORCHESTRATOR_RESPX" {
		t.Errorf("Feed = %+v, want the held text released", parts)
	}
}

func TestScannerInside(t *testing.T) {
	var s Scanner
	s.Feed("a" + StartDelimiter + "{")
	if !s.Inside() {
		t.Fatal("Inside() = false after the start delimiter")
	}
	if got, want := s.Held(), 1; got != want {
		t.Errorf("Held() = %d, want %d", got, want)
	}
	parts := s.Feed("}" + EndDelimiter)
	if s.Inside() || len(parts) != 1 || !parts[0].Envelope || parts[0].Text != "{}" {
		t.Fatalf("Feed = %+v, Inside() = %v; want the envelope, outside", parts, s.Inside())
	}
	if got := s.Held(); got != 0 {
		t.Errorf("Held() = %d after the envelope, want 0", got)
	}
}

func TestScannerPlainTextFastPath(t *testing.T) {
	var s Scanner
	piece := strings.Repeat("plain ", 100)
	allocs := testing.AllocsPerRun(100, func() { s.Feed(piece) })
	if allocs > 1 {
		t.Errorf("Feed of text without '<' allocates %v times, want at most 1", allocs)
	}
}
