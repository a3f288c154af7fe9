package messages_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/google/go-cmp/cmp"

	"github.com/phasegate/phasegate/chat"
	"github.com/phasegate/phasegate/messages"
)

// decoded is the chat body as JSON values, checked to be a request the
// chat pipeline accepts.
func decoded(t *testing.T, body []byte) map[string]any {
	t.Helper()
	if _, err := chat.ParseRequest(body); err != nil {
		t.Fatalf("the chat pipeline refuses the translation: %v\n%s", err, body)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("chat body is not JSON: %v\n%s", err, body)
	}
	return m
}

func jsonValue(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
	return v
}

// A conversation as the SDK writes it, shaped as Claude Code's: cached
// system blocks and tools, a hosted tool, thinking, a tool call split
// over two assistant messages, an error result.
func TestTranslateAgentConversation(t *testing.T) {
	cached := anthropic.NewCacheControlEphemeralParam()
	params := anthropic.MessageNewParams{
		Model:     "deepseek-v4-pro",
		MaxTokens: 32000,
		System:    []anthropic.TextBlockParam{{Text: "You are an agent."}, {Text: "Be brief.", CacheControl: cached}},
		Messages: []anthropic.MessageParam{
			anthropic.NewUserMessage(anthropic.NewTextBlock("list the files")),
			anthropic.NewAssistantMessage(anthropic.NewThinkingBlock("sig-1", "I should run ls."), anthropic.NewTextBlock("Listing.")),
			anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("toolu_01", map[string]any{"command": "ls"}, "Bash")),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_01", "ls: permission denied", true), anthropic.NewTextBlock("try again")),
		},
		Tools: []anthropic.ToolUnionParam{
			{OfTool: &anthropic.ToolParam{Name: "Bash", Description: anthropic.String("Run a command"), CacheControl: cached,
				InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"command": map[string]any{"type": "string"}}, Required: []string{"command"}}}},
			{OfWebSearchTool20250305: &anthropic.WebSearchTool20250305Param{}},
		},
		ToolChoice:    anthropic.ToolChoiceUnionParam{OfAuto: &anthropic.ToolChoiceAutoParam{DisableParallelToolUse: anthropic.Bool(true)}},
		Thinking:      anthropic.ThinkingConfigParamOfEnabled(10000),
		Metadata:      anthropic.MetadataParam{UserID: anthropic.String("user-7")},
		StopSequences: []string{"<END>"},
	}
	body, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := messages.Translate(body, messages.Config{DeepSeek: true})
	if err != nil {
		t.Fatal(err)
	}
	want := jsonValue(t, `{"model":"deepseek-v4-pro",
	"messages":[
	 {"role":"system","content":"You are an agent.\nBe brief."},
	 {"role":"user","content":"list the files"},
	 {"role":"assistant","content":"Listing.","reasoning_content":"I should run ls.",
	  "tool_calls":[{"id":"toolu_01","type":"function","function":{"name":"Bash","arguments":"{\"command\":\"ls\"}"}}]},
	 {"role":"tool","tool_call_id":"toolu_01","content":"Error: ls: permission denied"},
	 {"role":"user","content":"try again"}],
	"tools":[{"type":"function","function":{"name":"Bash","description":"Run a command",
	  "parameters":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}}],
	"tool_choice":"auto","parallel_tool_calls":false,"max_tokens":32000,"stop":["<END>"],"user":"user-7",
	"thinking":{"type":"enabled"}}`)
	if d := cmp.Diff(want, any(decoded(t, tr.Body))); d != "" {
		t.Errorf("chat body (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"cache_control", "web_search_20250305"}, dropParams(tr.Dropped)); d != "" {
		t.Errorf("dropped (-want +got):\n%s", d)
	}
	if tr.Stream || tr.Reply.Model != "deepseek-v4-pro" || !cmp.Equal(tr.Reply.StopSequences, []string{"<END>"}) {
		t.Errorf("translation = stream %v reply %+v", tr.Stream, tr.Reply)
	}
}

