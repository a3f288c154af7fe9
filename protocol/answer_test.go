package protocol

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/internal/jsonscan"
)

var stepsUpdate = flag.Bool("update-steps", false, "rewrite the golden files of testdata/steps")

// readSSE reads a recorded stream (testdata/deepseek/*.sse) into the data
// of its events; ": cut" ends it with a read error wrapping ErrTruncated.
func readSSE(t testing.TB, path string) iter.Seq2[[]byte, error] {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var events [][]byte
	var cut bool
	var data []string
	end := func() {
		if data != nil {
			events = append(events, []byte(strings.Join(data, "\n")))
			data = nil
		}
	}
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case line == "":
			end()
		case line == ": cut":
			end()
			cut = true
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
		if cut {
			break
		}
	}
	end()
	return eventsOf(events, cut)
}

func eventsOf(events [][]byte, cut bool) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		for _, e := range events {
			if !yield(e, nil) {
				return
			}
		}
		if cut {
			yield(nil, fmt.Errorf("%w: unexpected EOF", ErrTruncated))
		}
	}
}

// render writes the steps of a reader as lines, the text of raw chunks
// decoded, so that a fast path and the decoder can be compared.
func render(r *answerReader, events iter.Seq2[[]byte, error]) (out []string) {
	// Text is shown as the decoder reads it: the fast paths hand on the
	// bytes of unescaped text as they came, invalid UTF-8 included.
	str := func(p *string) string {
		if p == nil {
			return "<nil>"
		}
		return fmt.Sprintf("%q", jsonscan.Unescaped([]byte(*p)))
	}
	defer func() {
		// What the reader read, not only what it passes on: the text the
		// leak scan and the usage estimate saw.
		out = append(out, fmt.Sprintf("read %q", jsonscan.Unescaped(r.gen)))
	}()
	for st, err := range r.steps(events) {
		if err != nil {
			kind := "error"
			if errors.Is(err, ErrInvalidResponse) {
				kind = "invalid"
			} else if errors.Is(err, ErrTruncated) {
				kind = "truncated"
			}
			out = append(out, kind)
			break
		}
		switch st.Kind {
		case StepOpening:
			out = append(out, "opening")
		case StepChunk:
			out = append(out, "chunk "+string(st.Data))
		case StepText:
			if st.Raw {
				c, err := chat.DecodeChunk(st.Data)
				if err != nil || len(c.Choices) == 0 {
					out = append(out, "raw text that does not decode: "+string(st.Data))
					continue
				}
				d := c.Choices[0].Delta
				out = append(out, "text raw content="+str(d.Content)+" reasoning="+str(d.ReasoningContent))
				continue
			}
			out = append(out, "text content="+str(optional(st.Text))+" reasoning="+str(optional(st.Thought)))
		case StepHeld:
			out = append(out, "held content="+str(optional(st.Text)))
		case StepEnvelope:
			out = append(out, "envelope "+st.Text)
		case StepEnvelopeOpen:
			out = append(out, "envelope open")
		case StepEnvelopeOver:
			out = append(out, "envelope over")
		case StepCall:
			out = append(out, fmt.Sprintf("call %s %s id=%s", st.Call.Function.Name, st.Call.Function.Arguments, st.Call.ID))
		case StepLeaked:
			out = append(out, fmt.Sprintf("leaked %s %s err=%v", st.Leak.Call.Function.Name, st.Leak.Call.Function.Arguments, st.Leak.Err != nil))
		case StepFinish:
			out = append(out, fmt.Sprintf("finish %s bare=%v", st.Reason, st.Bare))
		case StepUsage:
			var u any
			_ = json.Unmarshal(st.Usage, &u)
			b, _ := json.Marshal(u)
			out = append(out, "usage "+string(b))
		case StepEnd:
			out = append(out, fmt.Sprintf("end done=%v truncated=%v", st.End == EndDone, st.End == EndTruncated))
		}
	}
	return out
}

// TestAnswerReaderRecorded reads every recorded DeepSeek answer with the
// guard's reader and the pass-through reader; the steps are pinned in
// testdata/steps (go test ./protocol -run TestAnswerReaderRecorded
// -update-steps rewrites them), and the guard's fast paths must give the
// steps the decoder gives.
func TestAnswerReaderRecorded(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "deepseek", "*.sse"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no recorded streams: %v", err)
	}
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".sse")
		t.Run(name, func(t *testing.T) {
			guard := render(&answerReader{guard: true}, readSSE(t, path))
			slow := render(&answerReader{guard: true, slow: true}, readSSE(t, path))
			if diff := cmp.Diff(slow, guard); diff != "" {
				t.Errorf("fast paths differ from the decoder (-decoder +fast):\n%s", diff)
			}
			pass := render(&answerReader{}, readSSE(t, path))
			checkSteps(t, guard)
			checkSteps(t, pass)
			got := "# guard\n" + strings.Join(guard, "\n") + "\n# pass-through\n" + strings.Join(pass, "\n") + "\n"
			golden := filepath.Join("testdata", "steps", name+".golden")
			if *stepsUpdate {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update-steps to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("steps (-golden +got):\n%s", diff)
			}
		})
	}
}

