package protocol_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/deepseek"
	"github.com/phasegate/phasegate/metrics"
	"github.com/phasegate/phasegate/protocol"
	"github.com/phasegate/phasegate/tools"
)

// dsUpdate rewrites the golden files of testdata/deepseek:
//
//	go test ./protocol/ -run TestDeepSeekGolden -update
var dsUpdate = flag.Bool("update", false, "rewrite the golden files of testdata/deepseek")

// ---------------------------------------------------------------------------
// Recorded-style streams.
//
// testdata/deepseek/CASE.N.sse is the N-th upstream answer of a case, as
// DeepSeek sends it: "data: …" lines, events separated by a blank line,
// comments (": keep-alive") as they come. The comment ": cut" makes the
// stream end there with a read error wrapping protocol.ErrTruncated, as the
// proxy's transport reports a connection dropped mid-stream; a stream that
// just ends without [DONE] is a clean end of body. CASE.golden is what the
// client gets: the upstream calls and what the guard appended to each, the
// trace events that feed the DeepSeek metrics, the response headers and the
// chunks as the proxy writes them, call ids the guard makes normalised.

// dsReadSSE reads a recorded stream into a scripted reply.
func dsReadSSE(t testing.TB, path string) reply {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r reply
	var data []string
	end := func() {
		if data != nil {
			r.data = append(r.data, strings.Join(data, "\n"))
			data = nil
		}
	}
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case line == "":
			end()
		case line == ": cut":
			end()
			r.readErr = fmt.Errorf("%w: unexpected EOF", protocol.ErrTruncated)
			return r
		case strings.HasPrefix(line, ":"):
			// A comment: the transport hands the strategies data only.
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(line, "data:"))
		default:
			t.Fatalf("%s:%d: not an SSE line: %q", path, i+1, line)
		}
	}
	end()
	if r.data == nil {
		r.data = []string{} // a stream with no event is still a stream
	}
	return r
}

// dsReplies reads CASE.1.sse, CASE.2.sse, … in order.
func dsReplies(t testing.TB, name string) []reply {
	t.Helper()
	var out []reply
	for n := 1; n <= 9; n++ {
		path := filepath.Join("testdata", "deepseek", fmt.Sprintf("%s.%d.sse", name, n))
		if _, err := os.Stat(path); err != nil {
			break
		}
		out = append(out, dsReadSSE(t, path))
	}
	if len(out) == 0 {
		t.Fatalf("no testdata/deepseek/%s.1.sse", name)
	}
	return out
}

// dsTools declares, besides the package's tools, a repeatable test runner.
var dsTools = `"tools":[
	{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}},
	{"type":"function","function":{"name":"write_file","parameters":{"type":"object","properties":{"path":{"type":"string"},"text":{"type":"string"}},"required":["path","text"]}}},
	{"type":"function","function":{"name":"list_dir","parameters":{"type":"object","properties":{}}}},
	{"type":"function","function":{"name":"run_tests","parameters":{"type":"object","properties":{}}}}
],"stream_options":{"include_usage":true}`

// dsRan is an executed call with a given result.
func dsRan(id, name, args, result string) []string {
	return []string{
		jsonText(map[string]any{"role": "assistant", "content": "", "reasoning_content": "Call " + name + ".",
			"tool_calls": []any{map[string]any{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args}}}}),
		jsonText(map[string]any{"role": "tool", "tool_call_id": id, "content": result}),
	}
}

// dsCall is a tool call as the client gets it.
type dsCall struct{ Name, Arguments string }

