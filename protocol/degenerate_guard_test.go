package protocol_test

import (
	"strings"
	"testing"

	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/tools"
)

// degenerateStream is an answer that says a little, then repeats one
// word in field until its output limit (after deepseek-ai/DeepSeek-R1
// issue 211, "mechanism mechanism mechanism …").
func degenerateStream(field string) reply {
	s := stream().Role().Content("You can install them with docker-php-ext-install; the ")
	for range 600 {
		if field == "reasoning_content" {
			s.Reasoning("mechanism ")
		} else {
			s.Content("mechanism ")
		}
	}
	return streamReply(s.Finish("length").Done())
}

// TestTwoStageDegenerateText: an answer that repeats one phrase is cut in
// the stream (its upstream closed long before its end), and the model is
// asked once more without the repeated text; a second degenerate answer
// ends the response with a notice. One finish either way.
func TestTwoStageDegenerateText(t *testing.T) {
	good := streamReply(stream().Role().Content("Use docker-php-ext-install gd.").Finish("stop").Done())
	for _, field := range []string{"content", "reasoning_content"} {
		t.Run(field+": asked again", func(t *testing.T) {
			u := newUpstream(t, degenerateStream(field), good)
			rec := &recorder{}
			a := read(t, run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, rec), exchange(newRequest(t, true, history(), ""), u, protocol.Limits{})))
			if r := u.response(t, 0); r.read > r.total/3 {
				t.Errorf("the degenerate answer was read to event %d of %d; want it cut early", r.read, r.total)
			}
			u.checkClosed(t)
			if !strings.HasSuffix(a.content, shown(tools.ShownDegenerate(false))+"Use docker-php-ext-install gd.") || a.finish() != "stop" {
				t.Errorf("content %q, finish %q; want the cut, the notice, then the second answer", a.content, a.finish())
			}
			sent := u.sent()
			if len(sent) != 2 {
				t.Fatalf("upstream calls: %d, want 2", len(sent))
			}
			after := messagesAfter(sent[1], len(sent[0].Messages))
			if len(after) != 1 || after[0].Role != "system" || after[0].Content != tools.DegenerateNotice {
				t.Errorf("the second call appended %+v; want the notice alone, not the repeated text", after)
			}
			if evs := rec.kinds(metrics.TraceDegenerateText); len(evs) != 1 || evs[0].Verdict != "reasked" || evs[0].Reason != field {
				t.Errorf("trace events %+v; want one reasked for %s", evs, field)
			}
		})
	}
	t.Run("twice: finished with a notice", func(t *testing.T) {
		u := newUpstream(t, degenerateStream("content"), degenerateStream("content"))
		rec := &recorder{}
		a := read(t, run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, rec), exchange(newRequest(t, true, history(), ""), u, protocol.Limits{})))
		u.checkClosed(t)
		if !strings.HasSuffix(a.content, shown(tools.ShownDegenerate(true))) || a.finish() != "stop" || len(u.sent()) != 2 {
			t.Errorf("content %q, finish %q, %d upstream calls; want the answer finished with the notice after 2", a.content, a.finish(), len(u.sent()))
		}
		if evs := rec.kinds(metrics.TraceDegenerateText); len(evs) != 2 || evs[1].Verdict != "finished" {
			t.Errorf("trace events %+v; want reasked then finished", evs)
		}
	})
}