// checkSteps checks the ordering rules every reading obeys: an end or an
// error comes last and once, at most one finish, one call, one leaked
// call and one opening, the opening before any text.
func checkSteps(t *testing.T, steps []string) {
	t.Helper()
	count := map[string]int{}
	if n := len(steps); n > 0 && strings.HasPrefix(steps[n-1], "read ") {
		steps = steps[:n-1] // what the reader read, not a step
	}
	for i, s := range steps {
		kind, _, _ := strings.Cut(s, " ")
		count[kind]++
		last := i == len(steps)-1
		switch kind {
		case "end", "invalid", "truncated", "error":
			if !last {
				t.Errorf("step %d %q is not the last", i, s)
			}
		case "opening":
			if count["text"] > 0 {
				t.Errorf("opening after text")
			}
		case "text", "held", "envelope", "call", "leaked":
			// What the finish settled comes before it: the finish is bare.
			if count["finish"] > 0 {
				t.Errorf("step %d %q after the finish", i, s)
			}
		}
	}
	for _, kind := range []string{"finish", "call", "leaked", "opening"} {
		if count[kind] > 1 {
			t.Errorf("%d %s steps, want at most 1: %q", count[kind], kind, steps)
		}
	}
	if len(steps) > 0 && count["end"]+count["invalid"]+count["truncated"]+count["error"] != 1 {
		t.Errorf("the reading does not end once: %q", steps)
	}
}

// FuzzAnswerReader: any events, read by the guard's reader with and
// without its fast paths, give the same steps, and neither reader panics;
// both obey the ordering rules. Events are the input's lines; a first
// byte 'c' cuts the stream after them.
func FuzzAnswerReader(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "deepseek", "*.sse"))
	for _, p := range paths {
		var lines []string
		for ev, err := range readSSE(f, p) {
			if err == nil {
				lines = append(lines, string(ev))
			}
		}
		f.Add(strings.Join(lines, "\n"))
	}
	f.Add(`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n" +
		`{"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n" + `{"choices":[{"index":0,"delta":{"content":"b\"c"}}]}`)
	f.Add(`{"choices":[{"index":0,"delta":{"content":"x"}}]}` + "\n" + `{"error":{"message":"boom"}}`)
	f.Add(`{"choices":[{"index":0,"delta":{"content":"Plan: <<<ORCHES"}}]}` + "\n" + `{"choices":[{"index":0,"delta":{"content":"TRATOR_RESPONSE>>>{\"phase\":1}<<<END_"}}]}` +
		"\n" + `{"choices":[{"index":0,"delta":{"content":"ORCHESTRATOR_RESPONSE>>> <"}}]}` + "\n" + `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
	f.Fuzz(func(t *testing.T, in string) {
		cut := strings.HasPrefix(in, "c")
		var events [][]byte
		for _, line := range strings.Split(in, "\n") {
			events = append(events, []byte(line))
		}
		fast := render(&answerReader{guard: true}, eventsOf(events, cut))
		slow := render(&answerReader{guard: true, slow: true}, eventsOf(events, cut))
		if diff := cmp.Diff(slow, fast); diff != "" {
			t.Errorf("fast paths differ from the decoder (-decoder +fast):\n%s", diff)
		}
		checkSteps(t, fast)
		fast = render(&answerReader{guard: true, env: &envelopeScan{}}, eventsOf(events, cut))
		slow = render(&answerReader{guard: true, slow: true, env: &envelopeScan{}}, eventsOf(events, cut))
		if diff := cmp.Diff(slow, fast); diff != "" {
			t.Errorf("with the envelope scan, fast paths differ from the decoder (-decoder +fast):\n%s", diff)
		}
		checkSteps(t, fast)
		pass := render(&answerReader{}, eventsOf(events, cut))
		checkSteps(t, pass)
		for _, s := range pass {
			if data, ok := strings.CutPrefix(s, "chunk "); ok && !looksLikeObject([]byte(data)) {
				t.Errorf("the pass-through reader passed on a chunk that is not an object: %s", data)
			}
		}
	})
}