// dsCases are the recorded cases. Besides the golden file, each states what
// the golden must show, so that a careless -update cannot bless a
// regression.
var dsCases = []struct {
	name     string
	messages []string
	cfg      protocol.TwoStageConfig
	// What the client must get.
	wantText   string
	wantCall   *dsCall
	wantFinish string
	// wantLeaks are the leaked_tool_call trace verdicts, in order.
	wantLeaks []string
	// wantTransient are the transient_finish trace verdicts, in order.
	wantTransient []string
	// wantRefused is the verdict of the refused call, "" when none.
	wantRefused string
}{
	{
		name:       "v3_whole",
		messages:   history(),
		wantText:   "I'll read the file first.",
		wantCall:   &dsCall{"read_file", `{"path": "b.go"}`},
		wantFinish: "tool_calls",
		wantLeaks:  []string{"recovered"},
	},
	{
		name:       "v3_tokens",
		messages:   history(),
		wantText:   "Reading it.",
		wantCall:   &dsCall{"read_file", `{"path": "b.go"}`},
		wantFinish: "tool_calls",
		wantLeaks:  []string{"recovered"},
	},
	{
		name:       "v31_bare",
		messages:   history(),
		wantText:   "Listing.",
		wantCall:   &dsCall{"list_dir", `{}`},
		wantFinish: "tool_calls",
		wantLeaks:  []string{"recovered"},
	},
	{
		name:       "dsml",
		messages:   history(),
		wantText:   "Writing the notes.\n\n",
		wantCall:   &dsCall{"write_file", `{"path":"notes.md","text":"a < b && c > d\n两行"}`},
		wantFinish: "tool_calls",
		wantLeaks:  []string{"recovered"},
	},
	{
		name:       "dsml_bars",
		messages:   history(),
		wantText:   "hello",
		wantCall:   &dsCall{"read_file", `{"path":"c.go"}`},
		wantFinish: "tool_calls",
		wantLeaks:  []string{"recovered"},
	},
	{
		name:        "malformed",
		messages:    history(),
		wantText:    "Let me look.a.go holds the main package.",
		wantFinish:  "stop",
		wantLeaks:   []string{"malformed"},
		wantRefused: string(tools.VerdictMalformed),
	},
	{
		name:        "leak_duplicate",
		messages:    history(ran("call_00_ra1", "read_file", `{"path":"a.go"}`)),
		wantText:    "a.go defines main.",
		wantFinish:  "stop",
		wantLeaks:   []string{"recovered"},
		wantRefused: string(tools.VerdictDuplicate),
	},
	{
		name: "code_fence",
		messages: []string{msg("system", "You are a coding agent."),
			msg("user", "Show me, in a code block, what a DeepSeek tool call looks like when it leaks into the text.")},
		wantText: "Here it is:\n\n```text\n<｜tool▁call▁begin｜>read_file<｜tool▁sep｜>{\"path\":\"a.go\"}<｜tool▁call▁end｜>\n```" +
			"\n\nInline too: `<｜DSML｜tool_calls>`.",
		wantFinish: "stop",
	},
	{
		name: "repeatable_changed",
		messages: history(dsRan("call_00_rt1", "run_tests", "{}", "FAIL TestParse: want 2, got 3"),
			dsRan("call_00_wf1", "write_file", `{"path":"parse.go","text":"…"}`, "ok"),
			dsRan("call_00_rt2", "run_tests", "{}", "FAIL TestParse: want 2, got 1")),
		cfg:        protocol.TwoStageConfig{MaxPhaseCycles: 6, RepeatableTools: []string{"run_tests"}},
		wantText:   "Running the tests again.",
		wantCall:   &dsCall{"run_tests", `{}`},
		wantFinish: "tool_calls",
	},
	{
		name: "repeatable_unchanged",
		messages: history(dsRan("call_00_rt1", "run_tests", "{}", "FAIL TestParse: want 2, got 3"),
			dsRan("call_00_rt2", "run_tests", "{}", "FAIL TestParse: want 2, got 3")),
		cfg:         protocol.TwoStageConfig{MaxPhaseCycles: 6, RepeatableTools: []string{"run_tests"}},
		wantText:    "The same test still fails: TestParse expects 2, got 3.",
		wantFinish:  "stop",
		wantRefused: string(tools.VerdictNoProgress),
	},
	{
		name:        "thinking",
		messages:    history(ran("call_00_ra1", "read_file", `{"path":"a.go"}`)),
		wantText:    "a.go defines main.",
		wantFinish:  "stop",
		wantRefused: string(tools.VerdictDuplicate),
	},
	{
		name:          "transient_before",
		messages:      history(),
		wantText:      "a.go defines main.",
		wantFinish:    "stop",
		wantTransient: []string{"retried"},
	},
	{
		name:          "transient_after",
		messages:      history(),
		wantText:      "a.go defines ",
		wantFinish:    protocol.FinishInsufficientResource,
		wantTransient: []string{"passed_on"},
	},
	{
		name:          "transient_eof",
		messages:      history(),
		wantText:      "a.go defines main.",
		wantFinish:    "stop",
		wantTransient: []string{"retried"},
	},
	{
		name:          "transient_cut",
		messages:      history(),
		wantText:      "a.go defines main.",
		wantFinish:    "stop",
		wantTransient: []string{"retried"},
	},
}

// dsGenerated matches the ids the guard makes for calls and chunks.
var dsGenerated = regexp.MustCompile(`\b(call|chatcmpl)-?_?[0-9a-f]{24}\b`)

// dsNormalise replaces generated ids by stable names, in order of
// appearance.
func dsNormalise(s string) string {
	seen := map[string]string{}
	return dsGenerated.ReplaceAllStringFunc(s, func(id string) string {
		if n, ok := seen[id]; ok {
			return n
		}
		prefix := "call_gen"
		if strings.HasPrefix(id, "chatcmpl") {
			prefix = "chatcmpl-gen"
		}
		n := prefix + strconv.Itoa(len(seen)+1)
		seen[id] = n
		return n
	})
}