func TestTranslate(t *testing.T) {
	const head = `"model":"m","max_tokens":10,`
	user := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name    string
		body    string
		cfg     messages.Config
		want    map[string]string // chat members, as JSON
		absent  []string          // chat members that must not be there
		dropped []string
	}{
		{name: "stream asks for usage", body: `{` + head + user + `,"stream":true}`,
			want: map[string]string{"stream": "true", "stream_options": `{"include_usage":true}`, "max_completion_tokens": "10"}, absent: []string{"max_tokens"}},
		{name: "no stream", body: `{` + head + user + `,"stream":false}`, absent: []string{"stream", "stream_options"}},
		{name: "string system", body: `{` + head + `"system":"be kind",` + user + `}`,
			want: map[string]string{"messages": `[{"role":"system","content":"be kind"},{"role":"user","content":"hi"}]`}},
		{name: "system messages among the messages", body: `{` + head + `"messages":[{"role":"user","content":"hi"},{"role":"system","content":[{"type":"text","text":"# Environment","cache_control":{"type":"ephemeral"}},{"type":"document","source":{}}]},{"role":"system","content":"cwd: /x"}]}`,
			want:    map[string]string{"messages": `[{"role":"user","content":"hi"},{"role":"system","content":"# Environment\ncwd: /x"}]`},
			dropped: []string{"cache_control", "system.document"}},
		{name: "text kept byte for byte", body: `{` + head + `"messages":[{"role":"user","content":[{"type":"text","text":"caf\u00e9 \ud83d\ude00"},{"type":"text","text":"x"}]}]}`,
			want: map[string]string{"messages": `[{"role":"user","content":"café 😀\nx"}]`}},
		{name: "temperature 0 kept", body: `{` + head + user + `,"temperature":0,"top_p":0.5}`,
			want: map[string]string{"temperature": "0", "top_p": "0.5"}},
		{name: "top_k where the upstream has it", body: `{` + head + user + `,"top_k":5}`, cfg: messages.Config{TopK: true},
			want: map[string]string{"top_k": "5"}},
		{name: "top_k dropped", body: `{` + head + user + `,"top_k":5}`, absent: []string{"top_k"}, dropped: []string{"top_k"}},
		{name: "tool_choice any", body: `{` + head + user + `,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"}}`,
			want: map[string]string{"tool_choice": `"required"`}, absent: []string{"parallel_tool_calls"}},
		{name: "tool_choice tool", body: `{` + head + user + `,"tools":[{"name":"f","input_schema":{"type":"object"},"type":"custom"}],"tool_choice":{"type":"tool","name":"f","disable_parallel_tool_use":false}}`,
			want: map[string]string{"tool_choice": `{"type":"function","function":{"name":"f"}}`}, absent: []string{"parallel_tool_calls"}},
		{name: "tool_choice none", body: `{` + head + user + `,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"none"}}`,
			want: map[string]string{"tool_choice": `"none"`}},
		{name: "tool_choice without tools", body: `{` + head + user + `,"tools":[{"type":"bash_20250124","name":"bash"}],"tool_choice":{"type":"auto"}}`,
			absent: []string{"tool_choice", "tools"}, dropped: []string{"bash_20250124", "tool_choice"}},
		{name: "thinking disabled", body: `{` + head + user + `,"thinking":{"type":"disabled"}}`, cfg: messages.Config{DeepSeek: true},
			want: map[string]string{"thinking": `{"type":"disabled"}`, "max_tokens": "10"}},
		{name: "thinking adaptive", body: `{` + head + user + `,"thinking":{"type":"adaptive"}}`, cfg: messages.Config{DeepSeek: true},
			want: map[string]string{"thinking": `{"type":"enabled"}`}},
		{name: "thinking on another upstream", body: `{` + head + user + `,"thinking":{"type":"enabled","budget_tokens":1024}}`,
			absent: []string{"thinking", "reasoning_effort"}, dropped: []string{"thinking"}},
		{name: "thinking blocks on another upstream", body: `{` + head + `"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"text","text":"a"}]},{"role":"user","content":"q2"}]}`,
			want:    map[string]string{"messages": `[{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"user","content":"q2"}]`},
			dropped: []string{"thinking"}},
		{name: "redacted thinking", body: `{` + head + `"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"redacted_thinking","data":"xx"},{"type":"text","text":"a"}]}]}`,
			cfg: messages.Config{DeepSeek: true}, dropped: []string{"redacted_thinking"}},
		{name: "images", body: `{` + head + `"messages":[{"role":"user","content":[{"type":"text","text":"what?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}},{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]}`,
			cfg:  messages.Config{Images: true},
			want: map[string]string{"messages": `[{"role":"user","content":[{"type":"text","text":"what?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"}},{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]`}},
		{name: "tool result blocks", body: `{` + head + `"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"x"}},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}}]}]}]}`,
			want:    map[string]string{"messages": `[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"a\nb"}]`},
			dropped: []string{"cache_control", "tool_result.image"}},
		{name: "dropped fields", body: `{` + head + user + `,"context_management":{"edits":[]},"output_config":{"effort":"high"},"container":"c","mcp_servers":[],"service_tier":"auto","metadata":{"user_id":"u","team":"t"},"wéird\nkey":1}`,
			want:    map[string]string{"user": `"u"`},
			dropped: []string{"container", "context_management", "mcp_servers", "metadata.team", "output_config", "service_tier", "w__ird_key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := messages.Translate([]byte(tc.body), tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			got := decoded(t, tr.Body)
			for k, v := range tc.want {
				if d := cmp.Diff(jsonValue(t, v), got[k]); d != "" {
					t.Errorf("%s (-want +got):\n%s", k, d)
				}
			}
			for _, k := range tc.absent {
				if v, ok := got[k]; ok {
					t.Errorf("%s = %v, want it absent", k, v)
				}
			}
			if d := cmp.Diff(tc.dropped, dropParams(tr.Dropped)); d != "" {
				t.Errorf("dropped (-want +got):\n%s", d)
			}
		})
	}
}

