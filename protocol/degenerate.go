package protocol

import (
	"bytes"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/tools"
)

// The thresholds of degenerate text, measured on the fixtures of
// degenerate_test.go: every degenerate answer there (a word, a sentence,
// a marker, a reasoning block repeated) is cut within its first kilobyte
// and a half of repetition (about 400 tokens), and none of the
// legitimate answers (tables, separators, lists, code with similar lines,
// a paragraph quoted twice) is.
const (
	// degenerateSpan is the least text, in bytes, that must be one phrase
	// repeated back to back, exactly.
	degenerateSpan = 1024
	// degenerateReps is the least number of times the phrase must repeat:
	// a paragraph quoted twice is not a loop.
	degenerateReps = 4
	// degenerateWindow is how much of the latest text is kept, in bytes:
	// a phrase up to a quarter of it can be seen repeating.
	degenerateWindow = 4096
	// degenerateEvery is how often, in bytes of new text, the text is
	// looked at: the scan costs one search of the window per look.
	degenerateEvery = 256
	// degenerateNeedle is the length of the end of the text searched for
	// earlier in the window: where it occurred last gives the phrase.
	degenerateNeedle = 32
)

// The outcomes of degenerate text, the outcome label of
// phasegate_degenerate_text_total.
const (
	degenerateReasked  = "reasked"  // the model asked again, once
	degenerateFinished = "finished" // the response finished with a notice
)

// degenerateScan is the rule of degenerate text: a model that repeats a
// phrase in its content or its reasoning (a DeepSeek answer of
// "mechanism mechanism mechanism …", a sentence or a whole reasoning block
// over and over until the output limit) is cut in the stream. It sees
// every text step; its only state is the latest text of the answer it is
// owned by.
type degenerateScan struct {
	content, reasoning repetition
}

// judge decides on a text step: actCut once the text became degenerate,
// with the field and the notice, asking the model again the first time
// in the request and finishing the response after that (final, with
// only a line for the client: a model that repeats itself twice will not
// be told); actPass otherwise.
func (d *degenerateScan) judge(st *Step, v *view) *decision {
	if st.Kind != StepText {
		return nil
	}
	field := d.scan(st.Text, st.Thought)
	switch {
	case field == "":
		return nil
	case v.cut:
		return &decision{act: actCut, label: degenerateFinished, field: field, reason: field, final: true, shown: tools.ShownDegenerate(true)}
	}
	return &decision{act: actCut, label: degenerateReasked, field: field, reason: field, notice: tools.DegenerateNotice, shown: tools.ShownDegenerate(false)}
}

func (*degenerateScan) labels() (decided, counted []string) {
	return []string{degenerateReasked, degenerateFinished}, metrics.DegenerateOutcomes
}

// scan reads the content and reasoning of a step and returns the field
// whose text became degenerate, "content" or "reasoning_content", or "".
func (d *degenerateScan) scan(content, reasoning string) string {
	switch {
	case content != "" && d.content.add(content):
		return "content"
	case reasoning != "" && d.reasoning.add(reasoning):
		return "reasoning_content"
	}
	return ""
}

// repetition keeps the latest text of one field.
type repetition struct {
	buf       []byte
	unchecked int
}

// add appends s and reports whether the text now ends with one phrase
// repeated back to back over at least degenerateSpan bytes and
// degenerateReps times; it looks every degenerateEvery bytes.
func (w *repetition) add(s string) bool {
	w.unchecked += len(s)
	if len(s) > degenerateWindow {
		s = s[len(s)-degenerateWindow:]
	}
	// The buffer grows as text comes (most answers are short) and, past
	// twice the window, keeps the window's worth.
	if w.buf == nil {
		w.buf = make([]byte, 0, degenerateSpan)
	}
	if len(w.buf)+len(s) > 2*degenerateWindow {
		keep := min(len(w.buf), degenerateWindow)
		copy(w.buf, w.buf[len(w.buf)-keep:])
		w.buf = w.buf[:keep]
	}
	w.buf = append(w.buf, s...)
	if w.unchecked < degenerateEvery {
		return false
	}
	w.unchecked = 0
	return repeats(w.buf)
}

// repeats reports whether t ends with a phrase repeated back to back
// over degenerateSpan bytes and degenerateReps times: the end of t is
// searched for earlier in t, which gives the shortest phrase that repeats
// there; then the repetitions of that phrase are counted backwards.
func repeats(t []byte) bool {
	n := len(t)
	if n < degenerateSpan {
		return false
	}
	j := bytes.LastIndex(t[:n-1], t[n-degenerateNeedle:])
	if j < 0 {
		return false
	}
	p := n - degenerateNeedle - j
	last := t[n-p:]
	reps := 1
	for (reps+1)*p <= n && bytes.Equal(t[n-(reps+1)*p:n-reps*p], last) {
		reps++
	}
	return reps >= degenerateReps && reps*p >= degenerateSpan
}