// dsTraceKinds are the trace events the golden files show: the ones the
// DeepSeek hardening and its metrics hang on.
var dsTraceKinds = []metrics.TraceKind{metrics.TraceLeakedToolCall, metrics.TraceToolCall, metrics.TraceDuplicateToolCall,
	metrics.TraceToolCallRefused, metrics.TraceTransientFinish, metrics.TraceBudgetExhausted}

// dsRender writes what a run did as the golden file shows it.
func dsRender(req *chat.Request, u *fakeUpstream, rec *recorder, res result) string {
	var b strings.Builder
	sent := u.sent()
	fmt.Fprintf(&b, "# upstream calls: %d\n", len(sent))
	for i, s := range sent {
		if extra := s.Messages[len(req.Messages):]; len(extra) > 0 {
			fmt.Fprintf(&b, "# call %d appended:\n", i+1)
			for _, m := range extra {
				b.Write(m.Raw)
				b.WriteByte('\n')
			}
		}
	}
	rec.mu.Lock()
	for _, ev := range rec.events {
		if !slices.Contains(dsTraceKinds, ev.Kind) {
			continue
		}
		fmt.Fprintf(&b, "# trace: %s", ev.Kind)
		for _, kv := range [][2]string{{"tool", ev.Tool}, {"verdict", ev.Verdict}, {"reason", ev.Reason}} {
			if kv[1] != "" {
				fmt.Fprintf(&b, " %s=%q", kv[0], kv[1])
			}
		}
		b.WriteByte('\n')
	}
	rec.mu.Unlock()
	for _, ev := range res.events {
		switch ev.Kind {
		case protocol.KindStart:
			b.WriteString("# response headers\n")
			var names []string
			for k := range ev.Header {
				if strings.HasPrefix(k, "X-Phasegate-") {
					names = append(names, k)
				}
			}
			sort.Strings(names)
			for _, k := range names {
				fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(ev.Header[k], ", "))
			}
			b.WriteString("# client stream\n")
		case protocol.KindChunk:
			fmt.Fprintf(&b, "data: %s\n\n", ev.Data)
		case protocol.KindDone:
			b.WriteString("data: [DONE]\n\n")
		default:
			fmt.Fprintf(&b, "# unexpected event %q\n", ev.Kind)
		}
	}
	if res.err != nil {
		fmt.Fprintf(&b, "# error: %v\n", res.err)
	}
	return dsNormalise(b.String())
}

// dsCheckGolden compares got with testdata/deepseek/NAME.golden, or
// rewrites it under -update.
func dsCheckGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "deepseek", name+".golden")
	if *dsUpdate {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got), rerun with -update if the change is meant:\n%s", path, diff)
	}
}

// TestDeepSeekGolden feeds each recorded stream through the guard and
// compares what the client gets with its golden file.
func TestDeepSeekGolden(t *testing.T) {
	for _, tc := range dsCases {
		t.Run(tc.name, func(t *testing.T) {
			replies := dsReplies(t, tc.name)
			u := newUpstream(t, replies...)
			rec := &recorder{}
			req := newRequest(t, true, tc.messages, dsTools)
			res := run(t, protocol.NewTwoStage(tc.cfg, rec), exchange(req, u, protocol.Limits{}))
			dsCheckGolden(t, tc.name, dsRender(req, u, rec, res))

			a := read(t, res)
			if got := dsVisible(a.content); got != tc.wantText {
				t.Errorf("content without notices: got %q, want %q", got, tc.wantText)
			}
			if a.finish() != tc.wantFinish {
				t.Errorf("finish: got %q, want %q", a.finish(), tc.wantFinish)
			}
			var gotCall *dsCall
			if len(a.calls) == 1 {
				gotCall = &dsCall{a.calls[0].Function.Name, a.calls[0].Function.Arguments}
				if a.calls[0].ID == "" || a.calls[0].Type != "function" {
					t.Errorf("forwarded call id %q type %q: want an id and type function", a.calls[0].ID, a.calls[0].Type)
				}
			}
			if diff := cmp.Diff(tc.wantCall, gotCall); diff != "" {
				t.Errorf("forwarded call (-want +got):\n%s", diff)
			}
			if got := dsVerdicts(rec, metrics.TraceLeakedToolCall); !slices.Equal(got, tc.wantLeaks) {
				t.Errorf("leaked_tool_call verdicts: got %q, want %q", got, tc.wantLeaks)
			}
			if got := dsVerdicts(rec, metrics.TraceTransientFinish); !slices.Equal(got, tc.wantTransient) {
				t.Errorf("transient_finish verdicts: got %q, want %q", got, tc.wantTransient)
			}
			var refused []string
			for _, ev := range rec.kinds(metrics.TraceToolCall) {
				if ev.Verdict != string(tools.VerdictForward) {
					refused = append(refused, ev.Verdict)
				}
			}
			if tc.wantRefused == "" && len(refused) > 0 || tc.wantRefused != "" && !slices.Equal(refused, []string{tc.wantRefused}) {
				t.Errorf("refusals: got %q, want [%s]", refused, tc.wantRefused)
			}
			if n, want := len(u.sent()), len(replies); n != want {
				t.Errorf("upstream calls: got %d, want %d (one per recorded answer)", n, want)
			}
			u.checkClosed(t)
		})
	}
}