// Text crosses the door as the client wrote it: no decoding and
// re-encoding changes an escape.
func TestTranslateKeepsText(t *testing.T) {
	text := `"caf\u00e9 \"q\" \/ <tag> \ud83d\ude00"`
	body := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":` + text + `}]}`
	tr, err := messages.Translate([]byte(body), messages.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(tr.Body), `"content":`+text) {
		t.Errorf("chat body %s does not hold the text as written", tr.Body)
	}
}

// What the gateway cannot serve as asked is a 400 that names it.
func TestTranslateRefuses(t *testing.T) {
	const head = `"model":"m","max_tokens":10,`
	user := `"messages":[{"role":"user","content":"hi"}]`
	image := `"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"x"}}]}]`
	for _, tc := range []struct {
		name, body, param string
		cfg               messages.Config
		code              any
	}{
		{name: "empty body", body: ``, param: "model"},
		{name: "not JSON", body: `{"model":`, param: ""},
		{name: "not an object", body: `[1]`, param: ""},
		{name: "no model", body: `{"max_tokens":1,` + user + `}`, param: "model"},
		{name: "no max_tokens", body: `{"model":"m",` + user + `}`, param: "max_tokens"},
		{name: "max_tokens 0", body: `{"model":"m","max_tokens":0,` + user + `}`, param: "max_tokens"},
		{name: "max_tokens a string", body: `{"model":"m","max_tokens":"10",` + user + `}`, param: "max_tokens"},
		{name: "no messages", body: `{` + head + `"system":"s"}`, param: "messages"},
		{name: "empty messages", body: `{` + head + `"messages":[]}`, param: "messages"},
		{name: "tool role", body: `{` + head + `"messages":[{"role":"tool","content":"x"}]}`, param: "messages[0].role"},
		{name: "no content", body: `{` + head + `"messages":[{"role":"user"}]}`, param: "messages[0].content"},
		{name: "content a number", body: `{` + head + `"messages":[{"role":"user","content":1}]}`, param: "messages[0].content"},
		{name: "block without type", body: `{` + head + `"messages":[{"role":"user","content":[{"text":"x"}]}]}`, param: "messages[0].content[0].type"},
		{name: "text not a string", body: `{` + head + `"messages":[{"role":"user","content":[{"type":"text","text":1}]}]}`, param: "messages[0].content[0].text"},
		{name: "image, upstream without images", body: `{` + head + image + `}`, param: "messages[0].content[0]", code: "unsupported_parameter"},
		{name: "image from a file", body: `{` + head + `"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f"}}]}]}`,
			cfg: messages.Config{Images: true}, param: "messages[0].content[0].source.type", code: "unsupported_parameter"},
		{name: "hosted tool refused", body: `{` + head + user + `,"tools":[{"name":"f","input_schema":{}},{"type":"code_execution_20250522","name":"code_execution"}]}`,
			cfg: messages.Config{HostedTools: messages.HostedRefuse}, param: "tools[1].type", code: "unsupported_parameter"},
		{name: "tool without schema", body: `{` + head + user + `,"tools":[{"name":"f"}]}`, param: "tools[0].input_schema"},
		{name: "tool without name", body: `{` + head + user + `,"tools":[{"input_schema":{}}]}`, param: "tools[0].name"},
		{name: "tool_use input an array", body: `{` + head + `"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"c","name":"f","input":[]}]}]}`, param: "messages[0].content[0].input"},
		{name: "tool_result without id", body: `{` + head + `"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, param: "messages[0].content[0].tool_use_id"},
		{name: "temperature a string", body: `{` + head + user + `,"temperature":"hot"}`, param: "temperature"},
		{name: "unknown thinking", body: `{` + head + user + `,"thinking":{"type":"deep"}}`, param: "thinking.type"},
		{name: "unknown tool_choice", body: `{` + head + user + `,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"all"}}`, param: "tool_choice.type"},
		{name: "stream a string", body: `{` + head + user + `,"stream":"yes"}`, param: "stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := messages.Translate([]byte(tc.body), tc.cfg)
			var e *chat.Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want a *chat.Error", err)
			}
			if e.Status != http.StatusBadRequest || e.Type != chat.TypeInvalidRequest {
				t.Errorf("status %d type %s, want 400 invalid_request_error", e.Status, e.Type)
			}
			if param, _ := e.Param.(string); param != tc.param {
				t.Errorf("param = %v, want %q (%s)", e.Param, tc.param, e.Message)
			}
			if e.Code != tc.code {
				t.Errorf("code = %v, want %v", e.Code, tc.code)
			}
		})
	}
}

// Hosted tools are dropped by default, whatever their type.
func TestTranslateDropsHostedTools(t *testing.T) {
	tools := []string{"web_search_20250305", "web_fetch_20250910", "code_execution_20250825", "text_editor_20250728", "bash_20250124", "computer_20250124"}
	var decl []string
	for _, typ := range tools {
		decl = append(decl, fmt.Sprintf(`{"type":%q,"name":"x"}`, typ))
	}
	body := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[` + strings.Join(decl, ",") + `,{"name":"mine","input_schema":{"type":"object"}}]}`
	tr, err := messages.Translate([]byte(body), messages.Config{})
	if err != nil {
		t.Fatal(err)
	}
	req, err := chat.ParseRequest(tr.Body)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Tools) != 1 || req.Tools[0].Function.Name != "mine" {
		t.Errorf("tools = %+v, want the custom tool only", req.Tools)
	}
	want := []chat.Drop{{Param: "bash_20250124", Field: "tools.bash"}, {Param: "code_execution_20250825", Field: "tools.code_execution"},
		{Param: "computer_20250124", Field: "tools.computer"}, {Param: "text_editor_20250728", Field: "tools.text_editor"},
		{Param: "web_fetch_20250910", Field: "tools.web_fetch"}, {Param: "web_search_20250305", Field: "tools.web_search"}}
	if d := cmp.Diff(want, tr.Dropped); d != "" {
		t.Errorf("dropped (-want +got):\n%s", d)
	}
}