// dsVisible is the content without the guard's notices: each a paragraph
// "**System Notice**: …\n\n", after "\n\n" unless it follows another.
func dsVisible(content string) string {
	const mark = "**System Notice**: "
	for {
		i := strings.Index(content, mark)
		if i < 0 {
			return content
		}
		j := strings.Index(content[i+len(mark):], "\n\n")
		if j < 0 {
			return content
		}
		start := i
		if strings.HasSuffix(content[:i], "\n\n") {
			start -= 2
		}
		content = content[:start] + content[i+len(mark)+j+2:]
	}
}

func dsVerdicts(rec *recorder, kind metrics.TraceKind) []string {
	var out []string
	for _, ev := range rec.kinds(kind) {
		out = append(out, ev.Verdict)
	}
	return out
}

// TestDeepSeekGoldenFiles keeps testdata/deepseek tidy: every stream and
// golden file belongs to a case, and every case has its golden file.
func TestDeepSeekGoldenFiles(t *testing.T) {
	names := map[string]bool{}
	for _, tc := range dsCases {
		names[tc.name] = true
	}
	files, err := filepath.Glob(filepath.Join("testdata", "deepseek", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		base := filepath.Base(f)
		name, _, _ := strings.Cut(base, ".")
		if !names[name] {
			t.Errorf("%s belongs to no case of dsCases", f)
		}
	}
	for name := range names {
		if _, err := os.Stat(filepath.Join("testdata", "deepseek", name+".golden")); err != nil && !*dsUpdate {
			t.Errorf("case %s has no golden file: %v", name, err)
		}
	}
}

// TestDeepSeekRefusedReasoningCarried: in thinking mode the re-ask after a
// refusal carries the refused answer's reasoning_content, and every
// reasoning chunk of both answers reached the client.
func TestDeepSeekRefusedReasoningCarried(t *testing.T) {
	replies := dsReplies(t, "thinking")
	u := newUpstream(t, replies...)
	req := newRequest(t, true, history(ran("call_00_ra1", "read_file", `{"path":"a.go"}`)), dsTools)
	a := read(t, run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), exchange(req, u, protocol.Limits{})))
	if want := "The user wants a summary. Read a.go again.I have a.go already."; a.reasoning != want {
		t.Errorf("reasoning the client got: %q, want %q", a.reasoning, want)
	}
	sent := u.sent()
	if len(sent) != 2 {
		t.Fatalf("upstream calls: got %d, want 2", len(sent))
	}
	got := messagesAfter(sent[1], len(req.Messages))
	want := []sentMessage{
		{Role: chat.RoleAssistant, Reasoning: ptr("The user wants a summary. Read a.go again.")},
		{Role: chat.RoleSystem, Content: duplicateNotice(1, 3, 2, 3)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("messages appended to the re-ask (-want +got):\n%s", diff)
	}
}

// ---------------------------------------------------------------------------
// Splits.