// dropParams are the Params of ds.
func dropParams(ds []chat.Drop) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Param)
	}
	return out
}

// Any number of unknown fields makes a bounded list of names.
func TestTranslateDroppedBounded(t *testing.T) {
	var extra []string
	for i := range 100 {
		extra = append(extra, fmt.Sprintf(`"x%03d":1`, i))
	}
	body := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],` + strings.Join(extra, ",") + `}`
	tr, err := messages.Translate([]byte(body), messages.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tr.Dropped); n != 32 {
		t.Errorf("%d names dropped, want 32", n)
	}
	if !slices.Contains(dropParams(tr.Dropped), "more") {
		t.Errorf("dropped %v does not say there were more", tr.Dropped)
	}
}

// count_tokens takes a request without max_tokens, and counts it as a
// prompt: no length, no stream.
func TestCountBody(t *testing.T) {
	tr, err := messages.CountBody([]byte(`{"model":"m","system":"s","messages":[{"role":"user","content":"hi"}],"stream":true,"tools":[{"name":"f","input_schema":{"type":"object"}}]}`), messages.Config{DeepSeek: true})
	if err != nil {
		t.Fatal(err)
	}
	got := decoded(t, tr.Body)
	for _, k := range []string{"max_tokens", "max_completion_tokens", "stream"} {
		if _, ok := got[k]; ok {
			t.Errorf("count body has %s: %s", k, tr.Body)
		}
	}
	if len(got["messages"].([]any)) != 2 || len(got["tools"].([]any)) != 1 {
		t.Errorf("count body = %s", tr.Body)
	}
}

// Keys match exactly once escapes are read, and of a member given twice
// the last counts, as encoding/json reads them.
func TestTranslateKeys(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"escaped keys", `{"m\u006fdel":"m","max_tokens":1,"messag\u0065s":[{"r\u006fle":"user","c\u006fntent":[{"typ\u0065":"text","t\u0065xt":"hi"}]}]}`,
			`[{"role":"user","content":"hi"}]`},
		{"last member counts", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"first"}],"messages":[{"role":"user","content":"a","content":"second"}]}`,
			`[{"role":"user","content":"second"}]`},
		{"escaped values", `{"model":"m","max_tokens":1,"messages":[{"role":"\u0075ser","content":[{"type":"t\u0065xt","text":"x"}]}]}`,
			`[{"role":"user","content":"x"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := messages.Translate([]byte(tc.body), messages.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(jsonValue(t, tc.want), decoded(t, tr.Body)["messages"]); d != "" {
				t.Errorf("messages (-want +got):\n%s", d)
			}
		})
	}
	// Another case is another key: Content is not content.
	_, err := messages.Translate([]byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","Content":"hi"}]}`), messages.Config{})
	var e *chat.Error
	if !errors.As(err, &e) || e.Param != "messages[0].content" {
		t.Errorf("err = %v, want a 400 on messages[0].content", err)
	}
}

// Config.Upstream decides the dialect by the request's model.
func TestTranslateUpstreamByModel(t *testing.T) {
	asked := ""
	cfg := messages.Config{Upstream: func(model string) messages.Config {
		asked = model
		return messages.Config{DeepSeek: strings.HasPrefix(model, "deepseek-")}
	}}
	for _, tc := range []struct{ model, field string }{{"deepseek-v4-flash", "max_tokens"}, {"gpt-5", "max_completion_tokens"}} {
		tr, err := messages.Translate([]byte(`{"model":"`+tc.model+`","max_tokens":7,"messages":[{"role":"user","content":"hi"}]}`), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := decoded(t, tr.Body); got[tc.field] != float64(7) || asked != tc.model {
			t.Errorf("%s: asked for %q, chat body %v; want %s", tc.model, asked, got, tc.field)
		}
	}
}

// A request that creates a message thread is served as any (thread
// dropped); one that continues a thread is a 404 thread_not_found, said
// where Anthropic's SDKs look for it, so that they send the whole
// conversation again.
func TestTranslateThreads(t *testing.T) {
	const head = `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}],`
	tr, err := messages.Translate([]byte(head+`"thread":{"type":"create"}}`), messages.Config{})
	if err != nil || !slices.Equal(dropParams(tr.Dropped), []string{"thread"}) || tr.Dropped[0].Field != "thread" {
		t.Fatalf("create: %v %+v", err, tr)
	}
	_, err = messages.Translate([]byte(head+`"thread":{"type":"continue","previous_message_id":"msg_1"}}`), messages.Config{})
	var ce *chat.Error
	if !errors.As(err, &ce) || ce.Code != messages.CodeThreadNotFound {
		t.Fatalf("continue: %v", err)
	}
	status, body := messages.ErrorResponse(ce)
	var v struct {
		Error struct {
			Type    string `json:"type"`
			Details struct {
				ErrorCode string `json:"error_code"`
			} `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &v); err != nil || status != http.StatusNotFound || v.Error.Type != "not_found_error" || v.Error.Details.ErrorCode != "thread_not_found" {
		t.Errorf("continue answered %d %s", status, body)
	}
}