// dsContentChunk is a content chunk written by hand: bytes from 0x80 up
// stay as they are, so a piece may end inside a UTF-8 sequence, which
// encoding/json would turn into U+FFFD.
func dsContentChunk(piece string) string {
	var b strings.Builder
	for i := 0; i < len(piece); i++ {
		switch c := piece[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	return rawChunk(`{"content":"`+b.String()+`"}`, "", "")
}

// dsSplitReply is an answer whose content comes in the given pieces and
// finishes with stop, as DeepSeek finishes an answer whose call leaked.
func dsSplitReply(pieces []string) reply {
	r := reply{data: []string{rawChunk(`{"role":"assistant","content":""}`, "", "")}}
	for _, p := range pieces {
		r.data = append(r.data, dsContentChunk(p))
	}
	r.data = append(r.data, rawChunk(`{"content":""}`, "stop", ""), chat.Done)
	return r
}

// dsSplitContents are contents whose markers the split tests cut at every
// byte: what the client must see of each, whatever the cut.
var dsSplitContents = []struct {
	name    string
	content string
	text    string
	call    *dsCall
}{
	{
		name:    "v3",
		content: "I'll read it. <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>read_file\n```json\n{\"path\": \"b.go\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		text:    "I'll read it. ",
		call:    &dsCall{"read_file", `{"path": "b.go"}`},
	},
	{
		name:    "v3.1 bare",
		content: "Listing <｜tool▁call▁begin｜>list_dir<｜tool▁sep｜>{}<｜tool▁call▁end｜>",
		text:    "Listing ",
		call:    &dsCall{"list_dir", `{}`},
	},
	{
		name:    "dsml",
		content: "Notes:<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"write_file\">\n<｜DSML｜parameter name=\"path\" string=\"true\">n.md</｜DSML｜parameter>\n<｜DSML｜parameter name=\"text\" string=\"true\">x<y</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
		text:    "Notes:",
		call:    &dsCall{"write_file", `{"path":"n.md","text":"x<y"}`},
	},
	{
		name:    "‖DSML‖",
		content: "hello<‖DSML‖tool_calls><‖DSML‖invoke name='read_file'><‖DSML‖parameter name='path' string='true'>c.go</‖DSML‖parameter></‖DSML‖invoke></‖DSML‖tool_calls>",
		text:    "hello",
		call:    &dsCall{"read_file", `{"path":"c.go"}`},
	},
	{
		name:    "v3 without escapes",
		content: "ok<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>list_dir{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		text:    "ok",
		call:    &dsCall{"list_dir", `{}`},
	},
	{
		name:    "marker in a code block",
		content: "Raw:\n```\n<｜tool▁call▁begin｜>list_dir<｜tool▁sep｜>{}<｜tool▁call▁end｜>\n```\nand `<｜DSML｜tool_calls>` inline.",
		text:    "Raw:\n```\n<｜tool▁call▁begin｜>list_dir<｜tool▁sep｜>{}<｜tool▁call▁end｜>\n```\nand `<｜DSML｜tool_calls>` inline.",
	},
}

// dsClientSees runs one answer through the guard and returns the text and
// the call the client got, checking the invariants of read. The text is
// read from the chunks' raw bytes, so that bytes the guard forwarded as
// they came are compared as they came, even a piece of a UTF-8 sequence.
func dsClientSees(t *testing.T, r reply) (string, *dsCall, string) {
	t.Helper()
	u := newUpstream(t, r)
	a := read(t, run(t, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), exchange(newRequest(t, true, history(), ""), u, protocol.Limits{})))
	u.checkClosed(t)
	var call *dsCall
	if len(a.calls) == 1 {
		call = &dsCall{a.calls[0].Function.Name, a.calls[0].Function.Arguments}
	}
	var text strings.Builder
	for _, c := range a.chunks {
		var raw struct {
			Choices []struct {
				Delta struct {
					Content json.RawMessage `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(c.raw, &raw); err != nil {
			t.Fatalf("chunk does not decode: %v", err)
		}
		for _, ch := range raw.Choices {
			text.WriteString(dsUnquote(t, ch.Delta.Content))
		}
	}
	return text.String(), call, a.finish()
}

// dsUnquote decodes a JSON string without checking its UTF-8: encoding/json
// would turn each stray byte into U+FFFD.
func dsUnquote(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		t.Fatalf("content is not a string: %s", raw)
	}
	in := raw[1 : len(raw)-1]
	var b strings.Builder
	for i := 0; i < len(in); i++ {
		if in[i] != '\\' {
			b.WriteByte(in[i])
			continue
		}
		i++
		switch in[i] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			n, err := strconv.ParseUint(string(in[i+1:i+5]), 16, 32)
			if err != nil {
				t.Fatalf("bad escape in %s", raw)
			}
			b.WriteRune(rune(n))
			i += 4
		default:
			b.WriteByte(in[i])
		}
	}
	return b.String()
}

// dsNeedsEscape reports whether s holds a byte a JSON string must escape.
func dsNeedsEscape(s string) bool { return strings.ContainsAny(s, "\"\\\n\r\t") }

// TestDeepSeekLeakSplits cuts each content in two at every byte, markers
// and their three-byte bars included, and also sends it one byte per
// chunk: the client sees the same text and the same call every time.
//
// A cut inside a UTF-8 sequence leaves pieces no valid JSON can carry (RFC
// 8259 §8.1; serving stacks hold an incomplete character back). Such pieces
// are written raw anyway, and the guard reassembles them, when the content
// needs no JSON escape: its chunks then take the path that reads content
// without decoding. A piece that also holds an escape is decoded by
// encoding/json, which turns the stray bytes into U+FFFD before any scanner
// sees them; those cuts are left out (and counted), the rune-boundary cuts
// of the same content are all checked.
func TestDeepSeekLeakSplits(t *testing.T) {
	for _, tc := range dsSplitContents {
		t.Run(tc.name, func(t *testing.T) {
			wantFinish := "stop"
			if tc.call != nil {
				wantFinish = "tool_calls"
			}
			check := func(t *testing.T, how string, pieces []string) {
				t.Helper()
				text, call, finish := dsClientSees(t, dsSplitReply(pieces))
				if text != tc.text || !cmp.Equal(call, tc.call) || finish != wantFinish {
					t.Errorf("%s: client got text %q, call %+v, finish %q; want %q, %+v, %q", how, text, call, finish, tc.text, tc.call, wantFinish)
				}
			}
			check(t, "whole", []string{tc.content})
			checked, unrepresentable := 0, 0
			for cut := 1; cut < len(tc.content); cut++ {
				a, b := tc.content[:cut], tc.content[cut:]
				if !utf8.ValidString(a) && (dsNeedsEscape(a) || dsNeedsEscape(b)) {
					unrepresentable++
					continue
				}
				checked++
				check(t, fmt.Sprintf("cut at byte %d", cut), []string{a, b})
			}
			if !dsNeedsEscape(tc.content) {
				bytesEach := make([]string, len(tc.content))
				for i := 0; i < len(tc.content); i++ {
					bytesEach[i] = tc.content[i : i+1]
				}
				check(t, "one byte a chunk", bytesEach)
			} else {
				check(t, "one rune a chunk", strings.Split(tc.content, ""))
			}
			t.Logf("%d of %d cuts checked; %d inside a UTF-8 sequence of a content with JSON escapes", checked, len(tc.content)-1, unrepresentable)
		})
	}
}

// ---------------------------------------------------------------------------
// The standard route.

// TestDeepSeekStandardPassesLeaksThrough: the pass-through stays pure:
// leaked markers reach the client byte for byte, as the upstream sent them,
// with nothing recovered and no metadata added.
func TestDeepSeekStandardPassesLeaksThrough(t *testing.T) {
	for _, name := range []string{"v3_whole", "v3_tokens", "v31_bare", "dsml", "dsml_bars", "malformed", "code_fence"} {
		t.Run(name, func(t *testing.T) {
			want := dsReplies(t, name)[0]
			u := newUpstream(t, want)
			res := run(t, protocol.Standard{}, exchange(newRequest(t, true, history(), dsTools), u, protocol.Limits{}))
			if res.err != nil {
				t.Fatalf("run error: %v", res.err)
			}
			var got []string
			for _, ev := range res.events {
				switch ev.Kind {
				case protocol.KindChunk:
					if ev.Ext != nil {
						t.Errorf("the pass-through added metadata: %s", ev.Ext)
					}
					got = append(got, string(ev.Data))
				case protocol.KindDone:
					got = append(got, chat.Done)
				}
			}
			if diff := cmp.Diff(want.data, got); diff != "" {
				t.Errorf("events (-upstream +client):\n%s", diff)
			}
			if n := len(u.sent()); n != 1 {
				t.Errorf("upstream calls: got %d, want 1", n)
			}
		})
	}
}

// TestDeepSeekStandardCutRetried: on the standard route too, a stream cut
// (a read error) before anything was said is retried unseen: the client
// has the first answer's opening chunk, then the second answer's other
// chunks byte for byte, marked Again (the proxy gives them the first
// one's identity).
func TestDeepSeekStandardCutRetried(t *testing.T) {
	replies := dsReplies(t, "transient_cut")
	u := newUpstream(t, replies...)
	res := run(t, protocol.Standard{}, exchange(newRequest(t, true, history(), dsTools), u, protocol.Limits{}))
	if res.err != nil {
		t.Fatalf("run error: %v", res.err)
	}
	var got []string
	for _, ev := range res.events {
		if ev.Kind == protocol.KindChunk {
			got = append(got, string(ev.Data))
			if again := len(got) > 1; ev.Again != again {
				t.Errorf("chunk %d: Again = %v, want %v", len(got), ev.Again, again)
			}
		}
	}
	want := append([]string{replies[0].data[0]}, replies[1].data[1:len(replies[1].data)-1]...)
	if !cmp.Equal(want, got) {
		t.Errorf("chunks: got %d, want the first opening and the second answer's other %d byte for byte:\n%s", len(got), len(want)-1, cmp.Diff(want, got))
	}
}

// ---------------------------------------------------------------------------
// Benchmarks.

// dsBenchStream is a 200-chunk answer as DeepSeek writes it (no HTML
// escaping of '<', '>' and '&'): the opening chunk, 197 content chunks
// holding first, then pieces in turn, the finish and the usage chunk.
// dsOrder is the piece a bench stream says at position i, of n: in a
// fixed order that does not repeat itself, as a model's text does not (a
// text that repeats one phrase over and over is degenerate, and the guard
// cuts it).
func dsOrder(i, n int) int { return int(uint32(i)*2654435761>>16) % n }

func dsBenchStream(first []string, pieces ...string) [][]byte {
	r := dsSplitReply(nil)
	data := append([]string(nil), r.data[0])
	all := append([]string(nil), first...)
	for i := range 197 - len(first) {
		all = append(all, pieces[dsOrder(i, len(pieces))])
	}
	for _, p := range all {
		data = append(data, dsContentChunk(p))
	}
	data = append(data, rawChunk(`{"content":""}`, "stop", ""),
		`{"id":"chatcmpl-proxytest","object":"chat.completion.chunk","created":1767225600,"model":"`+model+`","choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":197,"total_tokens":1197}}`,
		chat.Done)
	return benchData(reply{data: data})
}

// The content pieces of the benchmark streams.
var (
	dsPlainPieces   = []string{"word ", "and ", "more ", "text. "}
	dsNewlinePieces = []string{"word\n", "and ", "\"more\" ", "text.\n"}
	dsLTPieces      = []string{"a <b>bold</b> ", "x < y ", "<br/> ", "text "}
	dsMarkerPieces  = []string{"<｜tool", " is not a marker ", "<｜DSML｜para", "meter only "}
	dsCodeFirst     = []string{"```text\n"}
	dsCodePieces    = []string{"<｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜> ", "<｜tool▁call▁begin｜>g<｜tool▁sep｜>{}<｜tool▁call▁end｜> ",
		"<｜tool▁call▁begin｜>h<｜tool▁sep｜>{}<｜tool▁call▁end｜> ", "<｜tool▁call▁begin｜>k<｜tool▁sep｜>{}<｜tool▁call▁end｜> "}
	dsLeakPieces = []string{"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "function", "<｜tool▁sep｜>", "read_file\n```json\n",
		`{"path": "b.go"}`, "\n```", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"}
	dsLeakPlainCount = 197 - len(dsLeakPieces)
)

// dsLeakStream is 188 plain chunks, then a leaked call in 9 pieces; the
// last closes the block.
func dsLeakStream() [][]byte {
	var plain []string
	for i := range dsLeakPlainCount {
		plain = append(plain, dsPlainPieces[dsOrder(i, len(dsPlainPieces))])
	}
	return dsBenchStream(append(plain, dsLeakPieces...), "unused")
}

// BenchmarkGuardText measures what the leak scanning costs on the hot path:
// the guard serving 200 text chunks, with no '<' in the content (the
// scanner passes each piece on without copying), with newlines and quotes
// (JSON escapes: the content is decoded, whatever the scanner does), with
// HTML-ish '<' the scanner must look at, with marker-like text it holds a
// few bytes of and writes back as chunks of its own, with markers inside a
// code block (text), and with a leaked call closing the stream, recovered
// and forwarded. The standard pass-through of the plain stream is the
// floor; BenchmarkLeakScannerText is the scanner alone.
func BenchmarkGuardText(b *testing.B) {
	guard := protocol.NewTwoStage(protocol.TwoStageConfig{}, nil)
	envelope := protocol.Limits{Envelope: protocol.EnvelopeOptional}
	for _, bc := range []struct {
		name   string
		s      protocol.Strategy
		data   [][]byte
		limits protocol.Limits
	}{
		{"standard/plain", protocol.Standard{}, dsBenchStream(nil, dsPlainPieces...), protocol.Limits{}},
		{"guard/plain", guard, dsBenchStream(nil, dsPlainPieces...), protocol.Limits{}},
		{"guard/newlines", guard, dsBenchStream(nil, dsNewlinePieces...), protocol.Limits{}},
		{"guard/lt", guard, dsBenchStream(nil, dsLTPieces...), protocol.Limits{}},
		{"guard/marker-prefixes", guard, dsBenchStream(nil, dsMarkerPieces...), protocol.Limits{}},
		{"guard/markers-in-code", guard, dsBenchStream(dsCodeFirst, dsCodePieces...), protocol.Limits{}},
		{"guard/leaked-call", guard, dsLeakStream(), protocol.Limits{}},
		{"guard+envelope/plain", guard, dsBenchStream(nil, dsPlainPieces...), envelope},
		{"guard+envelope/lt", guard, dsBenchStream(nil, dsLTPieces...), envelope},
		{"guard+envelope/2KB-envelope", guard, dsBenchStream(envelopePieces(), dsPlainPieces...), envelope},
	} {
		b.Run(bc.name, func(b *testing.B) {
			u := &benchUpstream{data: bc.data}
			x := exchange(newRequest(b, true, history(), ""), u, bc.limits)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				for _, err := range bc.s.Run(ctx, x) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(u.read), "ns/chunk")
		})
	}
}

// envelopePieces is a 2 KB valid task_list envelope in pieces of 16
// bytes, with text before and after.
func envelopePieces() []string {
	task := `{"id": "task_001", "title": "REST API", "description": "Document the REST endpoints", "scope": ["server.js"], "priority": 1}`
	text := "Here is the plan.\n<<<ORCHESTRATOR_RESPONSE>>>\n{\"phase\": \"task_list\", \"data\": {\"tasks\": [" +
		strings.Repeat(task+",", 15) + task + "]}}\n<<<END_ORCHESTRATOR_RESPONSE>>>\nDone."
	var out []string
	for i := 0; i < len(text); i += 16 {
		out = append(out, text[i:min(i+16, len(text))])
	}
	return out
}

// BenchmarkLeakForwardDelay measures the delay between the upstream
// handing over the chunk that closes a leaked call and the consumer
// receiving the recovered call, as BenchmarkForwardDelay does for a native
// one.
func BenchmarkLeakForwardDelay(b *testing.B) {
	last := 1 + len(dsLeakPieces) + dsLeakPlainCount - 1 // the opening chunk, then the content chunks
	benchForward(b, protocol.NewTwoStage(protocol.TwoStageConfig{}, nil), dsLeakStream(), last, func(ev protocol.Event) bool {
		return strings.Contains(string(ev.Data), `"tool_calls"`)
	})
}

// BenchmarkLeakScannerText is the scanner alone on the content pieces of
// the benchmark streams: its share of the guard's cost per chunk.
func BenchmarkLeakScannerText(b *testing.B) {
	for _, bc := range []struct {
		name   string
		pieces []string
	}{
		{"plain", dsPlainPieces},
		{"newlines", dsNewlinePieces},
		{"lt", dsLTPieces},
		{"marker-prefixes", dsMarkerPieces},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				var s deepseek.LeakScanner
				for i := range 197 {
					s.Feed(bc.pieces[i%len(bc.pieces)])
					n++
				}
				s.Flush()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/chunk")
		})
	}
}

// TestDeepSeekBenchStreams keeps the benchmark inputs honest: the text
// streams come through as their text, every byte, and the leaked one as
// its plain text and the call.
func TestDeepSeekBenchStreams(t *testing.T) {
	// text is the first pieces, then n of pieces in turn.
	text := func(first []string, n int, pieces []string) string {
		var b strings.Builder
		b.WriteString(strings.Join(first, ""))
		for i := range n {
			b.WriteString(pieces[dsOrder(i, len(pieces))])
		}
		return b.String()
	}
	tests := []struct {
		name     string
		data     [][]byte
		wantText string
		wantCall *dsCall
	}{
		{"plain", dsBenchStream(nil, dsPlainPieces...), text(nil, 197, dsPlainPieces), nil},
		{"newlines", dsBenchStream(nil, dsNewlinePieces...), text(nil, 197, dsNewlinePieces), nil},
		{"lt", dsBenchStream(nil, dsLTPieces...), text(nil, 197, dsLTPieces), nil},
		{"marker-prefixes", dsBenchStream(nil, dsMarkerPieces...), text(nil, 197, dsMarkerPieces), nil},
		{"markers-in-code", dsBenchStream(dsCodeFirst, dsCodePieces...), text(dsCodeFirst, 196, dsCodePieces), nil},
		{"leaked-call", dsLeakStream(), text(nil, dsLeakPlainCount, dsPlainPieces), &dsCall{"read_file", `{"path": "b.go"}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if n := len(tt.data); n != 201 {
				t.Fatalf("stream has %d events, want 200 chunks and [DONE]", n)
			}
			var r reply
			for _, d := range tt.data {
				r.data = append(r.data, string(d))
			}
			got, call, _ := dsClientSees(t, r)
			if got != tt.wantText {
				t.Errorf("text: got %d bytes, want %d: %q", len(got), len(tt.wantText), got)
			}
			if !cmp.Equal(call, tt.wantCall) {
				t.Errorf("call: got %+v, want %+v", call, tt.wantCall)
			}
		})
	}
}
